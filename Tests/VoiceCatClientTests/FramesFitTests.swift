// A stereo 320 kb/s 60 ms channel: its frames (2,436-byte datagrams) do not fit the
// default 1,400-byte limit, so the server refuses it at load time (LimitsTests);
// with the limit raised, the listener hears both sides at full rate. With a limit
// only just above the nominal frame size the encoder's cap keeps every frame inside.
import Foundation
import Synchronization
import VoiceCatClient
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class FramesFitTests: XCTestCase {
    func run(bitrate: UInt32, limit: Int, seconds: Double) throws -> (left: Double, right: Double, bytesPerPacket: Double,
                                                                       received: UInt64, lost: UInt64, oversize: UInt64) {
        var a = AudioConfig.music
        a.bitrate = bitrate
        a.frameMicros = 60_000
        let server = try TestServer {
            $0.channels = [ChannelConfig(name: "Hifi", audio: a)]
            $0.maxDatagramBytes = limit
        }
        defer { server.stop() }
        func client(_ name: String) throws -> VoiceClient {
            let c = try VoiceClient(config: .testing(knownServers: nil))
            try c.connect(host: "127.0.0.1", port: server.port, username: name, password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
            try c.joinChannel("Hifi")
            return c
        }
        let alex = try client("alex"), sam = try client("sam")
        defer { alex.shutdown(); sam.shutdown() }
        let sid = try alex.startStream(kind: .screenAudio, externalFeed: true, channels: 2)
        let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
        try sam.waitForRemote(ssrc: ssrc)
        // Left 440 Hz, right 1250 Hz, with some noise so the encoder has work to do.
        let n = Int(seconds * 48000)
        var pcm = [Int16](repeating: 0, count: n * 2)
        var seed: UInt32 = 1
        for i in 0..<n {
            seed = seed &* 1_664_525 &+ 1_013_904_223
            let noise = Double(Int32(bitPattern: seed) >> 20) / 2048 * 0.05
            pcm[2 * i] = Int16(32767 * (0.3 * sin(2 * .pi * 440 * Double(i) / 48000) + noise))
            pcm[2 * i + 1] = Int16(32767 * (0.3 * sin(2 * .pi * 1250 * Double(i) / 48000) - noise))
        }
        var l: [Int16] = [], r: [Int16] = []
        var buf = [Int16](repeating: 0, count: 960 * 2)
        let start = MonotonicClock.nanoseconds()
        for k in 0..<Int(seconds * 50) + 25 {
            if k < Int(seconds * 50) {
                try pcm.withUnsafeBufferPointer { try alex.feed(streamID: sid, pcm: $0.baseAddress! + k * 960 * 2, frames: 960, channels: 2) }
            }
            try buf.withUnsafeMutableBufferPointer { try sam.readMixed(into: $0.baseAddress!, frames: 960) }
            for i in 0..<960 { l.append(buf[2 * i]); r.append(buf[2 * i + 1]) }
            let due = start + UInt64(k + 1) * 20_000_000
            let now = MonotonicClock.nanoseconds()
            if due > now { usleep(UInt32((due - now) / 1000)) }
        }
        let (ls, rs) = Signal.stereoSeparation(l[...], r[...], leftHz: 440, rightHz: 1250, label: "\(bitrate / 1000) kb/s 60 ms, limit \(limit)")
        let out = alex.connectionStats()
        let st = try sam.streamStats(ssrc: ssrc)
        return (ls, rs, Double(out.bytesOut) / Double(max(1, out.packetsOut)), st.jitter.packetsReceived, st.jitter.packetsLost,
                server.counters.dropOversize)
    }

    func testStereo320kbps60msChannelIsHeard() throws {
        let r = try run(bitrate: 320_000, limit: 2600, seconds: 3)
        print(String(format: "stereo 320 kb/s 60 ms (max_datagram_bytes 2600): %.0f bytes a datagram, %llu frames received, "
                     + "%llu lost, %llu oversize drops; separation L %.0f R %.0f", r.bytesPerPacket, r.received, r.lost, r.oversize,
                     r.left, r.right))
        XCTAssertGreaterThan(r.bytesPerPacket, 1400, "frames must go out at the channel's rate, over the old 1,400-byte limit")
        XCTAssertGreaterThanOrEqual(r.received, 40, "3 s of 60 ms frames is 50")
        XCTAssertEqual(r.oversize, 0)
        XCTAssertGreaterThan(r.left, 10, "the listener hears the left tone on the left")
        XCTAssertGreaterThan(r.right, 10, "the listener hears the right tone on the right")
    }

    func testTheEncoderStaysUnderATightLimit() throws {
        // 160 kb/s × 60 ms = 1,200 bytes nominal: fits 1,300 with the header, but a VBR
        // frame may want more; the cap keeps every one inside.
        let r = try run(bitrate: 160_000, limit: 1300, seconds: 2)
        print(String(format: "160 kb/s 60 ms under max_datagram_bytes 1300: %.0f bytes a datagram, %llu frames, %llu oversize drops",
                     r.bytesPerPacket, r.received, r.oversize))
        XCTAssertEqual(r.oversize, 0)
        XCTAssertGreaterThanOrEqual(r.received, 25)
        XCTAssertGreaterThan(r.left, 10)
    }
}
