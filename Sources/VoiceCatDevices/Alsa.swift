// ALSA: the AudioBackend that talks to sound hardware. S16_LE, interleaved, blocking
// I/O in periods. PCMs may also come from an in-process ALSA configuration
// (vc_set_alsa_config), e.g. file-backed PCMs for tests.
import Glibc
import CAlsa
import VoiceCatSystem

/// A device failure, with ALSA's reason.
public struct DeviceError: Error, CustomStringConvertible {
    public let message: String
    public let code: Int32
    public init(_ message: String, code: Int32 = 0) { self.message = message; self.code = code }
    public var description: String { message }
}

func alsaReason(_ err: Int32) -> String { String(cString: snd_strerror(err)) }

/// Process-wide extra ALSA configuration (PCM definitions) loaded from text.
public enum AlsaConfig {
    static let lock = Lock()
    nonisolated(unsafe) static var config: OpaquePointer? = nil
    nonisolated(unsafe) static var silenced = false

    static func silenceOnce() {
        lock.withLock {
            if !silenced { vcshim_alsa_silence_errors(); silenced = true }
        }
    }

    /// Replaces the extra configuration with `text` (ALSA configuration syntax); nil clears it.
    public static func set(_ text: String?) throws {
        silenceOnce()
        guard let text else {
            lock.withLock { if let c = config { snd_config_delete(c) }; config = nil }
            return
        }
        var top: OpaquePointer? = nil
        var rc = snd_config_top(&top)
        guard rc >= 0, let top else { throw DeviceError("snd_config_top: \(alsaReason(rc))", code: rc) }
        var input: OpaquePointer? = nil
        rc = text.withCString { snd_input_buffer_open(&input, $0, strlen($0)) }
        guard rc >= 0, let input else { snd_config_delete(top); throw DeviceError("snd_input_buffer_open: \(alsaReason(rc))", code: rc) }
        rc = snd_config_load(top, input)
        snd_input_close(input)
        guard rc >= 0 else { snd_config_delete(top); throw DeviceError("ALSA configuration does not parse: \(alsaReason(rc))", code: rc) }
        lock.withLock {
            if let c = config { snd_config_delete(c) }
            config = top
        }
    }

    /// A PCM the extra configuration defines, with what its `hint` block says, as in
    /// ALSA's own configuration: `hint.description` (nil: none) and `hint.ioid`
    /// ("Input": capture only, "Output": playback only; nil: either).
    struct DefinedPCM: Equatable {
        var name: String
        var description: String?
        var ioid: String?
    }

    /// The PCMs the extra configuration defines.
    static func definedPCMs() -> [DefinedPCM] {
        lock.withLock {
            guard let c = config else { return [] }
            var pcm: OpaquePointer? = nil
            guard snd_config_search(c, "pcm", &pcm) >= 0, let pcm else { return [] }
            func string(_ node: OpaquePointer, _ key: String) -> String? {
                var leaf: OpaquePointer? = nil
                var s: UnsafePointer<CChar>? = nil
                guard snd_config_search(node, key, &leaf) >= 0, let leaf, snd_config_get_string(leaf, &s) >= 0, let s else { return nil }
                return String(cString: s)
            }
            var out: [DefinedPCM] = []
            var it = snd_config_iterator_first(pcm)
            while it != snd_config_iterator_end(pcm) {
                if let node = snd_config_iterator_entry(it) {
                    var id: UnsafePointer<CChar>? = nil
                    if snd_config_get_id(node, &id) >= 0, let id {
                        out.append(DefinedPCM(name: String(cString: id), description: string(node, "hint.description"),
                                              ioid: string(node, "hint.ioid")))
                    }
                }
                it = snd_config_iterator_next(it)
            }
            return out
        }
    }

    /// Opens `name` from the extra configuration when it defines it, else from ALSA's own.
    static func open(_ name: String, _ stream: snd_pcm_stream_t) -> (OpaquePointer?, Int32) {
        silenceOnce()
        var pcm: OpaquePointer? = nil
        let rc: Int32 = lock.withLock {
            if let c = config {
                var node: OpaquePointer? = nil
                if snd_config_search(c, "pcm.\(name)", &node) >= 0 {
                    return snd_pcm_open_lconf(&pcm, name, stream, 0, c)
                }
            }
            return snd_pcm_open(&pcm, name, stream, 0)
        }
        return (pcm, rc)
    }
}

/// The ALSA backend (one per process; ALSA's configuration is process-wide).
public final class AlsaBackend: AudioBackend {
    public static let shared = AlsaBackend()
    public var name: String { "ALSA" }
    public func listDevices(_ direction: DeviceDirection) -> [DeviceInfo] { listAlsaDevices(direction) }
    /// Periods of `periodFrames` in a buffer of at least `minBufferMs` (four 20 ms ones;
    /// sixteen of a playback card's 5 ms).
    public func open(_ name: String, direction: DeviceDirection, channels: Int, sampleRate: Int, periodFrames: Int) throws -> AudioDevice {
        let periods = max(AlsaPCM.bufferPeriods, (AlsaBackend.minBufferMs * sampleRate / 1000 + periodFrames - 1) / max(1, periodFrames))
        return try AlsaPCM(name: name, direction: direction, channels: channels, sampleRate: sampleRate, periodFrames: periodFrames,
                           periods: periods)
    }
    public static let minBufferMs = 80
}

/// Lists PCMs for a direction: ALSA's name hints plus the extra configuration's PCMs.
/// Capture PCMs whose name or description says "monitor" record what the system
/// plays (PulseAudio / PipeWire monitor sources through ALSA's pulse plugin, or a
/// PCM a host defines for one): usable for SCREEN_AUDIO.
func listAlsaDevices(_ dir: DeviceDirection) -> [DeviceInfo] {
    AlsaConfig.silenceOnce()
    func isMonitor(_ name: String, _ desc: String) -> Bool {
        dir == .capture && (name.lowercased().contains("monitor") || desc.lowercased().contains("monitor"))
    }
    // A defined PCM's direction is known only from its hint (opening one to find out
    // would create or truncate a file-backed playback PCM's file).
    var out: [DeviceInfo] = AlsaConfig.definedPCMs().compactMap { p in
        guard p.ioid == nil || (dir == .capture && p.ioid == "Input") || (dir == .playback && p.ioid == "Output") else { return nil }
        let desc = p.description ?? "defined by vc_set_alsa_config"
        return DeviceInfo(name: p.name, description: desc, isMonitor: isMonitor(p.name, p.description ?? ""))
    }
    var hints: UnsafeMutablePointer<UnsafeMutableRawPointer?>? = nil
    if snd_device_name_hint(-1, "pcm", &hints) >= 0, let hints {
        var i = 0
        while let h = hints[i] {
            func get(_ key: String) -> String? {
                guard let p = snd_device_name_get_hint(h, key) else { return nil }
                defer { free(p) }
                return String(cString: p)
            }
            let ioid = get("IOID")
            let wanted = ioid == nil || (dir == .capture && ioid == "Input") || (dir == .playback && ioid == "Output")
            if wanted, let name = get("NAME"), !out.contains(where: { $0.name == name }) {
                let desc = (get("DESC") ?? "").split(separator: "\n").joined(separator: " — ")
                out.append(DeviceInfo(name: name, description: desc, isMonitor: isMonitor(name, desc)))
            }
            i += 1
        }
        snd_device_name_free_hint(hints)
    }
    return out
}

/// One open PCM.
public final class AlsaPCM: AudioDevice {
    public let name: String
    public let direction: DeviceDirection
    /// The channels the device runs with: those asked, or (a device that offers only
    /// the other count of 1 and 2: a mono USB microphone, a stereo-only card) that one,
    /// for the caller to convert.
    public private(set) var channels: Int
    /// The period ALSA gave, in frames at `sampleRate`.
    public private(set) var periodFrames: Int
    public private(set) var sampleRate: Int
    /// The buffer ALSA gave, in frames at `sampleRate`.
    public private(set) var bufferFrames: Int
    private var pcm: OpaquePointer?

    /// Opens and configures a PCM: S16_LE interleaved, `channels` (or the other of 1 and
    /// 2 when only that one is offered: see `channels`), the rate nearest
    /// `sampleRate` the device offers, periods of `periodFrames` at `sampleRate` (a
    /// duration: a device that runs at another rate gets as many ms, not as many
    /// frames), a buffer of `periods` periods.
    /// The periods a device's buffer holds unless asked otherwise.
    public static let bufferPeriods = 4

    public init(name: String, direction: DeviceDirection, channels: Int, sampleRate: Int = 48000, periodFrames: Int = 960,
                periods: Int = AlsaPCM.bufferPeriods) throws {
        self.name = name
        self.direction = direction
        self.channels = channels
        self.periodFrames = periodFrames
        self.sampleRate = sampleRate
        self.bufferFrames = periodFrames * periods
        let what = direction == .capture ? "capture" : "playback"
        let (p, rc) = AlsaConfig.open(name, direction == .capture ? SND_PCM_STREAM_CAPTURE : SND_PCM_STREAM_PLAYBACK)
        guard rc >= 0, let p else { throw DeviceError("cannot open \(what) device \"\(name)\": \(alsaReason(rc))", code: rc) }
        pcm = p
        var hw: OpaquePointer? = nil
        guard snd_pcm_hw_params_malloc(&hw) >= 0, let hw else { snd_pcm_close(p); throw DeviceError("out of memory") }
        defer { snd_pcm_hw_params_free(hw) }
        func check(_ step: String, _ r: Int32) throws {
            if r < 0 {
                snd_pcm_close(p)
                pcm = nil
                throw DeviceError("\(what) device \"\(name)\": \(step) failed: \(alsaReason(r))", code: r)
            }
        }
        try check("hw_params_any", snd_pcm_hw_params_any(p, hw))
        try check("set_access", snd_pcm_hw_params_set_access(p, hw, SND_PCM_ACCESS_RW_INTERLEAVED))
        try check("set_format S16_LE", snd_pcm_hw_params_set_format(p, hw, SND_PCM_FORMAT_S16_LE))
        if snd_pcm_hw_params_test_channels(p, hw, UInt32(channels)) < 0 && (channels == 1 || channels == 2)
            && snd_pcm_hw_params_test_channels(p, hw, UInt32(3 - channels)) >= 0 {
            self.channels = 3 - channels
        }
        try check("set_channels \(self.channels)", snd_pcm_hw_params_set_channels(p, hw, UInt32(self.channels)))
        var rate = UInt32(sampleRate)
        try check("set_rate \(sampleRate)", snd_pcm_hw_params_set_rate_near(p, hw, &rate, nil))
        self.sampleRate = Int(rate)
        // 960 frames asked at 48 kHz are 160 at 8 kHz: 960 there were 120 ms periods
        // (a capture stream 100 ms later than at 48 kHz) and 10 ms at 96 kHz.
        let wanted = max(1, Int((Int64(periodFrames) * Int64(rate) + Int64(sampleRate) / 2) / Int64(max(1, sampleRate))))
        var period = snd_pcm_uframes_t(wanted)
        try check("set_period_size", snd_pcm_hw_params_set_period_size_near(p, hw, &period, nil))
        var buffer = snd_pcm_uframes_t(Int(period) * periods)
        try check("set_buffer_size", snd_pcm_hw_params_set_buffer_size_near(p, hw, &buffer))
        try check("hw_params", snd_pcm_hw_params(p, hw))
        self.periodFrames = Int(period)
        self.bufferFrames = Int(buffer)
        try check("prepare", snd_pcm_prepare(p))
        // A capture card runs from here (a read would start it): what it holds says
        // when the first read can come without blocking (heldFrames).
        if direction == .capture { try check("start", snd_pcm_start(p)) }
    }

    /// From snd_pcm_avail, which asks the driver where the card is: a card's is below
    /// its buffer after a transfer (a period read leaves what came since; a period
    /// written is not played at once); a PCM that does not run in real time (the file
    /// plugin over `null`) has its whole buffer available at any time. An error (an
    /// xrun) reads as what has the caller transfer now (the transfer recovers it):
    /// playback 0, capture a period.
    public func heldFrames() -> Int? {
        guard let p = pcm else { return nil }
        let avail = Int(snd_pcm_avail(p))
        if avail < 0 { return direction == .capture ? periodFrames : 0 }
        if avail >= bufferFrames { return nil }
        return direction == .capture ? avail : bufferFrames - avail
    }

    deinit { close() }

    public func close() {
        if let p = pcm { snd_pcm_close(p); pcm = nil }
    }

    /// Reads exactly `frames` (recovering from overruns). Throws on an unrecoverable error.
    public func read(_ buf: UnsafeMutablePointer<Int16>, frames: Int) throws {
        try transfer(frames: frames) { p, done in snd_pcm_readi(p, buf + done * channels, snd_pcm_uframes_t(frames - done)) }
    }

    /// Writes exactly `frames` (recovering from underruns).
    public func write(_ buf: UnsafePointer<Int16>, frames: Int) throws {
        try transfer(frames: frames) { p, done in snd_pcm_writei(p, buf + done * channels, snd_pcm_uframes_t(frames - done)) }
    }

    /// Repeats `io` (frames done so far → frames moved or a negative error) until
    /// `frames` have moved, recovering xruns with snd_pcm_recover. The xruns of a transfer
    /// that fails are not counted: the device has failed (counted as that).
    private func transfer(frames: Int, _ io: (OpaquePointer, Int) -> Int) throws {
        let what = direction == .capture ? "capture" : "playback"
        guard let p = pcm else { throw DeviceError("\(what) device \"\(name)\" is closed") }
        // (The device's description is made only for an error: every period goes through here.)
        try AlsaPCM.transfer(frames: frames, what: "\(what) device \"\(name)\"", io: { io(p, $0) },
                             recover: { snd_pcm_recover(p, $0, 1) }, xruns: &xruns)
    }

    /// Failed transfers recovered in a row, with no frame moved between them, after
    /// which the device counts as failed: a device that recovers from every error and
    /// fails the next transfer at once (a broken driver or plugin: every read an
    /// overrun, prepare and start succeeding) spun its thread at full CPU, raised
    /// nothing, and never let vc_stream_stop or vc_client_destroy join it.
    static let maxRecoveriesWithoutData = 8

    /// The transfer loop (pure, for tests): `io` moves frames (argument: frames done so
    /// far; result: frames moved, or a negative ALSA error), `recover` is
    /// snd_pcm_recover for an error (negative: it could not). Throws when an error
    /// cannot be recovered, or when `maxRecoveriesWithoutData` recoveries come in a
    /// row without a frame moved (a transfer that moves nothing counts as one). `xruns`
    /// grows by the over- and underruns recovered, once the transfer has completed.
    static func transfer(frames: Int, what: @autoclosure () -> String, io: (Int) -> Int, recover: (Int32) -> Int32,
                         xruns: inout Int) throws {
        var done = 0
        var fruitless = 0
        var recovered = 0
        defer { if done >= frames { xruns += recovered } }
        while done < frames {
            let n = io(done)
            if n > 0 {
                done += n
                fruitless = 0
                continue
            }
            let err = Int32(clamping: n)
            if n < 0 && recover(err) < 0 {
                throw DeviceError("\(what()) failed: \(alsaReason(err))", code: err)
            }
            // (An interrupted call is retried, not counted: nothing was lost.)
            recovered += n == -Int(EPIPE) || n == -Int(ESTRPIPE) ? 1 : 0
            fruitless += 1
            if fruitless >= maxRecoveriesWithoutData {
                let why = n < 0 ? alsaReason(err) : "no frames moved"
                throw DeviceError("\(what()) keeps failing: \(why) (\(fruitless) transfers in a row moved nothing)",
                                  code: n < 0 ? err : -Int32(EIO))
            }
        }
    }

    /// Over- and underruns recovered and not yet taken (each a transfer that failed with
    /// EPIPE, or ESTRPIPE after a suspend, and was recovered): audio the device lost.
    private var xruns = 0

    public func takeXruns() -> Int {
        defer { xruns = 0 }
        return xruns
    }
}

/// The backoff before reopening a card that stalled (PeriodPacer): it opens fine, so
/// each stall in a row waits twice as long (250 ms up to 5 s), until the card has
/// moved a second's periods.
public struct StallBackoff {
    private var ms: UInt64 = 250
    private var periods = 0
    public init() {}
    /// The card stalled: how long to wait before reopening it.
    public mutating func stalled() -> UInt64 {
        defer { ms = min(ms * 2, 5000); periods = 0 }
        return ms
    }
    /// The card moved a period (of 20 ms).
    public mutating func moved() {
        periods += 1
        if periods == 50 { ms = 250 }
    }
}

/// Paces a device loop to the monotonic clock, for PCMs that run as fast as they are
/// driven (file-backed, null, memory); a sound card's own clock paces its loop instead
/// (AudioDevice.heldFrames: a capture card's blocking read, `wait(for:)` for playback).
public struct PeriodPacer {
    let periodNs: UInt64
    var next: UInt64
    let catchUpNs: UInt64

    /// Periods of `periodFrames` at `sampleRate`; after a stall, at most
    /// `catchUpPeriods` of them back to back.
    public init(periodFrames: Int, sampleRate: Int = 48000, catchUpPeriods: Int = 2) {
        periodNs = UInt64(periodFrames) * 1_000_000_000 / UInt64(sampleRate)
        next = MonotonicClock.nanoseconds() + periodNs
        catchUpNs = UInt64(max(0, catchUpPeriods)) * periodNs
    }

    /// Sleeps until the next period is due. After a stall it catches up by at most
    /// `catchUpPeriods` periods back to back and skips the rest (the clock
    /// resynchronizes), so a consumer never sees a burst of more than that and one
    /// more at once. A capture device's loop catches up its whole buffer: a sound card
    /// that blocks kept what a stall left in its buffer, and a loop that skipped part
    /// of it read that much behind the card from then on, so the next stall overran it.
    public mutating func wait() {
        let now = MonotonicClock.nanoseconds()
        if next > now {
            sleepUntil(monotonicNs: next)
        } else if now - next > catchUpNs {
            next = now
        }
        next += periodNs
    }

    /// A card that plays nothing of what it holds for this long has stopped (its
    /// clock stalled without an error: a driver whose interrupts stopped, a sound
    /// server's stream suspended): a blocking write would have waited for ever.
    public static let cardStallNs: UInt64 = 1_000_000_000

    /// The card the pacer follows (wait(for:)): what it held after the last block, and
    /// when it was last seen to play.
    private var cardHeld: Int? = nil
    private var cardMovedAt: UInt64 = 0

    /// Paces blocks to a device that runs in real time. `held`: its heldFrames() just
    /// after a block of `block` frames was written; `lead`: what it should hold when
    /// the next block is rendered. The next block is due a period after this one,
    /// corrected by an eighth of how far the card is from holding `lead + block` now:
    /// the card's clock is followed (a card 1 % fast keeps about 2 ms less in hand)
    /// without passing on the jitter of a card that tells its position in steps (of up
    /// to a period: ticks that jumped by that much made every stream's buffer keep it
    /// as delay). A card that holds less than a block gets the next one at once. One
    /// that holds two blocks more than it should (its clock slower than it said, or
    /// stalled) is waited for until it is down to `lead`; one with no room for the next
    /// block, until it has room (a write into a full buffer of a card that stalled
    /// waited for ever); asking it again after each sleep. Returns when the next block
    /// is due (monotonic ns; when `stopped` ends a wait, when it would have been), or
    /// nil when the card has played nothing for `cardStallNs`. The pacer's next period
    /// is then a period after it (for a device that stops running in real time: it
    /// failed and is replaced). `restarted`: the card was just started again (primed
    /// after an underrun), so what it holds is not compared with the last block's.
    public mutating func wait(for device: AudioDevice, held: Int, lead: Int, block: Int, restarted: Bool = false,
                              stopped: () -> Bool) -> UInt64? {
        let rate = UInt64(max(1, device.sampleRate))
        var now = MonotonicClock.nanoseconds()
        if let before = cardHeld, held >= before + block, !restarted {
            if now - cardMovedAt > PeriodPacer.cardStallNs { return nil }   // nothing played since the last block
        } else {
            cardMovedAt = now
        }
        cardHeld = held
        if held < block {
            next = now + periodNs
            return now
        }
        // Waits until the card holds at most `limit` (nil: it stalled; a time: `stopped`).
        func drain(to limit: Int) -> UInt64?? {
            var left = held
            while left > limit {
                if stopped() { return .some(now + UInt64(left - limit) * 1_000_000_000 / rate) }
                if now - cardMovedAt > PeriodPacer.cardStallNs { return .some(nil) }
                let ns = min(UInt64(left - limit) * 1_000_000_000 / rate, periodNs)
                sleepUntil(monotonicNs: now + ns)
                now = MonotonicClock.nanoseconds()
                guard let h = device.heldFrames() else { break }
                if h < left { cardMovedAt = now }
                left = h
            }
            return nil
        }
        if held > lead + 2 * block {
            if let early = drain(to: lead) { return early }
            cardHeld = nil   // the next block starts a new count (it is written at once)
            next = now + periodNs
            return now
        }
        if held > device.bufferFrames - block, let early = drain(to: device.bufferFrames - block) { return early }
        // `next`: when the next block is due on the schedule so far.
        let error = (Int64(held) - Int64(lead + block)) * 1_000_000_000 / Int64(rate) / 8
        let due = UInt64(max(Int64(now), Int64(next) + error))
        sleepUntil(monotonicNs: due)
        next = due + periodNs
        return due
    }

    /// For a capture device that runs in real time (`held` frames ready: its
    /// heldFrames()), sleeps until it has `period` frames to read, asking it again after
    /// each sleep, so that the read does not block: a card that stopped delivering
    /// without an error (a sound server's stream suspended, an ALSA plugin over it:
    /// no timeout) held the capture thread in snd_pcm_readi for ever, and
    /// vc_stream_stop and vc_client_destroy with it. False when the card has delivered
    /// nothing for `cardStallNs`; true when it has a period, `stopped` ends the wait,
    /// or it no longer runs in real time.
    public mutating func wait(forCapture device: AudioDevice, held: Int, period: Int, stopped: () -> Bool) -> Bool {
        let rate = UInt64(max(1, device.sampleRate))
        var held = held
        var movedAt = MonotonicClock.nanoseconds()
        while held < period && !stopped() {
            let now = MonotonicClock.nanoseconds()
            if now - movedAt > PeriodPacer.cardStallNs { return false }
            let ns = min(UInt64(period - held) * 1_000_000_000 / rate, periodNs)
            sleepUntil(monotonicNs: now + ns)
            guard let h = device.heldFrames() else { return true }
            if h > held { movedAt = MonotonicClock.nanoseconds() }
            held = h
        }
        next = MonotonicClock.nanoseconds() + periodNs
        return true
    }

    /// When the next period is due (monotonic ns).
    public var nextDueNs: UInt64 { next }

    /// The next period is due at `ns` (and the others a period apart after it): a
    /// consumer that takes over another's schedule.
    public mutating func resume(at ns: UInt64) { next = ns }

    /// The next period (and all after it) comes `ns` earlier (negative: later).
    public mutating func move(earlierByNs ns: Int64) {
        next = ns >= 0 ? (next > UInt64(ns) ? next - UInt64(ns) : 0) : next + ns.magnitude
    }
}
