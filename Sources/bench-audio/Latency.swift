// The `latency` role: feed → sink latency on loopback against the codec's floor.
//
// Two clients in this process, both through the server. A feeder feeds a MIC stream
// (continuous input mode) in real time: one channel frame per frame period at
// absolute times, a quiet speech-like background with loud tone bursts that start
// exactly on a frame boundary. A listener with a mixed-output sink (its vc-mixer
// thread renders a block each block length: 20 ms, or 10 ms on the channel of 10 ms frames,
// vc_set_mixed_output_block_ms) timestamps each block as the sink gets
// it and finds the bursts' onsets in it.
//
// A frame fed at time t was captured over [t - frame, t], so a burst starting on
// its first sample was captured at t - frame, and is heard at (block's time + the
// onset's position in the block / 48 kHz). No path can do better than the frame
// (the whole frame must be captured before it is encoded) plus the encoder's
// lookahead: that floor, subtracted, leaves what the engine adds (network, jitter
// buffer, waiting for the render tick). Reported: median and p95 of latency − floor.
//
// The phase between the feeder's frames and the mixer's ticks decides up to a
// render period of the result and stays fixed while a stream talks without a
// pause, so every figure is taken at 8 phases spread evenly over the tick:
//   continuous   at each phase a new stream (a fresh jitter buffer) talks 1.2 s
//                without a pause; bursts at 0.5 s and 0.9 s
//   talkspurts   one stream talks 0.8 s, pauses 0.3 s, and so on, each talkspurt
//                starting at the next phase (as a talker's pauses of any length
//                do); bursts at 0.3 s and 0.55 s; the first talkspurt (no history
//                yet) is not counted
import COpus
import Glibc
import Synchronization
import VoiceCatAudio
import VoiceCatClient
import VoiceCatProtocol
import VoiceCatSystem

/// Runs in the sink (vc-mixer thread): timestamps blocks and finds onsets.
final class OnsetDetector: @unchecked Sendable {
    static let capacity = 256
    let lastBlockNs = Atomic<UInt64>(0)
    let count = Atomic<Int>(0)
    let onsets = UnsafeMutablePointer<UInt64>.allocate(capacity: OnsetDetector.capacity)
    let threshold: Int
    /// An onset needs 50 ms of quiet before it (the bursts are 130 ms apart or more,
    /// so a jitter buffer dropping a frame or two between them does not hide one).
    let quietNeeded = 2400
    private var quiet = 0

    init(threshold: Int) { self.threshold = threshold; onsets.initialize(repeating: 0, count: OnsetDetector.capacity) }
    deinit { onsets.deallocate() }

    func block(_ pcm: UnsafePointer<Int16>, frames: Int) {
        let now = MonotonicClock.nanoseconds()
        lastBlockNs.store(now, ordering: .releasing)
        for j in 0..<frames {
            if abs(Int(pcm[2 * j])) >= threshold {
                if quiet >= quietNeeded {
                    let c = count.load(ordering: .relaxed)
                    if c < OnsetDetector.capacity {
                        onsets[c] = now + UInt64(j) * 1_000_000_000 / 48000
                        count.store(c + 1, ordering: .releasing)
                    }
                }
                quiet = 0
            } else {
                quiet += 1
            }
        }
    }
}

/// The encoder's lookahead at these settings (samples at 48 kHz), from libopus.
func encoderLookahead(_ audio: AudioConfig) -> Int {
    var err: Int32 = 0
    guard let enc = opus_encoder_create(48000, Int32(audio.channels), opusApplication(audio.application), &err), err == 0 else {
        fail("opus_encoder_create: \(err)")
    }
    defer { opus_encoder_destroy(enc) }
    var lookahead: Int32 = 0
    guard vcshim_opus_get_lookahead(enc, &lookahead) == 0 else { fail("OPUS_GET_LOOKAHEAD failed") }
    return Int(lookahead)
}

/// A burst of loud tones: its first sample is the onset.
func burst(samples n: Int) -> [Int16] {
    (0..<n).map { i in
        let t = Float(i) / 48000
        return Int16(32767 * (0.3 * sinf(2 * .pi * 400 * t) + 0.15 * sinf(2 * .pi * 1200 * t + 1)))
    }
}

/// Median, p95, extremes and counts of one set of latency − floor figures (ms).
func reportDistribution(_ name: String, _ xs: [Double], expected: Int) {
    report("\(name)_median_ms", median(xs))
    report("\(name)_p95_ms", percentile(xs, 95))
    report("\(name)_min_ms", xs.min() ?? .nan)
    report("\(name)_max_ms", xs.max() ?? .nan)
    report("\(name)_expected", Double(expected))
    report("\(name)_matched", Double(xs.count))
}

func runLatency(_ args: Arguments) throws {
    let channel = args.string("channel", BenchChannels.speech20)
    let phases = args.int("phases", 8)
    let verbose = args.int("verbose", 0) == 1
    let listener = try connectClient(args, "hearer", channel: channel)
    let detector = OnsetDetector(threshold: Int(0.15 * 32767))
    try listener.setSink { pcm, frames in detector.block(pcm, frames: frames) }
    let feeder = try connectClient(args, "feeder", channel: channel)
    feeder.setInputMode(.continuous)
    guard let audio = feeder.currentChannelAudio else { fail("no channel settings") }
    let fs = audio.frameSamples
    let frameNs = UInt64(audio.frameMicros) * 1000
    // The sink's blocks as long as the frames where they can be (10 ms: what a host on
    // a channel of 10 ms frames asks for with vc_set_mixed_output_block_ms), else 20 ms.
    let blockMs = audio.frameMicros == 10_000 ? 10 : 20
    try listener.setMixedOutputBlock(ms: blockMs)
    let renderNs = UInt64(blockMs) * 1_000_000
    let lookahead = encoderLookahead(audio)
    let lookaheadNs = UInt64(lookahead) * 1_000_000_000 / 48000
    func frames(ms: Int) -> Int { ms * 1000 / Int(audio.frameMicros) }

    /// A talkspurt of `ms` of audio with bursts starting at the given times: the quiet
    /// speech-like background and loud tones on top, on frame boundaries.
    func talkspurt(ms: Int, burstsAt: [Int]) -> [Int16] {
        var pcm = TestSignal.speech(samples: frames(ms: ms) * fs, seed: 5, amplitude: 0.02)
        let tone = burst(samples: frames(ms: 120) * fs)
        for b in burstsAt { for i in 0..<tone.count { pcm[frames(ms: b) * fs + i] = tone[i] } }
        return pcm
    }

    /// The first moment after now + 5 ms that lies `phase` after one of the mixer's ticks.
    func start(atPhase phase: UInt64) -> UInt64 {
        var t = detector.lastBlockNs.load(ordering: .acquiring) + phase
        let soon = MonotonicClock.nanoseconds() + 5_000_000
        while t < soon { t += renderNs }
        return t
    }

    /// Feeds `pcm` in real time from `t0`; returns the feed times of the burst frames.
    func feed(_ sid: UInt32, _ pcm: [Int16], from t0: UInt64, burstsAt: [Int]) throws -> [UInt64] {
        var onsets: [UInt64] = []
        let burstFrames = burstsAt.map { frames(ms: $0) }
        try pcm.withUnsafeBufferPointer { p in
            for k in 0..<(pcm.count / fs) {
                sleepUntil(ns: t0 + UInt64(k) * frameNs)
                if burstFrames.contains(k) { onsets.append(MonotonicClock.nanoseconds()) }
                try feeder.feed(streamID: sid, pcm: p.baseAddress! + k * fs, frames: fs, channels: 1)
            }
        }
        return onsets
    }

    /// latency − floor (ms) of each fed onset heard, from the detector's onsets.
    func excess(_ fed: [UInt64]) -> [Double] {
        let heard = (0..<detector.count.load(ordering: .acquiring)).map { detector.onsets[$0] }
        return fed.compactMap { f in
            // The first onset heard after the burst was captured (allowing the codec to
            // smear it a little earlier) and within 300 ms.
            heard.first { $0 + 5_000_000 > f - frameNs && $0 < f + 300_000_000 }
                .map { (Double($0) - Double(f) - Double(lookaheadNs)) / 1e6 }
        }
    }

    func phase(_ i: Int) -> UInt64 { UInt64(2 * i + 1) * renderNs / UInt64(2 * phases) }

    func waitForStreams(_ count: Int, exceptSSRC old: UInt32? = nil) -> UInt32 {
        let deadline = MonotonicClock.milliseconds() + 5000
        while true {
            let list = listener.remoteStreams()
            if list.count == count, count == 0 || list[0].ssrc != old { return list.first?.ssrc ?? 0 }
            if MonotonicClock.milliseconds() > deadline { fail("the listener did not see the feeder's streams change") }
            sleepSeconds(0.005)
        }
    }

    // 1. Continuous talk: at each phase a new stream (a fresh jitter buffer) speaks
    //    1.2 s without a pause; bursts at 0.5 and 0.9 s, once the stream has settled.
    var continuous: [Double] = []
    var fedCount = 0
    var concealed: UInt64 = 0, concealedAtEnd: UInt64 = 0
    var lastSSRC: UInt32? = nil
    let steady = talkspurt(ms: 1200, burstsAt: [500, 900])
    for i in 0..<phases {
        let sid = try feeder.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = waitForStreams(1, exceptSSRC: lastSSRC)
        lastSSRC = ssrc
        let fed = try feed(sid, steady, from: start(atPhase: phase(i)), burstsAt: [500, 900])
        fedCount += fed.count
        // Concealment while the stream talks, and after the host stopped feeding (its
        // talkspurt then ends with a padded last frame a frame plus 20 ms later).
        let during = (try? listener.streamStats(ssrc: ssrc))?.jitter.plcFrames ?? 0
        sleepSeconds(0.15)
        let got = excess(fed)
        continuous += got
        if let st = try? listener.streamStats(ssrc: ssrc) {
            concealed += during
            concealedAtEnd += st.jitter.plcFrames - during
        }
        if verbose { fputs("continuous phase \(Double(phase(i)) / 1e6) ms: \(got)\n", stderr) }
        try feeder.stopStream(sid)
        _ = waitForStreams(0)
    }
    reportDistribution("continuous", continuous, expected: fedCount)
    report("continuous_concealed", Double(concealed))
    report("continuous_concealed_at_end", Double(concealedAtEnd))

    // 2. Conversation: one stream speaks talkspurts of 0.8 s with 0.3 s pauses, each
    //    started at another phase of the mixer's tick; bursts at 0.3 and 0.55 s. The
    //    first talkspurt (the stream's first, no history yet) is not counted.
    let sid = try feeder.startStream(kind: .mic, externalFeed: true, channels: 1)
    let ssrc = waitForStreams(1, exceptSSRC: lastSSRC)
    let spurt = talkspurt(ms: 800, burstsAt: [300, 550])
    var spurts: [Double] = []
    fedCount = 0
    var pauseConcealed: UInt64 = 0
    func plc() -> UInt64 { (try? listener.streamStats(ssrc: ssrc))?.jitter.plcFrames ?? 0 }
    for s in 0...phases {
        let fed = try feed(sid, spurt, from: start(atPhase: phase(s % phases)), burstsAt: [300, 550])
        let talking = plc()
        sleepSeconds(0.3)
        pauseConcealed += plc() - talking
        guard s > 0 else { continue }
        fedCount += fed.count
        let got = excess(fed)
        spurts += got
        if verbose { fputs("talkspurt \(s) phase \(Double(phase(s % phases)) / 1e6) ms: \(got)\n", stderr) }
    }
    let stats = try? listener.streamStats(ssrc: ssrc)
    if verbose, let j = stats?.jitter { fputs("\(j)\n", stderr) }
    reportDistribution("spurts", spurts, expected: fedCount)
    report("spurts_target_ms", Double(stats?.targetDepthMs ?? 0))
    report("spurts_concealed", Double(stats?.jitter.plcFrames ?? 0))
    report("spurts_concealed_in_pauses", Double(pauseConcealed))
    report("spurts_late", Double(stats?.jitter.late ?? 0))
    report("frame_ms", Double(audio.frameMicros) / 1000)
    report("block_ms", Double(blockMs))
    report("lookahead_ms", Double(lookahead) / 48)
    report("floor_ms", Double(audio.frameMicros) / 1000 + Double(lookahead) / 48)
    feeder.shutdown()
    listener.shutdown()
    say("done")
}
