import Glibc
import VoiceCatAudio

// A trace-driven harness for jitter buffers: feeds arrival traces straight into a
// playout model and ticks it on the receiver's clock, measuring what a listener
// gets. Pure (simulated time); used by the tests and by bench-jitter.

/// One sent frame and when its copies arrived (none: lost in the network).
public struct TraceFrame: Sendable {
    public var seq: UInt64
    public var timestamp: UInt32
    public var flags: UInt8
    public var sendMs: Double
    public var arrivalsMs: [Double]
    public init(seq: UInt64, timestamp: UInt32, flags: UInt8 = 0, sendMs: Double, arrivalsMs: [Double]) {
        self.seq = seq; self.timestamp = timestamp; self.flags = flags; self.sendMs = sendMs; self.arrivalsMs = arrivalsMs
    }
}

/// What a model did in one receiver tick.
public enum TickOutcome: Equatable {
    case played(seq: UInt64)
    case concealed
    case silence
}

/// A jitter buffer under test.
public protocol PlayoutModel: AnyObject {
    var name: String { get }
    func put(seq: UInt64, timestamp: UInt32, flags: UInt8, arrivalMs: Double)
    func tick() -> TickOutcome
}

/// Our JitterBuffer as a PlayoutModel (it decides; nothing is decoded).
public final class JitterBufferModel: PlayoutModel {
    public let jb: JitterBuffer
    public var name: String { "VoiceCat JitterBuffer" }
    private var seqBySlot: [UInt64]
    private let empty = [UInt8](repeating: 0, count: 1)

    public init(frameSamples: Int = 960) {
        jb = JitterBuffer(capacity: 128, maxPayload: 8, frameSamples: frameSamples)
        seqBySlot = [UInt64](repeating: 0, count: 128)
    }

    public func put(seq: UInt64, timestamp: UInt32, flags: UInt8, arrivalMs: Double) {
        var tagged = [UInt8](repeating: 0, count: 8)
        withUnsafeBytes(of: seq.littleEndian) { for i in 0..<8 { tagged[i] = $0[i] } }
        tagged.withUnsafeBytes { _ = jb.insert(seq: seq, timestamp: timestamp, flags: flags, payload: $0, arrivalMs: arrivalMs) }
    }

    private func seqIn(_ slot: Int) -> UInt64 {
        let p = jb.payload(slot)
        var v: UInt64 = 0
        for i in 0..<8 { v |= UInt64(p[i]) << UInt64(8 * i) }
        return v
    }

    public func tick() -> TickOutcome {
        switch jb.next() {
        case .packet(let s):
            let q = seqIn(s)
            jb.release(s)
            return .played(seq: q)
        case .fec, .conceal: return .concealed
        case .silence: return .silence
        }
    }
}

public struct SimulationResult: CustomStringConvertible {
    public var name = ""
    public var framesSent = 0
    public var framesArrived = 0
    public var framesPlayed = 0
    /// Arrived but never played (too late, or skipped to catch up).
    public var lateLost = 0
    public var concealedTicks = 0
    /// Time each played frame waited between its (first) arrival and its playout.
    public var delaysMs: [Double] = []
    /// The seq of each entry of delaysMs.
    public var playedSeqs: [UInt64] = []

    public var meanDelayMs: Double { delaysMs.isEmpty ? 0 : delaysMs.reduce(0, +) / Double(delaysMs.count) }
    public func percentileDelayMs(_ p: Double) -> Double {
        guard !delaysMs.isEmpty else { return 0 }
        let s = delaysMs.sorted()
        return s[min(s.count - 1, Int(Double(s.count - 1) * p))]
    }
    public var lateLossPercent: Double { framesArrived == 0 ? 0 : 100 * Double(lateLost) / Double(framesArrived) }
    /// Concealed ticks among the ticks that had to produce audio.
    public var concealedPercent: Double {
        let talk = framesPlayed + concealedTicks
        return talk == 0 ? 0 : 100 * Double(concealedTicks) / Double(talk)
    }

    public var description: String {
        "\(name): mean \(fmt(meanDelayMs)) ms, p95 \(fmt(percentileDelayMs(0.95))) ms, late loss \(fmt(lateLossPercent)) %, concealed \(fmt(concealedPercent)) %"
    }
}

func fmt(_ x: Double) -> String {
    let r = (x * 10).rounded() / 10
    return String(r)
}

public enum JitterSimulation {
    /// Runs `trace` through `model`, ticking every `tickMs` of receiver time (20 ms
    /// frames: 20; a receiver clock running slow by 0.1 %: 20.02) from the first
    /// arrival until `tailMs` after the last.
    public static func run(_ trace: [TraceFrame], model: PlayoutModel, tickMs: Double = 20, tailMs: Double = 1000) -> SimulationResult {
        var arrivals: [(t: Double, i: Int)] = []
        for (i, f) in trace.enumerated() { for a in f.arrivalsMs { arrivals.append((a, i)) } }
        arrivals.sort { $0.t < $1.t || ($0.t == $1.t && $0.i < $1.i) }
        var firstArrival: [UInt64: Double] = [:]
        for (t, i) in arrivals where firstArrival[trace[i].seq] == nil { firstArrival[trace[i].seq] = t }
        var r = SimulationResult()
        r.name = model.name
        r.framesSent = trace.count
        r.framesArrived = firstArrival.count
        guard let start = arrivals.first?.t, let end = arrivals.last?.t else { return r }
        var played = Set<UInt64>()
        var k = 0
        // Ticks start at a phase unrelated to arrivals.
        var now = start + tickMs * 0.37
        while now <= end + tailMs {
            while k < arrivals.count && arrivals[k].t <= now {
                let f = trace[arrivals[k].i]
                model.put(seq: f.seq, timestamp: f.timestamp, flags: f.flags, arrivalMs: arrivals[k].t)
                k += 1
            }
            switch model.tick() {
            case .played(let seq):
                if played.insert(seq).inserted {
                    r.framesPlayed += 1
                    if let a = firstArrival[seq] { r.delaysMs.append(now - a); r.playedSeqs.append(seq) }
                }
            case .concealed: r.concealedTicks += 1
            case .silence: break
            }
            now += tickMs
        }
        r.lateLost = r.framesArrived - r.framesPlayed
        return r
    }
}

/// Seeded network models that turn a send schedule into arrival traces.
public struct TraceGenerator {
    /// xorshift64*: deterministic across platforms.
    public struct Random {
        var state: UInt64
        public init(seed: UInt64) { state = seed == 0 ? 0x9E37_79B9_7F4A_7C15 : seed }
        public mutating func next() -> UInt64 {
            state ^= state >> 12; state ^= state << 25; state ^= state >> 27
            return state &* 2_685_821_657_736_338_717
        }
        /// Uniform in [0, 1).
        public mutating func uniform() -> Double { Double(next() >> 11) / Double(1 << 53) }
        /// Standard normal (Box-Muller).
        public mutating func normal() -> Double {
            let u1 = max(uniform(), 1e-12), u2 = uniform()
            return (-2 * log(u1)).squareRoot() * cos(2 * .pi * u2)
        }
        /// Exponential with the given mean.
        public mutating func exponential(_ mean: Double) -> Double { -mean * log(max(uniform(), 1e-12)) }
    }

    public struct Network {
        public var baseDelayMs = 20.0
        /// Gaussian jitter (standard deviation, one-sided: delay never below base).
        public var jitterMs = 0.0
        /// Probability per frame of a delay spike, and the spike's size.
        public var spikeProbability = 0.0
        public var spikeMs = 0.0
        /// Gilbert-Elliott loss: P(good→bad), P(bad→good), loss in each state.
        public var pGoodToBad = 0.0
        public var pBadToGood = 1.0
        public var lossGood = 0.0
        public var lossBad = 0.0
        public var duplicateProbability = 0.0
        /// Extra delay from this frame index on (a route change).
        public var stepAtFrame: Int? = nil
        public var stepMs = 0.0
        /// Sender clock speed relative to the receiver (1.001: 0.1 % fast).
        public var senderClockRate = 1.0
        public init() {}

        /// About `percent` % loss in bursts (mean burst length ~3 packets).
        public static func burstyLoss(percent: Double) -> Network {
            var m = Network()
            m.pBadToGood = 0.33
            m.lossBad = 0.8
            // Stationary P(bad) = g / (g + b); loss ≈ P(bad) × lossBad.
            let pBad = percent / 100 / m.lossBad
            m.pGoodToBad = pBad * m.pBadToGood / (1 - pBad)
            return m
        }

        /// The fate of one packet: nil when lost, else the delays of its copies (ms).
        /// `bad` is the Gilbert-Elliott state, carried from packet to packet.
        public func fate(_ rng: inout Random, bad: inout Bool) -> [Double]? {
            bad = bad ? rng.uniform() >= pBadToGood : rng.uniform() < pGoodToBad
            if rng.uniform() < (bad ? lossBad : lossGood) { return nil }
            var delay = baseDelayMs + abs(rng.normal()) * jitterMs
            if spikeProbability > 0 && rng.uniform() < spikeProbability { delay += rng.exponential(spikeMs) }
            var out = [delay]
            if rng.uniform() < duplicateProbability { out.append(delay + rng.uniform() * 10) }
            return out
        }
    }

    /// `frames` frames of `frameMs`, talkspurts of `talkFrames` separated by
    /// `silenceFrames` of silence (marker on the first frame, last-frame on the last).
    public static func generate(frames: Int, frameMs: Double = 20, talkFrames: Int = .max, silenceFrames: Int = 0,
                                network n: Network, seed: UInt64) -> [TraceFrame] {
        var rng = Random(seed: seed)
        var out: [TraceFrame] = []
        out.reserveCapacity(frames)
        var bad = false
        var seq: UInt64 = 0
        var lastArrival = -Double.infinity
        let samples = UInt32(frameMs * 48)
        var slot = 0
        var sentInSpurt = 0
        while out.count < frames {
            let inSilence = talkFrames != .max && sentInSpurt >= talkFrames
            if inSilence {
                slot += silenceFrames
                sentInSpurt = 0
                continue
            }
            let sendMs = Double(slot) * frameMs / n.senderClockRate
            var flags: UInt8 = 0
            if sentInSpurt == 0 { flags |= 0x01 }
            if talkFrames != .max && sentInSpurt == talkFrames - 1 { flags |= 0x08 }
            var arrivals: [Double] = []
            if let delays = n.fate(&rng, bad: &bad) {
                let step = n.stepAtFrame.map { out.count >= $0 ? n.stepMs : 0 } ?? 0
                var a = sendMs + delays[0] + step
                // A queue keeps most order: only part of a later frame overtakes an earlier one.
                if a < lastArrival && rng.uniform() < 0.7 { a = lastArrival + 0.05 }
                lastArrival = max(lastArrival, a)
                arrivals.append(a)
                for extra in delays.dropFirst() { arrivals.append(sendMs + extra + step) }
            }
            out.append(TraceFrame(seq: seq, timestamp: UInt32(truncatingIfNeeded: slot) &* samples, flags: flags,
                                  sendMs: sendMs, arrivalsMs: arrivals))
            seq += 1
            slot += 1
            sentInSpurt += 1
        }
        return out
    }
}
