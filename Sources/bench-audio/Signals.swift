// Deterministic test signals and the Opus packets made from them. Every process of
// a run builds the same ones from the same seeds, so the bare baselines code
// exactly the frames the engine codes.
import Glibc
import VoiceCatAudio
import VoiceCatProtocol

enum TestSignal {
    /// Speech-like mono PCM at 48 kHz: a voiced source whose pitch glides (95–245 Hz)
    /// with eight harmonics under a wandering syllable envelope that never falls
    /// silent, and a short unvoiced (noise) stretch about every 0.6 s. No silence, so
    /// the encoder codes every frame (no DTX) in both the engine and the baseline.
    static func speech(samples n: Int, seed: UInt32, amplitude: Float = 0.25) -> [Int16] {
        var out = [Int16](repeating: 0, count: n)
        let s = Float(seed % 97)
        var phase: Float = 0
        var noise = seed &* 2_654_435_761 | 1
        var prev: Float = 0
        for i in 0..<n {
            let t = Float(i) / 48000
            let f0 = 170 + 60 * sinf(2 * .pi * 0.7 * t + s) + 15 * sinf(2 * .pi * 2.1 * t + 0.3 * s)
            phase += 2 * .pi * f0 / 48000
            if phase > 2 * .pi { phase -= 2 * .pi }
            var voiced: Float = 0
            for h in 1...8 {
                // A formant-like emphasis around the 3rd-4th harmonic.
                let a: Float = (h == 3 || h == 4) ? 0.8 : 0.6 / Float(h)
                voiced += a * sinf(Float(h) * phase + Float(h) * 0.7)
            }
            noise = noise &* 1_664_525 &+ 1_013_904_223
            let white = Float(Int32(bitPattern: noise)) / Float(Int32.max)
            let hiss = white - prev
            prev = white
            let env = 0.6 + 0.25 * sinf(2 * .pi * 3.3 * t + s) + 0.15 * sinf(2 * .pi * 5.1 * t + 0.5 * s)
            let cycle = fmodf(t + 0.013 * s, 0.6)
            let unvoiced: Float = cycle < 0.07 ? 1 : 0
            let x = (1 - unvoiced) * env * voiced / 2.2 + unvoiced * 0.5 * hiss
            out[i] = Int16(max(-32767, min(32767, amplitude * 32767 * x)))
        }
        return out
    }
}

/// Opus packets of a few speech-like signals at one channel's settings. Stream `i`
/// plays signal `i % signals` from its own starting frame, looping.
final class PacketPool {
    let audio: AudioConfig
    let signals: Int
    let framesPerSignal: Int
    /// packets[signal][frame]
    private(set) var packets: [[[UInt8]]] = []

    init(audio: AudioConfig, signals: Int, framesPerSignal: Int) throws {
        self.audio = audio
        self.signals = signals
        self.framesPerSignal = framesPerSignal
        let fs = audio.frameSamples
        let out = UnsafeMutableRawBufferPointer.allocate(byteCount: 1500, alignment: 16)
        defer { out.deallocate() }
        for k in 0..<signals {
            let enc = try OpusEncoderBox(config: audio)
            let pcm = TestSignal.speech(samples: fs * framesPerSignal * audio.channels, seed: UInt32(k + 1))
            var list: [[UInt8]] = []
            try pcm.withUnsafeBufferPointer { p in
                for f in 0..<framesPerSignal {
                    let n = try enc.encode(p.baseAddress! + f * fs * audio.channels, into: out)
                    list.append(Array(UnsafeRawBufferPointer(rebasing: out[0..<n])))
                }
            }
            packets.append(list)
        }
    }

    /// Frame `k` of stream `i`.
    func packet(stream i: Int, frame k: Int) -> [UInt8] {
        packets[i % signals][(k + i * 37) % framesPerSignal]
    }
}
