import Glibc
import VoiceCatAudio
import VoiceCatProtocol

// A trace-driven harness for jitter buffers: feeds arrival traces straight into a
// playout model and ticks it on the receiver's clock, measuring what a listener
// gets. Pure (simulated time); used by bench-jitter, the tests and the impairment
// proxy (TraceGenerator.Network and Random). Not part of the shipped library.

/// One sent frame and when its copies arrived (none: lost in the network).
public struct TraceFrame: Sendable {
    public var seq: UInt64
    public var timestamp: UInt32
    public var flags: FrameFlags
    public var sendMs: Double
    public var arrivalsMs: [Double]
    public init(seq: UInt64, timestamp: UInt32, flags: FrameFlags = [], sendMs: Double, arrivalsMs: [Double]) {
        self.seq = seq; self.timestamp = timestamp; self.flags = flags; self.sendMs = sendMs; self.arrivalsMs = arrivalsMs
    }
}

/// What a model did in one receiver tick.
public enum TickOutcome: Equatable {
    case played(seq: UInt64)
    /// A lost frame rebuilt from its successor's FEC.
    case rebuilt
    case concealed
    case silence
}

/// A jitter buffer under test.
public protocol PlayoutModel: AnyObject {
    var name: String { get }
    func put(seq: UInt64, timestamp: UInt32, flags: FrameFlags, arrivalMs: Double)
    /// One playout period, at `nowMs` on the clock arrivals use.
    func tick(nowMs: Double) -> TickOutcome
    /// How much earlier (ms; negative: later) the next tick comes than a period after
    /// this one: a model whose renderer places its ticks (the sink mode's RenderPhase).
    func clockMoveMs() -> Double
}

extension PlayoutModel {
    /// A fixed clock (a device's): ticks a period apart.
    public func clockMoveMs() -> Double { 0 }
}

/// Our JitterBuffer as a PlayoutModel (it decides; nothing is decoded).
public final class JitterBufferModel: PlayoutModel {
    public let jb: JitterBuffer
    public var name: String {
        phase != nil ? "VoiceCat, ticks placed (sink mode)" : device != nil || alignStarts ? "VoiceCat JitterBuffer (device)" : "VoiceCat JitterBuffer"
    }
    /// Set: the ticks follow the stream's frames as the sink mode's mixer thread
    /// places them (RenderPhase, told what each played frame could spare, as
    /// RemoteSlot and ReceiveSet tell it for one stream); nil: a fixed clock.
    public var phase: RenderPhase?
    /// Tells the buffer after each tick that the block played was loud, as a slot
    /// playing speech that never pauses does (`reportPlayedLevel`: the buffer then
    /// keeps a cushion beyond its target longer, quietCatchUpTicks); off, the buffer
    /// knows no levels (bench-jitter's tables, whose frames carry no audio).
    public var loudLevels = false
    /// On the fixed clock: a tick in which nothing played moves the next one earlier by
    /// the buffer's startEarlyTicks, as the device driver does by writing a shorter block
    /// of silence (its card's clock then goes on from there).
    public var alignStarts = false
    /// Set: the device driver's moves on the fixed clock (DevicePhase): a tick in which
    /// nothing played has the next one come earlier by the buffer's startEarlyTicks
    /// (a silent cut, as with alignStarts; the model's blocks are silence, and its
    /// comfort noise is taken to be as quiet as the engine's cut asks), and ticks in
    /// which the stream played glide earlier (the block played faster), in whole samples.
    public var device: DevicePhase?
    private var move = 0.0
    /// Talkspurt edges seen in playout, in order (true: started).
    public private(set) var edges: [Bool] = []
    private var tagged = [UInt8](repeating: 0, count: 8)

    public init(frameSamples: Int = 960, capacity: Int = 128) {
        jb = JitterBuffer(capacity: capacity, maxPayload: 8, frameSamples: frameSamples)
    }

    public func put(seq: UInt64, timestamp: UInt32, flags: FrameFlags, arrivalMs: Double) {
        for i in 0..<8 { tagged[i] = UInt8(truncatingIfNeeded: seq >> UInt64(8 * i)) }
        tagged.withUnsafeBytes { _ = jb.insert(seq: seq, timestamp: timestamp, flags: flags, payload: $0, arrivalMs: arrivalMs) }
    }

    private func seqIn(_ slot: Int) -> UInt64 {
        let p = jb.payload(slot)
        var v: UInt64 = 0
        for i in 0..<8 { v |= UInt64(p[i]) << UInt64(8 * i) }
        return v
    }

    public func clockMoveMs() -> Double { move }

    public func tick(nowMs: Double) -> TickOutcome {
        var block = PlayedBlock()
        let before = PlayedBlock.Before(jb)
        let decision = jb.next(atMs: nowMs)
        block.add(jb, decision, before: before, blockSamples: jb.frameSamples)
        if phase != nil {
            move = phase!.rendered(block)
            if move != 0 { jb.moveClock(earlierByMs: move) }
            if loudLevels { jb.reportPlayedLevel(quiet: false) }
        } else if device != nil {
            let cut = Int((block.silentStartMoveMs * 48).rounded())   // (whole samples already)
            move = Double(device!.move(after: block, cut: cut, frames: jb.frameSamples)) / 48
            if move != 0 { jb.moveClock(earlierByMs: move) }
        } else if alignStarts {
            move = block.silentStartMoveMs
            if move != 0 { jb.moveClock(earlierByMs: move) }
        }
        switch jb.talkEdge {
        case .started: edges.append(true)
        case .ended: edges.append(false)
        case .startedAndEnded: edges.append(true); edges.append(false)
        case .none: break
        }
        switch decision {
        case .packet(let s):
            let q = seqIn(s)
            jb.release(s)
            return .played(seq: q)
        case .fec: return .rebuilt
        case .conceal: return .concealed
        case .silence, .comfortNoise: return .silence
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
    /// Ticks concealed (PLC) or rebuilt (FEC) among those that had to produce audio.
    public var concealedTicks = 0
    /// Of concealedTicks, those rebuilt from the next frame's FEC.
    public var rebuiltTicks = 0
    /// Frames lost in the network, and those of them whose successor (same talkspurt) arrived.
    public var lostInNetwork = 0
    public var lostWithSuccessor = 0
    /// Time each played frame waited between its (first) arrival and its playout.
    public var delaysMs: [Double] = []
    /// The seq of each entry of delaysMs.
    public var playedSeqs: [UInt64] = []
    /// The receiver tick (index) at which each entry of delaysMs was played.
    public var playedTicks: [Int] = []

    public init() {}

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

    /// Adds another run's counts and delays (several seeds of one trace).
    public mutating func absorb(_ o: SimulationResult) {
        framesSent += o.framesSent; framesArrived += o.framesArrived; framesPlayed += o.framesPlayed
        lateLost += o.lateLost; concealedTicks += o.concealedTicks; rebuiltTicks += o.rebuiltTicks
        lostInNetwork += o.lostInNetwork; lostWithSuccessor += o.lostWithSuccessor
        delaysMs += o.delaysMs
        playedSeqs += o.playedSeqs
        playedTicks += o.playedTicks
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
    /// arrival until `tailMs` after the last. `phase` places the ticks within a
    /// period, as a share of it after the first arrival.
    public static func run(_ trace: [TraceFrame], model: PlayoutModel, tickMs: Double = 20, tailMs: Double = 1000,
                           phase: Double = 0.37) -> SimulationResult {
        var arrivals: [(t: Double, i: Int)] = []
        for (i, f) in trace.enumerated() { for a in f.arrivalsMs { arrivals.append((a, i)) } }
        arrivals.sort { $0.t < $1.t || ($0.t == $1.t && $0.i < $1.i) }
        var firstArrival: [UInt64: Double] = [:]
        for (t, i) in arrivals where firstArrival[trace[i].seq] == nil { firstArrival[trace[i].seq] = t }
        var r = SimulationResult()
        r.name = model.name
        r.framesSent = trace.count
        r.framesArrived = firstArrival.count
        for (i, f) in trace.enumerated() where f.arrivalsMs.isEmpty {
            r.lostInNetwork += 1
            if i + 1 < trace.count, !trace[i + 1].arrivalsMs.isEmpty, !trace[i + 1].flags.contains(.marker) { r.lostWithSuccessor += 1 }
        }
        guard let start = arrivals.first?.t, let end = arrivals.last?.t else { return r }
        var played = Set<UInt64>()
        var k = 0
        var tick = 0
        // Ticks start at a phase unrelated to arrivals.
        var now = start + tickMs * phase
        while now <= end + tailMs {
            while k < arrivals.count && arrivals[k].t <= now {
                let f = trace[arrivals[k].i]
                model.put(seq: f.seq, timestamp: f.timestamp, flags: f.flags, arrivalMs: arrivals[k].t)
                k += 1
            }
            switch model.tick(nowMs: now) {
            case .played(let seq):
                if played.insert(seq).inserted {
                    r.framesPlayed += 1
                    if let a = firstArrival[seq] { r.delaysMs.append(now - a); r.playedSeqs.append(seq); r.playedTicks.append(tick) }
                }
            case .rebuilt: r.concealedTicks += 1; r.rebuiltTicks += 1
            case .concealed: r.concealedTicks += 1
            case .silence: break
            }
            now += tickMs - model.clockMoveMs()
            tick += 1
        }
        r.lateLost = r.framesArrived - r.framesPlayed
        return r
    }
}

/// Seeded send schedules and network models that turn them into arrival traces.
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
        /// Uniform in [a, b).
        public mutating func uniform(_ a: Double, _ b: Double) -> Double { a + (b - a) * uniform() }
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
        /// Extra delay from this frame index on (a route change)...
        public var stepAtFrame: Int? = nil
        public var stepMs = 0.0
        /// ...up to this one (a delay episode: a congested hop, a Wi-Fi scan).
        public var stepEndFrame: Int? = nil
        /// Sender clock speed relative to the receiver (1.001: 0.1 % fast).
        public var senderClockRate = 1.0
        /// The path stalls for `freezeMs` once every `freezeEveryMs`, half-way through
        /// each interval (a Wi-Fi scan, a stalled hop): what would arrive meanwhile is
        /// held and delivered in order when the stall ends.
        public var freezeEveryMs: Double? = nil
        public var freezeMs = 0.0
        public init() {}

        /// An arrival time after any stall it falls in (`after`: the previous arrival,
        /// so the held frames leave the stall in order).
        public func unfrozen(_ a: Double, after: Double = -.infinity) -> Double {
            guard let every = freezeEveryMs, every > 0, freezeMs > 0 else { return a }
            let start = (a / every).rounded(.down) * every + every / 2
            guard a >= start && a < start + freezeMs else { return a }
            return max(start + freezeMs, after + 0.02)
        }

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

    /// One frame as the sender sends it: its position on the sample clock (in
    /// frames), when it leaves (sender ms) and its header flags.
    public struct Send: Sendable {
        public var slot: Int
        public var sendMs: Double
        public var flags: FrameFlags
        public init(slot: Int, sendMs: Double, flags: FrameFlags) { self.slot = slot; self.sendMs = sendMs; self.flags = flags }
    }

    /// How the sender's talk is shaped in time.
    public enum Talk: Sendable {
        /// One talkspurt without end.
        case continuous
        /// Talkspurts of `talk` frames, `silence` frames of pause between them.
        case fixed(talk: Int, silence: Int)
        /// Speech-like: talkspurts of 0.4–4 s, pauses of 0.2–2 s. `legacyTimestamps`:
        /// the sender's timestamps do not advance over a pause (the old sender);
        /// `comfortNoise`: a DTX frame starts each pause and one follows every 400 ms.
        case conversation(legacyTimestamps: Bool, comfortNoise: Bool)
        /// A text-to-speech host feeding sentences (2–6 s, 0.15–1.2 s apart) in chunks
        /// of 200–600 ms that it synthesises at 0.6–1.25 × real time; the library
        /// paces them (frame k of a talkspurt leaves at max(ready, start + k frames))
        /// and ends the talkspurt when the queue runs dry for a frame plus 10 ms (its
        /// chunks are under a second: LocalStream waits the slack after them).
        case ttsFeeder
    }

    /// The send schedule of `frames` frames of `frameMs` shaped by `talk`.
    public static func schedule(frames: Int, frameMs: Double = 20, talk: Talk, rng: inout Random) -> [Send] {
        var out: [Send] = []
        out.reserveCapacity(frames)
        switch talk {
        case .continuous:
            for k in 0..<frames { out.append(Send(slot: k, sendMs: Double(k) * frameMs, flags: k == 0 ? .marker : [])) }
        case .fixed(let talkFrames, let silenceFrames):
            var slot = 0
            while out.count < frames {
                for j in 0..<talkFrames where out.count < frames {
                    var f: FrameFlags = []
                    if j == 0 { f.insert(.marker) }
                    if j == talkFrames - 1 { f.insert(.lastFrame) }
                    out.append(Send(slot: slot, sendMs: Double(slot) * frameMs, flags: f))
                    slot += 1
                }
                slot += silenceFrames
            }
        case .conversation(let legacy, let comfortNoise):
            var slot = 0          // timestamp position
            var wall = 0.0        // sender time
            while out.count < frames {
                let spurt = Int(rng.uniform(0.4, 4) * 1000 / frameMs)
                for j in 0..<spurt where out.count < frames {
                    var f: FrameFlags = j == 0 ? .marker : []
                    if j == spurt - 1 && !comfortNoise { f.insert(.lastFrame) }
                    out.append(Send(slot: slot, sendMs: wall, flags: f))
                    slot += 1; wall += frameMs
                }
                let pauseFrames = Int(rng.uniform(0.2, 2) * 1000 / frameMs)
                if comfortNoise {
                    // The encoder's DTX: the first silent frame, then one every 400 ms.
                    var j = 0
                    while j < pauseFrames && out.count < frames {
                        out.append(Send(slot: slot + j, sendMs: wall + Double(j) * frameMs, flags: .dtx))
                        j += Int(400 / frameMs)
                    }
                }
                wall += Double(pauseFrames) * frameMs
                if !legacy { slot += pauseFrames }
            }
        case .ttsFeeder:
            let slack = 10.0
            var synth = 0.0                 // the host's synthesis clock
            var inSpurt = false
            var spurtStart = 0.0, spurtSlot = 0, k = 0
            while out.count < frames {
                // One sentence, synthesised chunk by chunk.
                let sentence = Int(rng.uniform(2, 6) * 1000 / frameMs)
                var made = 0
                while made < sentence && out.count < frames {
                    let chunk = min(sentence - made, Int(rng.uniform(200, 600) / frameMs))
                    synth += Double(chunk) * frameMs * rng.uniform(0.6, 1.25)
                    for _ in 0..<chunk where out.count < frames {
                        let due = spurtStart + Double(k) * frameMs
                        if inSpurt && synth > due + slack {
                            // The queue ran dry for a frame plus the slack: a padded frame
                            // flagged last ends the talkspurt when that is noticed.
                            out.append(Send(slot: spurtSlot + k, sendMs: due + slack, flags: .lastFrame))
                            inSpurt = false
                        }
                        if !inSpurt {
                            // Timestamps advance by the wall-clock time since the last talkspurt began.
                            let bySlot = out.isEmpty ? 0 : spurtSlot + Int(((synth - spurtStart) / frameMs).rounded())
                            spurtSlot = out.isEmpty ? 0 : max(out[out.count - 1].slot + 1, bySlot)
                            spurtStart = synth; k = 0; inSpurt = true
                        }
                        out.append(Send(slot: spurtSlot + k, sendMs: max(synth, spurtStart + Double(k) * frameMs),
                                        flags: k == 0 ? .marker : []))
                        k += 1
                    }
                    made += chunk
                }
                synth += rng.uniform(150, 1200)      // the pause before the next sentence
            }
        }
        // The stream stops the way a sender stops it: its last frame says so.
        if !out.isEmpty { out[out.count - 1].flags.insert(.lastFrame) }
        return out
    }

    /// Sends `schedule` through `network`: one TraceFrame per sent frame (seq in send
    /// order), every one flagged as carrying FEC (the channels' default).
    public static func transmit(_ schedule: [Send], frameMs: Double = 20, network n: Network, rng: inout Random) -> [TraceFrame] {
        var out: [TraceFrame] = []
        out.reserveCapacity(schedule.count)
        var bad = false
        var lastArrival = -Double.infinity
        let samples = UInt32(frameMs * 48)
        for (i, s) in schedule.enumerated() {
            let sendMs = s.sendMs / n.senderClockRate
            var arrivals: [Double] = []
            if let delays = n.fate(&rng, bad: &bad) {
                let step = n.stepAtFrame.map { i >= $0 && i < (n.stepEndFrame ?? .max) ? n.stepMs : 0 } ?? 0
                var a = sendMs + delays[0] + step
                // A queue keeps most order: only part of a later frame overtakes an earlier one.
                if a < lastArrival && rng.uniform() < 0.7 { a = lastArrival + 0.05 }
                a = n.unfrozen(a, after: lastArrival)
                lastArrival = max(lastArrival, a)
                arrivals.append(a)
                for extra in delays.dropFirst() { arrivals.append(n.unfrozen(sendMs + extra + step, after: a)) }
            }
            out.append(TraceFrame(seq: UInt64(i), timestamp: UInt32(truncatingIfNeeded: s.slot) &* samples,
                                  flags: s.flags.union(.fec), sendMs: sendMs, arrivalsMs: arrivals))
        }
        return out
    }

    /// `frames` frames of `frameMs`, talkspurts of `talkFrames` separated by
    /// `silenceFrames` of silence (marker on the first frame, last-frame on the last).
    public static func generate(frames: Int, frameMs: Double = 20, talkFrames: Int = .max, silenceFrames: Int = 0,
                                network n: Network, seed: UInt64) -> [TraceFrame] {
        generate(frames: frames, frameMs: frameMs, talk: talkFrames == .max ? .continuous : .fixed(talk: talkFrames, silence: silenceFrames),
                 network: n, seed: seed)
    }

    public static func generate(frames: Int, frameMs: Double = 20, talk: Talk, network n: Network, seed: UInt64) -> [TraceFrame] {
        var rng = Random(seed: seed)
        let s = schedule(frames: frames, frameMs: frameMs, talk: talk, rng: &rng)
        return transmit(s, frameMs: frameMs, network: n, rng: &rng)
    }
}
