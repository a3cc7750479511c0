// Loss-adaptive FEC in the pure core (issue #16): what a packet really carries, the
// sender's policy, the receiver's loss meter and the server's aggregation.
import XCTest
import VoiceCatAudio
import VoiceCatProtocol

final class PacketFECTests: XCTestCase {
    /// Speech-like: a harmonic voice with a syllable envelope and pauses.
    func voice(_ n: Int) -> [Int16] {
        (0..<n).map { i in
            let t = Double(i) / 48000
            let env = max(0, sin(2 * .pi * 0.4 * t)) * (0.55 + 0.45 * sin(2 * .pi * 3.3 * t))
            let f0 = 160 + 20 * sin(2 * .pi * 0.7 * t)
            let s = sin(2 * .pi * f0 * t) + 0.6 * sin(4 * .pi * f0 * t + 0.5) + 0.3 * sin(6 * .pi * f0 * t + 1.1)
            return Int16(9000 * env * s / 1.9)
        }
    }

    /// Encodes `frames` frames with `enc`, changing nothing; returns each packet and its FEC flag.
    func encode(_ enc: OpusEncoderBox, _ pcm: [Int16], frames: Int, from: Int = 0) throws -> [(packet: [UInt8], fec: Bool)] {
        var out: [([UInt8], Bool)] = []
        var buf = [UInt8](repeating: 0, count: 1500)
        let n = enc.frameSamples
        for f in from..<(from + frames) {
            let len = try pcm.withUnsafeBufferPointer { p in try buf.withUnsafeMutableBytes { try enc.encode(p.baseAddress! + f * n, into: $0) } }
            let packet = Array(buf[0..<len])
            let flagged = packet.withUnsafeBytes { OpusPacket.carriesFEC($0) }
            XCTAssertEqual(flagged, enc.lastCarriesFEC)
            out.append((packet, flagged))
        }
        return out
    }

    func testTheFECFlagSaysWhetherThePacketCarriesLBRR() throws {
        var cfg = AudioConfig.speech
        let pcm = voice(48000 * 10)
        for (fec, loss) in [(false, 10), (true, 0), (true, 10), (true, 2)] {
            cfg.fec = fec
            cfg.expectedPacketLoss = UInt32(loss)
            let enc = try OpusEncoderBox(config: cfg)
            let packets = try encode(enc, pcm, frames: 500)
            let flagged = packets.filter { $0.fec }.count
            print("FEC \(fec) at \(loss) %: \(flagged) of 500 packets carry LBRR, \(packets.map { $0.packet.count }.reduce(0, +)) bytes")
            if !fec || loss == 0 {
                XCTAssertEqual(flagged, 0, "no LBRR without FEC or without expected loss")
            } else {
                XCTAssertGreaterThan(flagged, 200, "most voiced packets carry LBRR")
            }
        }
    }

    func snr(_ ref: ArraySlice<Int16>, _ x: ArraySlice<Int16>) -> Double {
        var sig = 0.0, err = 0.0
        for (a, b) in zip(ref, x) { sig += Double(a) * Double(a); let d = Double(a) - Double(b); err += d * d }
        return 10 * log10(max(sig, 1e-9) / max(err, 1e-9))
    }

    func testAFlaggedPacketRebuildsItsPredecessorAndAnUnflaggedOneIsOnlyPLC() throws {
        var cfg = AudioConfig.speech
        cfg.fec = true
        cfg.expectedPacketLoss = 5
        let enc = try OpusEncoderBox(config: cfg)
        let n = cfg.frameSamples
        let packets = try encode(enc, voice(48000 * 6), frames: 300)
        // Decodes frames 0..<k normally, then frame k as lost: from packet k+1's FEC or by PLC.
        func lastFrame(lost k: Int, fec: Bool) throws -> [Int16] {
            let dec = try OpusDecoderBox()
            var frame = [Int16](repeating: 0, count: n * 2)
            try frame.withUnsafeMutableBufferPointer { o in
                for f in max(0, k - 10)..<k { _ = try packets[f].packet.withUnsafeBytes { try dec.decode($0, frames: n, into: o.baseAddress!) } }
                if fec {
                    _ = try packets[k + 1].packet.withUnsafeBytes { try dec.decode($0, fec: true, frames: n, into: o.baseAddress!) }
                } else {
                    _ = try dec.decode(nil, frames: n, into: o.baseAddress!)
                }
            }
            return frame
        }
        func clean(_ k: Int) throws -> [Int16] {
            let dec = try OpusDecoderBox()
            var frame = [Int16](repeating: 0, count: n * 2)
            try frame.withUnsafeMutableBufferPointer { o in
                for f in max(0, k - 10)...k { _ = try packets[f].packet.withUnsafeBytes { try dec.decode($0, frames: n, into: o.baseAddress!) } }
            }
            return frame
        }
        var gains: [Double] = []
        var unflaggedSame = 0, unflagged = 0
        for k in stride(from: 20, to: 298, by: 7) {
            let ref = try clean(k), plc = try lastFrame(lost: k, fec: false), fec = try lastFrame(lost: k, fec: true)
            if packets[k + 1].fec {
                gains.append(snr(ref[...], fec[...]) - snr(ref[...], plc[...]))
            } else {
                unflagged += 1
                if plc == fec { unflaggedSame += 1 }
            }
        }
        let mean = gains.reduce(0, +) / Double(max(1, gains.count))
        print("flagged successors: \(gains.count), mean SNR gain of FEC over PLC \(String(format: "%.1f", mean)) dB; "
              + "unflagged: \(unflagged), decoded exactly as PLC: \(unflaggedSame)")
        XCTAssertGreaterThan(gains.count, 10)
        XCTAssertGreaterThan(mean, 6, "a packet flagged FEC rebuilds its predecessor")
        XCTAssertGreaterThan(unflagged, 5)
        XCTAssertEqual(unflaggedSame, unflagged, "a packet not flagged FEC has nothing to rebuild from: its FEC decode is PLC")
    }
}
