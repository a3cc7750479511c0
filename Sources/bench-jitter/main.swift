// bench-jitter: VoiceCat's JitterBuffer against SpeexDSP's (the one Mumble uses) on
// identical seeded traces. Prints, per trace and buffer: mean and p95 playout
// delay (time a frame waits between arrival and playout), late loss (arrived but
// never played) and concealed ticks. Simulated time: the figures do not depend
// on this machine's speed. Run: swift build -c release --product bench-jitter &&
// .build/release/bench-jitter   (or: make bench)
import VoiceCatAudio
import CSpeexDSP
import VoiceCatSimulation
import Glibc

/// SpeexDSP's jitter buffer driven the way its manual describes: put on arrival;
/// once per 20 ms tick, get(desired_span = 960) then tick().
final class SpeexModel: PlayoutModel {
    var name: String { "SpeexDSP jitter_buffer" }
    let jb: OpaquePointer
    var data = [CChar](repeating: 0, count: 64)
    var lastPutTick = 0
    var ticks = 0
    var pausedAfterFinal = true

    init() { jb = jitter_buffer_init(960) }
    deinit { jitter_buffer_destroy(jb) }

    func put(seq: UInt64, timestamp: UInt32, flags: UInt8, arrivalMs: Double) {
        var bytes = [CChar](repeating: 0, count: 8)
        for i in 0..<8 { bytes[i] = CChar(bitPattern: UInt8(truncatingIfNeeded: seq >> UInt64(8 * i))) }
        bytes.withUnsafeMutableBufferPointer { b in
            var p = JitterBufferPacket(data: b.baseAddress, len: 8, timestamp: timestamp, span: 960,
                                       sequence: UInt16(truncatingIfNeeded: seq), user_data: UInt32(flags))
            jitter_buffer_put(jb, &p)
        }
        lastPutTick = ticks
        pausedAfterFinal = false
    }

    func tick() -> TickOutcome {
        ticks += 1
        var offset: Int32 = 0
        let rc = data.withUnsafeMutableBufferPointer { b -> Int32 in
            var p = JitterBufferPacket(data: b.baseAddress, len: 64, timestamp: 0, span: 0, sequence: 0, user_data: 0)
            let r = jitter_buffer_get(jb, &p, 960, &offset)
            if r == 0 {  // JITTER_BUFFER_OK
                if p.user_data & 0x0c != 0 { pausedAfterFinal = true }
            }
            return r
        }
        jitter_buffer_tick(jb)
        if rc == 0 {
            var seq: UInt64 = 0
            for i in 0..<8 { seq |= UInt64(UInt8(bitPattern: data[i])) << UInt64(8 * i) }
            return .played(seq: seq)
        }
        // Between talkspurts (after a last frame) or long after the last arrival, a
        // missing frame is silence, as in our model.
        if pausedAfterFinal || ticks - lastPutTick > 10 { return .silence }
        return .concealed
    }
}

struct Scenario {
    let name: String
    let network: TraceGenerator.Network
    var frames = 9000            // 3 minutes of 20 ms frames
    var talkFrames = Int.max
    var silenceFrames = 0
    var receiverTickMs = 20.0
}

func scenarios() -> [Scenario] {
    var lan = TraceGenerator.Network()
    lan.baseDelayMs = 1; lan.jitterMs = 0.5
    var wifi = TraceGenerator.Network()
    wifi.baseDelayMs = 15; wifi.jitterMs = 30; wifi.spikeProbability = 0.01; wifi.spikeMs = 150
    var bursty = TraceGenerator.Network()
    bursty.baseDelayMs = 30; bursty.jitterMs = 8
    bursty.pGoodToBad = 0.02; bursty.pBadToGood = 0.3; bursty.lossBad = 0.7; bursty.lossGood = 0.005  // ~5 % in bursts
    var step = TraceGenerator.Network()
    step.baseDelayMs = 20; step.jitterMs = 5; step.stepAtFrame = 4500; step.stepMs = 80
    var fast = TraceGenerator.Network()
    fast.baseDelayMs = 20; fast.jitterMs = 5; fast.senderClockRate = 1.001
    var slow = fast
    slow.senderClockRate = 0.999
    var talk = TraceGenerator.Network()
    talk.baseDelayMs = 20; talk.jitterMs = 15; talk.spikeProbability = 0.005; talk.spikeMs = 80
    return [
        Scenario(name: "clean LAN", network: lan),
        Scenario(name: "Wi-Fi jitter 20-40 ms + spikes", network: wifi),
        Scenario(name: "5 % bursty loss", network: bursty),
        Scenario(name: "delay step +80 ms", network: step),
        Scenario(name: "sender clock +0.1 %", network: fast),
        Scenario(name: "sender clock -0.1 %", network: slow),
        Scenario(name: "talkspurts 3 s / 1 s silence", network: talk, talkFrames: 150, silenceFrames: 50),
    ]
}

func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s : s + String(repeating: " ", count: n - s.count) }
func f1(_ x: Double) -> String { let r = (x * 10).rounded() / 10; return String(r) }

if let i = CommandLine.arguments.firstIndex(of: "--sweep") {
    _ = i
    for factor in [3.0, 4.0] {
        for hf in [0.5, 1.0] {
            for frac in [0.0, 0.5, 0.75, 1.0] {
                var line = "factor \(factor) hyst \(hf) peak \(frac):"
                var wins = 0
                for (k, s) in scenarios().enumerated() {
                    let trace = TraceGenerator.generate(frames: s.frames, talkFrames: s.talkFrames, silenceFrames: s.silenceFrames,
                                                        network: s.network, seed: UInt64(1000 + k))
                    let m = JitterBufferModel()
                    m.jb.targetFactor = factor; m.jb.hysteresisFrames = hf; m.jb.hysteresisFraction = 0.5; m.jb.peakFraction = frac
                    let o = JitterSimulation.run(trace, model: m, tickMs: s.receiverTickMs)
                    let sp = JitterSimulation.run(trace, model: SpeexModel(), tickMs: s.receiverTickMs)
                    if o.meanDelayMs <= sp.meanDelayMs && o.lateLossPercent <= sp.lateLossPercent + 0.05 { wins += 1 }
                    line += " [\(f1(o.meanDelayMs))/\(f1(sp.meanDelayMs)) \(f1(o.lateLossPercent))/\(f1(sp.lateLossPercent))]"
                }
                print("\(wins) \(line)")
            }
        }
    }
    exit(0)
}

print("| trace | buffer | mean delay ms | p95 delay ms | late loss % | concealed % |")
print("|---|---|---:|---:|---:|---:|")
var verdicts: [String] = []
for (i, s) in scenarios().enumerated() {
    let trace = TraceGenerator.generate(frames: s.frames, talkFrames: s.talkFrames, silenceFrames: s.silenceFrames,
                                        network: s.network, seed: UInt64(1000 + i))
    let oursModel = JitterBufferModel()
    let ours = JitterSimulation.run(trace, model: oursModel, tickMs: s.receiverTickMs)
    if CommandLine.arguments.contains("--verbose") {
        let st = oursModel.jb.stats
        print("<!-- \(s.name): late \(st.late) skipped \(st.skipped) underruns \(st.underruns) plc \(st.plcFrames) fec \(st.fecRecovered) target \(Int(oursModel.jb.targetMs)) ms -->")
    }
    let speex = JitterSimulation.run(trace, model: SpeexModel(), tickMs: s.receiverTickMs)
    for r in [ours, speex] {
        print("| \(s.name) | \(r.name) | \(f1(r.meanDelayMs)) | \(f1(r.percentileDelayMs(0.95))) | \(f1(r.lateLossPercent)) | \(f1(r.concealedPercent)) |")
    }
    let lowerDelay = ours.meanDelayMs < speex.meanDelayMs
    let noMoreLate = ours.lateLossPercent <= speex.lateLossPercent + 0.05
    verdicts.append("\(s.name): mean delay \(lowerDelay ? "lower" : "NOT lower") (\(f1(ours.meanDelayMs)) vs \(f1(speex.meanDelayMs)) ms), "
                    + "late loss \(noMoreLate ? "equal or lower" : "HIGHER") (\(f1(ours.lateLossPercent)) vs \(f1(speex.lateLossPercent)) %)")
}
print("")
for v in verdicts { print("- \(v)") }
