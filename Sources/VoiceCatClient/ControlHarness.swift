// Drives the network thread's control handling with decoded messages, without
// sockets or threads: the fuzz target (voicecat-fuzz) feeds it what a hostile
// server could send, in any order, and renders the mix after each input, so a
// message the client should have refused shows up as a crash or a hang there.
import VoiceCatAudio
import VoiceCatDevices
import VoiceCatProtocol
import VoiceCatSystem

public final class ControlHarness {
    /// Answers the handler would send to the server: kept nowhere.
    final class Discard: ControlSender {
        let keys: SessionKeys
        init(keys: SessionKeys) { self.keys = keys }
        func send(_ m: ControlMessage) throws {}
    }

    let client: VoiceClient
    let sender: Discard
    var media = MediaPathState(nowMs: 0)
    let mix: UnsafeMutablePointer<Int16>
    static let maxRender = 2880

    public init() throws {
        var cfg = ClientConfig()
        cfg.externalPlayback = true
        cfg.knownServersPath = ""
        cfg.maxRemoteStreams = 4
        cfg.eventQueueSize = 16
        cfg.backend = MemoryAudioBackend()
        client = try VoiceClient(config: cfg)
        // Session keys from an in-memory handshake (the handler derives rebind keys from them).
        let hs = ClientHandshake()
        let (reply, _) = try ServerHandshake.respond(clientHello: hs.helloBytes, identity: IdentityKey())
        sender = Discard(keys: try hs.finish(serverHello: reply, pinnedFingerprint: nil).keys)
        mix = .allocate(capacity: ControlHarness.maxRender * 2)
        reset()
    }

    deinit { mix.deallocate() }

    /// The stream the session publishes (as a stream start leaves it, with no media
    /// path), so loss feedback naming it reaches its FEC policy and its encoder.
    public static let publishedStreamID: UInt32 = 1 << 8 | 1
    public static let publishedSSRC: UInt32 = 7

    /// A session as connect leaves it: Hello answered (channels Lobby and Music), in no
    /// channel, one stream published.
    public func reset() {
        client.leaveChannelLocally()
        client.events.deliver()
        let table = client.streams
        table.slots[0].lock.withLock { table.slots[0].generation = 0 }   // so the stream id is always the same
        if let id = try? table.reserve(), id == ControlHarness.publishedStreamID, let slot = table.slot(for: id),
           let s = try? LocalStream(streamID: id, ssrc: ControlHarness.publishedSSRC, kind: .mic, externalFeed: true, inputChannels: 1,
                                    audio: .speech, slot: slot, table: table) {
            table.install(s)
            client.localStreamCount.wrappingAdd(1, ordering: .relaxed)
        }
        client.cond.withLock {
            client.hello = HelloResult(sessionID: 1, userID: 1, bindingID: 1, serverName: "fuzz",
                                       channels: [ChannelInfo(id: 1, name: "Lobby", audio: .speech),
                                                  ChannelInfo(id: 2, name: "Music", audio: .music)])
            client.usernames = [1: "fuzz"]
            client.roster = [1: UserPresence(userID: 1, username: "fuzz")]
            client.phase = .connected
        }
        media = MediaPathState(nowMs: 0)
        media.rebindRequestedMs = 0
        media.rebindEpoch = 1
    }

    /// One control plaintext (`u16 type | protobuf`), decoded and handled as the
    /// network thread would; an undecodable one is refused the same way.
    public func handle(plaintext: [UInt8]) {
        do {
            let m = try ControlMessage.decode(plaintext)
            client.handleControl(m, sender: sender, media: &media)
        } catch {
            if case .body(let t, let e) = error { client.refuseUndecodable(UndecodableMessage(type: t, detail: "\(e)")) }
        }
        client.events.deliver()
    }

    /// Renders `frames` (at most 2880) of the mix of whatever streams were added.
    public func render(frames: Int) {
        try? client.readMixed(into: mix, frames: min(frames, ControlHarness.maxRender))
    }

    /// Remote streams being received (each one's config passed the client's checks).
    public var remoteStreamCount: Int { client.remoteStreams().count }

    /// The published stream's send statistics (its loss protection).
    public var publishedStats: SendStats? { try? client.sendStats(streamID: ControlHarness.publishedStreamID) }
}
