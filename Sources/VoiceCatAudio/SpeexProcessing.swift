// SpeexDSP processing: the listener's per-stream noise reduction (seed §10) and the
// talker's noise suppression, automatic gain control and acoustic echo cancellation
// (seed §8/§11), behind the ApmProcessor protocol the seed names. States are created
// on the control path; processing a frame does not allocate.
import CSpeexDSP

/// The block SpeexDSP's preprocessor runs in for a codec frame of `frameSamples`:
/// 10 ms when the frame allows, else the frame. Its output comes that much after its
/// input.
public func speexBlockSize(frameSamples: Int) -> Int {
    frameSamples % NoiseReducer.longestBlock == 0 ? NoiseReducer.longestBlock : frameSamples
}

/// Denoises a decoded stream (interleaved stereo at 48 kHz) channel by channel.
/// Mono streams (decoded as L = R) run one state and copy the result to R.
public final class NoiseReducer {
    /// The longest block (10 ms), and so the longest delay a denoiser adds.
    public static let longestBlock = 480
    public let blockSize: Int
    public let streamChannels: Int
    private var states: [OpaquePointer] = []
    private let scratch: UnsafeMutablePointer<Int16>

    /// `frameSamples`: the codec frame.
    public init(frameSamples: Int, streamChannels: Int) {
        blockSize = speexBlockSize(frameSamples: frameSamples)
        self.streamChannels = streamChannels
        for _ in 0..<streamChannels {
            let st = speex_preprocess_state_init(Int32(blockSize), 48000)!
            var on: Int32 = 1
            _ = speex_preprocess_ctl(st, SPEEX_PREPROCESS_SET_DENOISE, &on)
            var suppress: Int32 = -30  // dB of noise attenuation
            _ = speex_preprocess_ctl(st, SPEEX_PREPROCESS_SET_NOISE_SUPPRESS, &suppress)
            states.append(st)
        }
        scratch = .allocate(capacity: blockSize)
        scratch.initialize(repeating: 0, count: blockSize)
    }

    deinit {
        for s in states { speex_preprocess_state_destroy(s) }
        scratch.deallocate()
    }

    /// Whether this denoiser serves a stream of `frameSamples` frames and `streamChannels`.
    public func fits(frameSamples: Int, streamChannels: Int) -> Bool {
        blockSize == speexBlockSize(frameSamples: frameSamples) && self.streamChannels == streamChannels
    }

    /// Processes `frames` stereo frames in place (`frames` a multiple of blockSize).
    public func process(_ stereo: UnsafeMutablePointer<Int16>, frames: Int) {
        var off = 0
        while off + blockSize <= frames {
            for ch in 0..<streamChannels {
                for i in 0..<blockSize { scratch[i] = stereo[2 * (off + i) + ch] }
                speex_preprocess_run(states[ch], scratch)
                for i in 0..<blockSize {
                    stereo[2 * (off + i) + ch] = scratch[i]
                    if streamChannels == 1 { stereo[2 * (off + i) + 1] = scratch[i] }
                }
            }
            off += blockSize
        }
    }
}

/// Talker-side settings (vc_send_processing).
public struct SendProcessing: Equatable, Sendable {
    public var noiseSuppression = false
    public var agc = false
    public var echoCancellation = false
    /// AGC target RMS as a fraction of full scale (default −18 dBFS).
    public var agcLevel: Float = 0.125
    public init(noiseSuppression: Bool = false, agc: Bool = false, echoCancellation: Bool = false) {
        self.noiseSuppression = noiseSuppression; self.agc = agc; self.echoCancellation = echoCancellation
    }
    public var isActive: Bool { noiseSuppression || agc || echoCancellation }
}

/// The seed's talker-side audio processing interface: one mono block at a time.
public protocol ApmProcessor: AnyObject {
    /// Samples per block (10 ms at 48 kHz where the frame allows).
    var blockSize: Int { get }
    /// Processes one near-end (microphone) block in place. `farEnd` is the block of the
    /// played mix that corresponds to it (mono), or nil when nothing is playing.
    func process(_ near: UnsafeMutablePointer<Int16>, farEnd: UnsafePointer<Int16>?)
}

/// SpeexDSP's preprocessor (NS, AGC, residual-echo suppression) and MDF echo canceller.
public final class SpeexApm: ApmProcessor {
    public let blockSize: Int
    public let settings: SendProcessing
    private let pre: OpaquePointer
    private let echo: OpaquePointer?
    private let out: UnsafeMutablePointer<Int16>
    private let silence: UnsafeMutablePointer<Int16>

    /// `tailMs`: the longest echo path the canceller models.
    public init(frameSamples: Int, settings: SendProcessing, tailMs: Int = 250) {
        blockSize = speexBlockSize(frameSamples: frameSamples)
        self.settings = settings
        let p = speex_preprocess_state_init(Int32(blockSize), 48000)!
        pre = p
        func set(_ req: Int32, _ v: Int32) { var x = v; _ = speex_preprocess_ctl(p, req, &x) }
        set(SPEEX_PREPROCESS_SET_DENOISE, settings.noiseSuppression ? 1 : 0)
        set(SPEEX_PREPROCESS_SET_NOISE_SUPPRESS, -30)
        set(SPEEX_PREPROCESS_SET_AGC, settings.agc ? 1 : 0)
        // Its VAD is off from init; setting it (even to 0) prints a warning of
        // SpeexDSP's own on the host's stderr, which no library may write to.
        set(SPEEX_PREPROCESS_SET_DEREVERB, 0)
        if settings.agc {
            // SpeexDSP's AGC level is in its own loudness units (spectrally weighted), not
            // RMS: measured at 48 kHz with 10 ms blocks on speech-like input, output RMS
            // ≈ 0.11 × level. Convert the RMS target accordingly.
            var level = settings.agcLevel * 32768 / 0.11
            _ = speex_preprocess_ctl(p, SPEEX_PREPROCESS_SET_AGC_LEVEL, &level)
            set(SPEEX_PREPROCESS_SET_AGC_MAX_GAIN, 30)
            set(SPEEX_PREPROCESS_SET_AGC_INCREMENT, 12)
        }
        if settings.echoCancellation {
            let e = speex_echo_state_init(Int32(blockSize), Int32(48 * tailMs))!
            var rate: Int32 = 48000
            _ = speex_echo_ctl(e, SPEEX_ECHO_SET_SAMPLING_RATE, &rate)
            _ = speex_preprocess_ctl(p, SPEEX_PREPROCESS_SET_ECHO_STATE, UnsafeMutableRawPointer(e))
            set(SPEEX_PREPROCESS_SET_ECHO_SUPPRESS, -40)
            set(SPEEX_PREPROCESS_SET_ECHO_SUPPRESS_ACTIVE, -15)
            echo = e
        } else {
            echo = nil
        }
        out = .allocate(capacity: blockSize)
        out.initialize(repeating: 0, count: blockSize)
        silence = .allocate(capacity: blockSize)
        silence.initialize(repeating: 0, count: blockSize)
    }

    deinit {
        speex_preprocess_state_destroy(pre)
        if let e = echo { speex_echo_state_destroy(e) }
        out.deallocate()
        silence.deallocate()
    }

    public func process(_ near: UnsafeMutablePointer<Int16>, farEnd: UnsafePointer<Int16>?) {
        if let e = echo {
            speex_echo_cancellation(e, near, farEnd ?? UnsafePointer(silence), out)
            near.update(from: out, count: blockSize)
        }
        speex_preprocess_run(pre, near)
    }
}
