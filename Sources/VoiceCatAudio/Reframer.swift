// Turns PCM blocks of any size into codec frames of a fixed size (seed §3: the send
// path reframes every captured or fed block to the channel's frame_ms), converting
// the channel count on the way: mono into a stereo encoder is upmixed L = R, stereo
// into a mono encoder is averaged. Preallocated; never allocates after init.

public final class Reframer {
    public let frameSamples: Int
    public let channels: Int
    private let buffer: UnsafeMutablePointer<Int16>
    private var filled = 0

    public init(frameSamples: Int, channels: Int) {
        self.frameSamples = frameSamples
        self.channels = channels
        buffer = .allocate(capacity: frameSamples * channels)
        buffer.initialize(repeating: 0, count: frameSamples * channels)
    }

    deinit { buffer.deallocate() }

    /// Samples per channel waiting for the next frame.
    public var pending: Int { filled }

    /// Appends `frames` sample frames of `inChannels` interleaved channels; calls
    /// `emit` with a pointer to each complete frame (valid only during the call).
    public func push(_ pcm: UnsafePointer<Int16>, frames: Int, inChannels: Int, emit: (UnsafePointer<Int16>) -> Void) {
        var i = 0
        while i < frames {
            let take = min(frames - i, frameSamples - filled)
            let dst = buffer + filled * channels
            let src = pcm + i * inChannels
            if inChannels == channels {
                dst.update(from: src, count: take * channels)
            } else if inChannels == 1 {  // mono → stereo
                for k in 0..<take { dst[2 * k] = src[k]; dst[2 * k + 1] = src[k] }
            } else {                     // stereo → mono
                for k in 0..<take { dst[k] = Int16((Int32(src[2 * k]) + Int32(src[2 * k + 1])) / 2) }
            }
            filled += take
            i += take
            if filled == frameSamples {
                emit(UnsafePointer(buffer))
                filled = 0
            }
        }
    }
}
