// The send-side input gate of MIC streams (seed §11): voice activation by frame
// energy with a hang time, push-to-talk, or continuous. Pure; one decision per
// encoder frame. SCREEN_AUDIO and AUX_DEVICE streams never pass through it.

public enum InputMode: Int32, Sendable {
    case vad = 0
    case pushToTalk = 1
    case continuous = 2
}

public struct GateSettings: Equatable, Sendable {
    public var mode: InputMode = .vad
    /// RMS threshold as a fraction of int16 full scale.
    public var threshold: Float = 0.025
    /// How long the gate stays open after the last frame above the threshold.
    public var hangMs: UInt32 = 300
    public var pushToTalk = false
    public init() {}
}

public struct InputGate: Sendable {
    public enum Decision: Equatable {
        /// Send the frame.
        case open
        /// The gate just closed: send this frame flagged as the last one, then nothing.
        case closing
        /// Do not send.
        case closed
    }

    public private(set) var isOpen = false
    private var hangLeft = 0  // samples per channel

    public init() {}

    /// Closes the gate without a decision (the talkspurt ended for lack of input).
    public mutating func reset() {
        isOpen = false
        hangLeft = 0
    }

    /// RMS of a frame as a fraction of full scale.
    public static func rms(_ pcm: UnsafePointer<Int16>, count: Int) -> Float {
        var acc: Float = 0
        for i in 0..<count { let v = Float(pcm[i]); acc += v * v }
        return (acc / Float(max(1, count))).squareRoot() / 32768
    }

    public mutating func process(_ pcm: UnsafePointer<Int16>, frameSamples: Int, channels: Int, settings: GateSettings) -> Decision {
        let want: Bool
        switch settings.mode {
        case .continuous:
            want = true
        case .pushToTalk:
            want = settings.pushToTalk
        case .vad:
            if InputGate.rms(pcm, count: frameSamples * channels) >= settings.threshold {
                hangLeft = Int(settings.hangMs) * 48
                want = true
            } else if hangLeft > 0 {
                hangLeft -= frameSamples
                want = true
            } else {
                want = false
            }
        }
        if want { isOpen = true; return .open }
        if isOpen { isOpen = false; return .closing }
        return .closed
    }
}
