// The `serve` role: the real relay (VoiceCatServerCore) on a free loopback port, in
// a process of its own so its CPU is nobody else's. Channels configured in code:
//   Lobby     the default speech channel (20 ms frames)
//   Lobby10   the same settings with 10 ms frames (the latency benchmark)
// and 64 streams per user, so one talker session can carry every stream of a run.
import Glibc
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatSystem

enum BenchChannels {
    static let speech20 = "Lobby"
    static let speech10 = "Lobby10"

    static var all: [ChannelConfig] {
        var ten = AudioConfig.speech
        ten.frameMicros = 10_000
        return [ChannelConfig(name: speech20, audio: .speech), ChannelConfig(name: speech10, audio: ten)]
    }
}

func runServer(_ args: Arguments) throws {
    pinToCPUsIfAsked(args)
    var tmpl = Array("/tmp/bench-audio-XXXXXX".utf8CString)
    guard let d = mkdtemp(&tmpl) else { fail("mkdtemp: \(errno)") }
    let dir = String(cString: d)
    var config = ServerConfig()
    config.anyPort = true
    config.identityPath = dir + "/identity.key"
    config.channels = BenchChannels.all
    config.maxStreamsPerUser = 64
    config.maxUsers = 64
    let server = try Server(config: config)
    server.log = { _ in }
    server.start()
    ParentWatch.shared.start()
    report("port", Double(server.port))
    report("fingerprint", text: server.fingerprint)
    say("ready")
    ParentWatch.shared.wait()
    let c = server.countersSnapshot()
    server.stop()
    unlink(config.identityPath)
    rmdir(dir)
    report("voice_in", Double(c.voiceRelayedIn))
    report("voice_out", Double(c.voiceRelayedOut))
    report("media_drops", Double(c.mediaDrops))
    report("send_failed", Double(c.dropSendFailed))
    say("done")
}
