// Deep REDundancy (seed §4): used when the loaded libopus has it (>= 1.5 built with
// DRED, found with dlsym at run time); otherwise every call reports "nothing
// recovered" and the receive path falls back to in-band FEC or PLC.
import COpus

public enum DRED {
    /// True when the loaded libopus exports the DRED decoder API.
    public static let isAvailable: Bool = vcshim_dred_available() != 0
}

/// Per-stream DRED parser state (created on the control path).
public final class DREDRecovery {
    private let state: UnsafeMutableRawPointer?

    public init() { state = vcshim_dred_create() }
    deinit { vcshim_dred_destroy(state) }

    public var isActive: Bool { state != nil }

    /// Rebuilds the `frames` samples just before `packet` into `out` (interleaved, the
    /// decoder's channels). Returns the samples per channel written: 0 when DRED is
    /// unavailable, the packet has none, or it failed.
    public func recover(decoder: OpusDecoderBox, packet: UnsafeRawBufferPointer, frames: Int, into out: UnsafeMutablePointer<Int16>) -> Int {
        guard let state, let base = packet.baseAddress, packet.count > 0 else { return 0 }
        return max(0, Int(vcshim_dred_recover(state, decoder.dec, base.assumingMemoryBound(to: UInt8.self), Int32(packet.count), out,
                                              Int32(frames))))
    }

    /// The same into float PCM (full scale ±1.0).
    public func recover(decoder: OpusDecoderBox, packet: UnsafeRawBufferPointer, frames: Int, into out: UnsafeMutablePointer<Float>) -> Int {
        guard let state, let base = packet.baseAddress, packet.count > 0 else { return 0 }
        return max(0, Int(vcshim_dred_recover_float(state, decoder.dec, base.assumingMemoryBound(to: UInt8.self), Int32(packet.count),
                                                    out, Int32(frames))))
    }
}
