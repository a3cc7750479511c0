// The `talk` role: one protocol session that publishes N streams and sends
// pre-encoded Opus packets on them in real time. It speaks the wire protocol through
// WireClient (VoiceCatTestSupport: the protocol module on blocking sockets, the same
// client the server tests and voicecat-loadgen use), not through the client engine,
// so that N talkers cost this machine only a seal and a sendto per frame, not N Opus
// encoders: the listener being measured shares the machine's two cores with it.
//
// One session carries all N streams (the `serve` role allows 64 per user), so the
// server relays each frame to the listener alone; the streams' send times are
// spread evenly over the frame period, as independent talkers' would be.
import Glibc
import VoiceCatProtocol
import VoiceCatSystem
import VoiceCatTestSupport

/// Reads and drops whatever control messages arrived (non-blocking).
func discardControl(_ c: WireClient) {
    var buf = [UInt8](repeating: 0, count: 4096)
    while (try? c.tcp.waitFor(events: Int16(POLLIN), timeoutMs: 0)) == true,
          let n = try? buf.withUnsafeMutableBytes({ try c.tcp.read(into: $0) }), n > 0 {
        c.opener.append(buf[0..<n])
        while (try? c.opener.next()) != nil {}
    }
}

/// `talk --port P --channel NAME --streams N`: sends until stdin closes.
func runTalker(_ args: Arguments) throws {
    pinToCPUsIfAsked(args)
    let n = args.int("streams", 1)
    let session = try WireClient.login(port: UInt16(args.int("port", 0)), username: "talker-\(getpid())")
    try session.bind()
    let join = try session.join(args.string("channel", "Lobby"))
    let audio = join.audio
    var ssrcs: [UInt32] = []
    for i in 0..<n { ssrcs.append(try session.announce(streamID: UInt32(i + 1)).ssrc) }
    let pool = try PacketPool(audio: audio, signals: min(n, Bench.signalCount), framesPerSignal: Bench.framesPerSignal)
    let media = session.media
    let out = UnsafeMutableRawBufferPointer.allocate(byteCount: 2048, alignment: 16)
    defer { out.deallocate() }
    let periodNs = UInt64(audio.frameMicros) * 1000
    let fec: FrameFlags = audio.fec ? [.fec] : []
    ParentWatch.shared.start()
    say("ready")
    var sent: UInt64 = 0, late: UInt64 = 0, failed: UInt64 = 0
    let t0 = MonotonicClock.nanoseconds() + 20_000_000
    var k = 0
    while !ParentWatch.shared.stopRequested {
        for i in 0..<n {
            let due = t0 + UInt64(k) * periodNs + UInt64(i) * periodNs / UInt64(n)
            sleepUntil(ns: due)
            if MonotonicClock.nanoseconds() > due + 5_000_000 { late += 1 }
            let header = FrameHeader(type: .voice, flags: k == 0 ? fec.union(.marker) : fec, ssrc: ssrcs[i], seq: UInt64(k),
                                     timestamp: UInt32(truncatingIfNeeded: k * audio.frameSamples) &+ ssrcs[i] &* 7919)
            let len = pool.packet(stream: i, frame: k).withUnsafeBytes { p in
                MediaCrypto.seal(header: header, payload: p, key: media.send, into: out)
            }
            if (try? session.udp.sendTo(UnsafeRawBufferPointer(rebasing: out[0..<len]), session.serverAddress)) != nil {
                sent += 1
            } else {
                failed += 1
            }
        }
        k += 1
        if k % 50 == 0 { discardControl(session) }
    }
    report("sent", Double(sent))
    report("late", Double(late))
    report("send_failed", Double(failed))
    say("done")
}
