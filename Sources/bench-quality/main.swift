// bench-quality: what a listener hears (issue #16). Runs speech through simulated
// networks (QualitySimulation, simulated time: exact and repeatable) in three arms:
//   bare-plc  bare Opus, in-band FEC off (loss percentage 0): losses concealed by PLC
//   bare-fec  bare Opus, FEC on at the trace's measured loss: losses rebuilt from the
//             next packet where it arrived and carries FEC, else PLC
//   pipeline  the adaptive sender (FECPolicy, feedback closed through the listener's
//             LossMeter and the server's aggregation), the real JitterBuffer and the
//             receive path's decoder (FEC, PLC, comfort noise)
// and with --sweep also: pipeline-nofec (the pipeline on a channel without FEC: what
// the receive path itself costs) and bare-fec@N (bare Opus with FEC at N %).
// and writes each decoded signal (48 kHz mono s16le) with a summary line per run.
// PESQ-WB is computed by tools/quality_bench.py, which drives this program
// (`make bench-quality`; docs/benchmarks.md).
//
//   bench-quality SPEECH.raw OUTDIR [--seeds N] [--trace NAME]... [--arm NAME]... [--sweep]
import Glibc
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSimulation

struct Trace {
    let name: String
    let network: TraceGenerator.Network
}

func traces() -> [Trace] {
    var clean = TraceGenerator.Network()
    clean.baseDelayMs = 20; clean.jitterMs = 1
    func isolated(_ p: Double) -> TraceGenerator.Network {
        var n = TraceGenerator.Network()
        n.baseDelayMs = 20; n.jitterMs = 3; n.lossGood = p / 100
        return n
    }
    func bursty(_ p: Double) -> TraceGenerator.Network {
        var n = TraceGenerator.Network.burstyLoss(percent: p)
        n.baseDelayMs = 30; n.jitterMs = 8
        return n
    }
    var wifi = TraceGenerator.Network()
    wifi.baseDelayMs = 15; wifi.jitterMs = 30; wifi.spikeProbability = 0.01; wifi.spikeMs = 150; wifi.lossGood = 0.01
    return [
        Trace(name: "clean", network: clean),
        Trace(name: "isolated-1", network: isolated(1)),
        Trace(name: "isolated-2", network: isolated(2)),
        Trace(name: "isolated-3", network: isolated(3)),
        Trace(name: "bursty-5", network: bursty(5)),
        Trace(name: "bursty-7", network: bursty(7)),
        Trace(name: "wifi", network: wifi),
        Trace(name: "isolated-10", network: isolated(10)),
        Trace(name: "bursty-12", network: bursty(12)),
    ]
}

func fail(_ s: String) -> Never { fputs("bench-quality: \(s)\n", stderr); exit(2) }

func readRaw(_ path: String) -> [Int16] {
    guard let f = fopen(path, "rb") else { fail("cannot open \(path)") }
    defer { fclose(f) }
    var out: [Int16] = []
    var buf = [Int16](repeating: 0, count: 48000)
    while true {
        let n = fread(&buf, 2, buf.count, f)
        if n == 0 { break }
        out += buf[0..<n]
    }
    return out
}

func writeRaw(_ path: String, _ pcm: [Int16]) {
    guard let f = fopen(path, "wb") else { fail("cannot write \(path)") }
    _ = pcm.withUnsafeBufferPointer { fwrite($0.baseAddress, 2, $0.count, f) }
    fclose(f)
}

var args = Array(CommandLine.arguments.dropFirst())
var seeds = 3
var only: [String] = []
var onlyArms: [String] = []
var sweep = false
var positional: [String] = []
while !args.isEmpty {
    let a = args.removeFirst()
    switch a {
    case "--seeds": seeds = Int(args.isEmpty ? "" : args.removeFirst()) ?? 0
    case "--trace": only.append(args.isEmpty ? "" : args.removeFirst())
    case "--arm": onlyArms.append(args.isEmpty ? "" : args.removeFirst())
    case "--sweep": sweep = true
    default: positional.append(a)
    }
}
guard positional.count == 2, seeds > 0 else {
    fail("usage: bench-quality SPEECH.raw OUTDIR [--seeds N] [--trace NAME]... [--arm NAME]... [--sweep]")
}
let speech = readRaw(positional[0])
let outDir = positional[1]
let audio = AudioConfig.speech
let frames = speech.count / audio.frameSamples
let chosen = traces().filter { only.isEmpty || only.contains($0.name) }
guard !chosen.isEmpty else { fail("no trace named \(only); known: \(traces().map(\.name))") }

print("trace\tseed\tarm\tnetwork_loss\tsent\tlost\tlost_rebuilt\trebuildable\tlost_speech\tlost_speech_rebuilt\tfec_recovered\tplc\tlate\tfec_packets\tfeedbacks\twaited\tskipped\tunderruns\tprotection\tfile")
for t in chosen {
    for seed in 1...seeds {
        let fates = QualitySimulation.Fates(frames: frames, network: t.network, seed: UInt64(seed) &* 7919 &+ 17)
        let measured = Int((fates.lossRate * 100).rounded())
        var arms: [(String, () throws -> QualitySimulation.Result)] = [
            ("bare-plc", { try QualitySimulation.bare(pcm: speech, audio: audio, fec: false, lossPercent: 0, fates: fates) }),
            ("bare-fec", { try QualitySimulation.bare(pcm: speech, audio: audio, fec: true, lossPercent: measured, fates: fates) }),
            ("pipeline", { try QualitySimulation.pipeline(pcm: speech, audio: audio, fates: fates) }),
        ]
        if sweep {
            // The receive path's own cost (no FEC at all), and bare Opus at fixed expected losses.
            var noFEC = audio
            noFEC.fec = false
            noFEC.expectedPacketLoss = 0
            arms.append(("pipeline-nofec", { try QualitySimulation.pipeline(pcm: speech, audio: noFEC, fates: fates) }))
            for pct in [1, 2, 3, 5, 10] {
                arms.append(("bare-fec@\(pct)", { try QualitySimulation.bare(pcm: speech, audio: audio, fec: true, lossPercent: pct, fates: fates) }))
            }
            for pct in [2, 5] {
                arms.append(("bare-plc@\(pct)", { try QualitySimulation.bare(pcm: speech, audio: audio, fec: false, lossPercent: pct, fates: fates) }))
            }
        }
        for (arm, run) in arms where onlyArms.isEmpty || onlyArms.contains(arm) {
            let r: QualitySimulation.Result
            do { r = try run() } catch { fail("\(t.name) seed \(seed) \(arm): \(error)") }
            let file = "\(outDir)/\(t.name)-\(seed)-\(arm).raw"
            writeRaw(file, r.pcm)
            let prot = r.protection.map { "\(Int($0.atMs))ms:\($0.fec ? "fec" : "nofec")@\($0.lossPercent)" }.joined(separator: ",")
            print("\(t.name)\t\(seed)\t\(arm)\t\(fates.lossRate)\t\(r.framesSent)\t\(r.lostInNetwork)\t\(r.lostRebuilt)\t\(r.lostRebuildable)\t\(r.lostSpeech)\t\(r.lostSpeechRebuilt)\t\(r.fecRecovered)\t\(r.plcFrames)\t"
                  + "\(r.lateFrames)\t\(r.fecPackets)\t\(r.feedbacks)\t\(r.jitter.waited)\t\(r.jitter.skipped)\t\(r.jitter.underruns)\t\(prot)\t\(file)")
        }
    }
}
