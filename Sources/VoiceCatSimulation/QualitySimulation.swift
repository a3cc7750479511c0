import VoiceCatAudio
import VoiceCatProtocol

// What a listener hears of speech sent over a simulated network (issue #16), in
// simulated time, so a run is exact and repeats on any machine:
//   * bare Opus: every frame encoded with fixed settings and decoded at once, the
//     network's losses (by frame) concealed by PLC, or rebuilt from the next packet's
//     in-band FEC when it arrived; no jitter (an ideal receiver);
//   * the pipeline: the adaptive sender (FECPolicy driving the encoder, header flags
//     as the client sets them, DTX frames not sent) → the network (delays, jitter,
//     losses) → the listener's receive path (the real JitterBuffer ticked every frame
//     period, the decoder's playNext: packet, FEC, PLC, comfort noise) and its
//     LossMeter, which reports every second; the report is aggregated as the server
//     does (LossAggregation) and comes back to the sender after a round trip.
// Both arms of a trace see the same network: frame k's fate is drawn once, from the
// trace's seed, and applies to whatever carries frame k.

public enum QualitySimulation {
    /// One frame period of the network: the delays of the copies that arrive (none: lost).
    public struct Fates: Sendable {
        public let delaysMs: [[Double]]
        public init(frames: Int, network: TraceGenerator.Network, seed: UInt64) {
            var rng = TraceGenerator.Random(seed: seed)
            var bad = false
            var out: [[Double]] = []
            out.reserveCapacity(frames)
            for _ in 0..<frames { out.append(network.fate(&rng, bad: &bad) ?? []) }
            delaysMs = out
        }
        public func lost(_ k: Int) -> Bool { k >= delaysMs.count || delaysMs[k].isEmpty }
        /// Frames the network loses, as a share of all.
        public var lossRate: Double { Double(delaysMs.filter(\.isEmpty).count) / Double(max(1, delaysMs.count)) }
    }

    public struct Result: Sendable {
        /// The decoded audio (48 kHz mono, the left channel of the stereo decode).
        public var pcm: [Int16] = []
        public var framesSent = 0
        /// Sent frames the network lost, and of those the ones the receiver rebuilt
        /// from FEC; all rebuilt periods (late frames too); periods concealed by PLC
        /// (the jitter buffer's count: losses it could not rebuild, periods it waited,
        /// late frames).
        public var lostInNetwork = 0
        public var lostRebuilt = 0
        /// Lost frames whose successor arrived carrying FEC (what could be rebuilt).
        public var lostRebuildable = 0
        /// Lost frames the encoder coded as speech (the VAD flag of the packet), and of
        /// those the ones rebuilt: libopus codes FEC for active frames only.
        public var lostSpeech = 0
        public var lostSpeechRebuilt = 0
        public var fecRecovered = 0
        public var plcFrames = 0
        public var lateFrames = 0
        /// Sent frames that carried FEC.
        public var fecPackets = 0
        /// The protection the sender ran with, from when (ms of sender time).
        public var protection: [(atMs: Double, fec: Bool, lossPercent: Int)] = []
        public var feedbacks = 0
        /// The pipeline's jitter-buffer statistics.
        public var jitter = JitterStats()
        public init() {}
    }

    static let frameMs = 20.0

    /// The VAD flag of a single-frame SILK or hybrid packet (RFC 6716 4.2.3: the first
    /// header bit); CELT-only packets count as speech when longer than a DTX frame.
    static func isSpeech(_ p: [UInt8], _ len: Int) -> Bool {
        guard len > 2 else { return false }
        if p[0] >> 3 >= 16 { return true }
        return p[0] & 3 == 0 && p[1] & 0x80 != 0
    }

    /// Bare Opus over `fates`: FEC on or off at `lossPercent`, PLC or FEC for each lost frame.
    public static func bare(pcm: [Int16], audio: AudioConfig, fec: Bool, lossPercent: Int, fates: Fates) throws -> Result {
        var cfg = audio
        cfg.fec = fec
        cfg.expectedPacketLoss = UInt32(lossPercent)
        let enc = try OpusEncoderBox(config: cfg)
        let dec = try OpusDecoderBox()
        dec.setChannels(cfg.channels)   // a mono stream decodes mono, as the receive path does
        let n = cfg.frameSamples
        let frames = pcm.count / n
        var packets: [[UInt8]] = []
        var fecFlags: [Bool] = []
        var buf = [UInt8](repeating: 0, count: 1500)
        for k in 0..<frames {
            let len = try pcm.withUnsafeBufferPointer { p in try buf.withUnsafeMutableBytes { try enc.encode(p.baseAddress! + k * n, into: $0) } }
            packets.append(Array(buf[0..<len]))
            fecFlags.append(enc.lastCarriesFEC)
        }
        var r = Result()
        r.framesSent = frames
        r.fecPackets = fecFlags.filter { $0 }.count
        r.protection = [(0, fec, lossPercent)]
        r.pcm.reserveCapacity(frames * n)
        var out = [Int16](repeating: 0, count: n * 2)
        for k in 0..<frames {
            try out.withUnsafeMutableBufferPointer { o in
                if !fates.lost(k) {
                    _ = try packets[k].withUnsafeBytes { try dec.decode($0, frames: n, into: o.baseAddress!) }
                    return
                }
                r.lostInNetwork += 1
                let speech = isSpeech(packets[k], packets[k].count)
                if speech { r.lostSpeech += 1 }
                if fec, k + 1 < frames, !fates.lost(k + 1), fecFlags[k + 1] {
                    _ = try packets[k + 1].withUnsafeBytes { try dec.decode($0, fec: true, frames: n, into: o.baseAddress!) }
                    r.fecRecovered += 1
                    r.lostRebuilt += 1
                    if speech { r.lostSpeechRebuilt += 1 }
                } else {
                    _ = try dec.decode(nil, frames: n, into: o.baseAddress!)
                    r.plcFrames += 1
                }
            }
            for i in 0..<n { r.pcm.append(out[dec.channels * i]) }
        }
        return r
    }

    /// The pipeline with its feedback loop closed. `roundTripMs`: from a report leaving
    /// the listener to the feedback reaching the sender. `tickPhase`: where the
    /// listener's ticks fall in a frame period.
    public static func pipeline(pcm: [Int16], audio: AudioConfig, fates: Fates, roundTripMs: Double = 60,
                                tickPhase: Double = 0.37) throws -> Result {
        let enc = try OpusEncoderBox(config: audio)
        let dec = try OpusDecoderBox()
        dec.setChannels(audio.channels)
        var policy = FECPolicy(fec: audio.fec, expectedLoss: Int(audio.expectedPacketLoss))
        let jitter = JitterBuffer(capacity: 64, maxPayload: 1500, frameSamples: audio.frameSamples)
        let n = audio.frameSamples
        let meter = LossMeter(frameSamples: n)
        let frames = pcm.count / n
        var r = Result()
        r.protection = [(0, policy.current.fec, policy.current.lossPercent)]

        // In flight: (arrival ms, seq, timestamp, flags, packet).
        var inFlight: [(at: Double, seq: UInt64, ts: UInt32, flags: FrameFlags, packet: [UInt8])] = []
        var feedbackDue: [(at: Double, counts: LossCounts, listeners: Int)] = []
        var buf = [UInt8](repeating: 0, count: 1500)
        var out = [Int16](repeating: 0, count: n * 2)
        var seq: UInt64 = 0
        var needMarker = true
        var k = 0
        var tick = tickPhase * frameMs
        var nextReport = 1000.0
        var lastArrival = 0.0
        var lostSeqs = Set<UInt64>(), speechSeqs = Set<UInt64>()
        while k < frames || tick <= lastArrival + 1000 {
            let sendAt = Double(k) * frameMs
            if k < frames && sendAt <= tick {
                // Feedback that has arrived by now changes the encoder before this frame.
                while let f = feedbackDue.first, f.at <= sendAt {
                    feedbackDue.removeFirst()
                    r.feedbacks += 1
                    if policy.apply(f.counts, listeners: UInt32(f.listeners)) {
                        try enc.setProtection(fec: policy.current.fec, lossPercent: policy.current.lossPercent)
                        r.protection.append((sendAt, policy.current.fec, policy.current.lossPercent))
                    }
                }
                let last = k == frames - 1
                let len = try pcm.withUnsafeBufferPointer { p in try buf.withUnsafeMutableBytes { try enc.encode(p.baseAddress! + k * n, into: $0) } }
                if let flags = enc.headerFlags(length: len, marker: needMarker, last: last) {
                    if flags.contains(.fec) { r.fecPackets += 1 }
                    r.framesSent += 1
                    if fates.lost(k) {
                        r.lostInNetwork += 1
                        lostSeqs.insert(seq)
                        if QualitySimulation.isSpeech(buf, len) { r.lostSpeech += 1; speechSeqs.insert(seq) }
                    }
                    if flags.contains(.fec), !fates.lost(k), lostSeqs.contains(seq &- 1) { r.lostRebuildable += 1 }
                    for d in fates.delaysMs[k] {
                        inFlight.append((sendAt + d, seq, UInt32(truncatingIfNeeded: k * n), flags, Array(buf[0..<len])))
                        lastArrival = max(lastArrival, sendAt + d)
                    }
                    seq += 1
                    needMarker = last || enc.lastWasDTX
                } else {
                    needMarker = true
                }
                k += 1
                continue
            }
            // A listener tick: take in what has arrived, play one period.
            inFlight.sort { $0.at < $1.at }
            var taken = 0
            while taken < inFlight.count && inFlight[taken].at <= tick {
                let a = inFlight[taken]
                meter.record(seq: a.seq, timestamp: a.ts)
                a.packet.withUnsafeBytes { _ = jitter.insert(seq: a.seq, timestamp: a.ts, flags: a.flags, payload: $0, arrivalMs: a.at) }
                taken += 1
            }
            inFlight.removeFirst(taken)
            let playout = out.withUnsafeMutableBufferPointer { o in dec.playNext(from: jitter, dred: nil, frames: n, nowMs: tick, into: o.baseAddress!) }
            if case .fec(let slot) = playout, lostSeqs.contains(jitter.seq(slot) &- 1) {
                r.lostRebuilt += 1
                if speechSeqs.contains(jitter.seq(slot) &- 1) { r.lostSpeechRebuilt += 1 }
            }
            for i in 0..<n { r.pcm.append(out[dec.channels * i]) }
            if tick >= nextReport {
                nextReport += Double(LossAggregation.reportIntervalMs)
                let counts = meter.closeInterval()
                if counts.expected > 0, let agg = LossAggregation.aggregate([counts]) {
                    feedbackDue.append((tick + roundTripMs, agg.counts, agg.listeners))
                }
            }
            tick += frameMs
        }
        let st = jitter.stats
        r.fecRecovered = Int(st.fecRecovered)
        r.plcFrames = Int(st.plcFrames)
        r.lateFrames = Int(st.late)
        r.jitter = st
        return r
    }
}
