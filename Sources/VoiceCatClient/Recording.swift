// Recordings (vc_start_recording): the mix, or one remote stream, written to a WAV
// file. The render thread only copies each block into the recording's lock-free
// single-producer ring (no file I/O, lock or allocation there; a full ring drops the
// block and counts it); the recording's own writer thread drains the ring every
// 20 ms and writes the file, rewriting the header's sizes every second and at the end.
// A recording is named by what it records: ssrc 0 the mix, else that speaker; at
// most one per source and `RecorderSet.capacity` at once.
import Glibc
import Synchronization
import VoiceCatAudio
import VoiceCatSystem

/// Single-producer single-consumer ring of int16 samples.
final class SampleRing: @unchecked Sendable {
    private let buffer: UnsafeMutablePointer<Int16>
    private let mask: Int
    /// Samples written and read so far (each side writes only its own counter).
    private let written = Atomic<Int>(0)
    private let read = Atomic<Int>(0)

    /// Room for at least `minimum` samples (rounded up to a power of two).
    init(minimum: Int) {
        var cap = 1024
        while cap < minimum { cap <<= 1 }
        buffer = .allocate(capacity: cap)
        buffer.initialize(repeating: 0, count: cap)
        mask = cap - 1
    }

    deinit { buffer.deallocate() }

    var capacity: Int { mask + 1 }

    /// Producer: appends all `count` samples, or nothing when they do not fit.
    func push(_ src: UnsafePointer<Int16>, count: Int) -> Bool {
        let w = written.load(ordering: .relaxed)
        let r = read.load(ordering: .acquiring)
        guard capacity - (w - r) >= count else { return false }
        runs(from: w, count: count) { at, done, run in (buffer + at).update(from: src + done, count: run) }
        written.store(w + count, ordering: .releasing)
        return true
    }

    /// Consumer: takes up to `max` samples into `dst`; returns how many.
    func pop(into dst: UnsafeMutablePointer<Int16>, max: Int) -> Int {
        let r = read.load(ordering: .relaxed)
        let w = written.load(ordering: .acquiring)
        let n = min(max, w - r)
        runs(from: r, count: n) { at, done, run in (dst + done).update(from: buffer + at, count: run) }
        read.store(r + n, ordering: .releasing)
        return n
    }

    /// The contiguous pieces of `count` samples from position `start`: (ring index,
    /// samples before it, length).
    private func runs(from start: Int, count: Int, _ body: (Int, Int, Int) -> Void) {
        var done = 0
        while done < count {
            let at = (start + done) & mask
            let run = min(count - done, capacity - at)
            body(at, done, run)
            done += run
        }
    }
}

/// Which file a path or descriptor names (device and inode).
struct FileID: Equatable {
    let device: UInt64
    let inode: UInt64
    init(device: UInt64, inode: UInt64) { self.device = device; self.inode = inode }
    init?(fd: Int32) {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        device = UInt64(st.st_dev); inode = UInt64(st.st_ino)
    }
    /// The file at `path`, if there is one.
    init?(path: String) {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        device = UInt64(st.st_dev); inode = UInt64(st.st_ino)
    }
}

/// One recording: its file, ring and writer thread.
final class Recorder {
    /// What it records: 0 the mix, else a remote stream's ssrc.
    let ssrc: UInt32
    let path: String
    let sampleRate: Int
    let channels: Int
    private let ring: SampleRing
    private let fd: Int32
    /// The file's identity (device, inode), to refuse a second recording into it.
    let fileID: FileID
    private let stop = StopFlag()
    private let wakeup = Condition()
    private var thread: SystemThread?
    /// Frames the render thread could not hand over (the ring was full).
    let droppedFrames = Atomic<UInt64>(0)
    /// Frames not written after a write failed (writer thread; read after it ended).
    private var unwrittenFrames: UInt64 = 0
    /// Told of the first write failure, on the writer thread (an ERROR event).
    private let onFailure: (String) -> Void
    /// Frames written to the file (writer thread writes, anyone reads).
    let writtenFrames = Atomic<UInt64>(0)
    /// The first write error, if any (read after the writer thread has ended).
    private(set) var failure: String?
    /// Whether a block was pushed yet (render thread only).
    private var pushedAny = false
    /// The first block came faded in already (set by the render thread before it is pushed).
    private let startsFadedIn = Atomic<Bool>(false)
    /// A speaker's recording: its stream was removed; it takes nothing more, even when
    /// a stream with the same ssrc comes back (a rejoin, a reconnect).
    let sourceEnded = Atomic<Bool>(false)

    static let headerBytes = 44
    /// The largest data chunk a RIFF header can describe.
    static let maxDataBytes = UInt64(UInt32.max) - 36

    /// The most audio the file takes (`maxDataBytes`; smaller in tests).
    private let dataLimitBytes: UInt64

    /// Creates the file (truncating an existing one), writes the header and starts
    /// the writer thread. Throws when the file cannot be created.
    init(ssrc: UInt32, path: String, sampleRate: Int, channels: Int, dataLimitBytes: UInt64 = Recorder.maxDataBytes,
         onFailure: @escaping (String) -> Void = { _ in }) throws {
        self.ssrc = ssrc; self.path = path; self.sampleRate = sampleRate; self.channels = channels
        self.dataLimitBytes = min(dataLimitBytes, Recorder.maxDataBytes)
        self.onFailure = onFailure
        // Two seconds of audio between the render thread and the writer.
        ring = SampleRing(minimum: sampleRate * channels * 2)
        let f = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard f >= 0 else {
            throw ClientError.invalidArgument("cannot create \(path): \(String(cString: strerror(errno)))")
        }
        fd = f
        fileID = FileID(fd: f) ?? FileID(device: 0, inode: 0)
        var header = Recorder.header(rate: sampleRate, channels: channels, dataBytes: 0)
        guard Recorder.writeAll(fd, &header, count: header.count) else {
            let why = String(cString: strerror(errno))
            close(fd)
            throw ClientError.invalidArgument("cannot write \(path): \(why)")
        }
        thread = SystemThread(name: "vc-record") { [unowned self] in self.run() }
    }

    /// Render thread: hands one block over (dropped and counted when the writer is behind).
    /// `fadedIn`: the block starts a fade-in of its own (the render's taps starting with
    /// this recording), so the file's start is not faded again.
    func push(_ pcm: UnsafePointer<Int16>, frames: Int, fadedIn: Bool = false) {
        if !pushedAny {
            pushedAny = true
            // Published by the ring's release of this block, read after its acquire.
            if fadedIn { startsFadedIn.store(true, ordering: .relaxed) }
        }
        if !ring.push(pcm, count: frames * channels) { droppedFrames.wrappingAdd(UInt64(frames), ordering: .relaxed) }
    }

    /// Writes what is still in the ring, completes the header, closes the file.
    /// Returns why the recording is incomplete when a write failed.
    @discardableResult
    func finish() -> String? {
        wakeup.withLock { stop.set(); wakeup.broadcast() }
        thread?.join()
        thread = nil
        guard let failure else { return nil }
        func seconds(_ frames: UInt64) -> String {
            let cs = (frames * 100 + UInt64(sampleRate / 2)) / UInt64(sampleRate)
            return "\(cs / 100).\(cs % 100 < 10 ? "0" : "")\(cs % 100) s"
        }
        return "\(failure); the file holds the first \(seconds(writtenFrames.load(ordering: .relaxed))), "
            + "\(seconds(unwrittenFrames)) were not written"
    }

    private func run() {
        let chunkSamples = 9600
        let chunk = UnsafeMutablePointer<Int16>.allocate(capacity: chunkSamples)
        defer { chunk.deallocate() }
        var dataBytes: UInt64 = 0
        var headerAt: UInt64 = 0
        let second = UInt64(sampleRate * channels * 2)
        // A recording started while someone talks begins mid-waveform: its first
        // milliseconds fade in (no click at the start of the file), unless the render
        // faded them already (a speaker's recording that started the taps: faded twice,
        // the start would follow the ramp's square).
        var fadeDone = 0
        var fadeKnown = false
        let fadeFrames = FadeIn.frames(at: sampleRate)
        while true {
            let stopping = stop.isSet
            while true {
                let n = ring.pop(into: chunk, max: chunkSamples)
                if n == 0 { break }
                if !fadeKnown {
                    fadeKnown = true
                    if startsFadedIn.load(ordering: .relaxed) { fadeDone = fadeFrames }
                }
                fadeDone = FadeIn.apply(chunk, frames: n / channels, channels: channels, done: fadeDone, total: fadeFrames)
                guard failure == nil else {
                    unwrittenFrames += UInt64(n / channels)
                    continue
                }
                // The whole frames that still fit the WAV format's 4 GiB; at the limit
                // the recording fails as a full disk does (the host hears of it).
                let frameBytes = UInt64(2 * channels), bytes = UInt64(n * 2)
                let fit = min(bytes, (dataLimitBytes - dataBytes) / frameBytes * frameBytes)
                if fit > 0 && !Recorder.writeAll(fd, chunk, count: Int(fit)) {
                    // What was written stays a readable file (the header follows it,
                    // and a chunk written in part is cut off); nothing more is
                    // written, and the host hears of it now.
                    fail("recording \(path): writing failed: \(String(cString: strerror(errno)))", unwritten: n / channels)
                    _ = ftruncate(fd, off_t(UInt64(Recorder.headerBytes) + dataBytes))
                    continue
                }
                dataBytes += fit
                writtenFrames.wrappingAdd(fit / frameBytes, ordering: .relaxed)
                if fit < bytes {
                    fail("recording \(path): the file reached the WAV format's limit of 4 GiB",
                         unwritten: Int((bytes - fit) / frameBytes))
                }
            }
            // The sizes in the header follow the data (a crash leaves a readable file).
            if dataBytes - headerAt >= second || stopping {
                patchHeader(dataBytes: dataBytes)
                headerAt = dataBytes
            }
            if stopping { break }
            wakeup.withLock { if !stop.isSet { wakeup.wait(untilMs: MonotonicClock.milliseconds() + 20) } }
        }
        close(fd)
        let dropped = droppedFrames.load(ordering: .relaxed)
        if dropped > 0 { ClientLog.log(1, "recording \(path): \(dropped) frames dropped (the writer fell behind)") }
    }

    /// The first failure: nothing more is written, and the host is told now.
    private func fail(_ why: String, unwritten: Int) {
        failure = why
        unwrittenFrames += UInt64(unwritten)
        ClientLog.log(1, why)
        onFailure(why + "; nothing more is written")
    }

    private func patchHeader(dataBytes: UInt64) {
        var riff = UInt32(36 + dataBytes).littleEndian, data = UInt32(dataBytes).littleEndian
        _ = pwrite(fd, &riff, 4, 4)
        _ = pwrite(fd, &data, 4, 40)
    }

    static func header(rate: Int, channels: Int, dataBytes: UInt32) -> [UInt8] {
        var h: [UInt8] = []
        func u32(_ v: UInt32) { h += [UInt8(v & 0xff), UInt8(v >> 8 & 0xff), UInt8(v >> 16 & 0xff), UInt8(v >> 24)] }
        func u16(_ v: UInt16) { h += [UInt8(v & 0xff), UInt8(v >> 8)] }
        h += Array("RIFF".utf8); u32(36 + dataBytes); h += Array("WAVEfmt ".utf8)
        u32(16); u16(1); u16(UInt16(channels)); u32(UInt32(rate)); u32(UInt32(rate * channels * 2))
        u16(UInt16(channels * 2)); u16(16)
        h += Array("data".utf8); u32(dataBytes)
        return h
    }

    /// write(2) until everything is out (EINTR retried); false on an error.
    static func writeAll(_ fd: Int32, _ p: UnsafeRawPointer, count: Int) -> Bool {
        var off = 0
        while off < count {
            let n = write(fd, p + off, count - off)
            if n < 0 { if errno == EINTR { continue }; return false }
            off += n
        }
        return true
    }
}

/// The client's recordings: a fixed set of cells the render thread reads without locks.
final class RecorderSet {
    static let capacity = 8
    private let cells: [CallbackCell<Recorder>] = (0..<RecorderSet.capacity).map { _ in CallbackCell<Recorder>() }
    /// Control side: which cell holds which recorder (guarded by `lock`; start and stop only).
    private let lock = Lock()
    private var recorders: [Recorder?] = Array(repeating: nil, count: RecorderSet.capacity)
    /// Recordings running, of the mix and of speakers (the render thread skips the
    /// work when none).
    private let mixCount = Atomic<Int>(0)
    private let speakerCount = Atomic<Int>(0)

    var recordsMix: Bool { mixCount.load(ordering: .relaxed) > 0 }
    var recordsSpeakers: Bool { speakerCount.load(ordering: .relaxed) > 0 }
    var isEmpty: Bool { !recordsMix && !recordsSpeakers }

    private func count(_ ssrc: UInt32, _ delta: Int) {
        if ssrc == 0 { mixCount.wrappingAdd(delta, ordering: .releasing) } else { speakerCount.wrappingAdd(delta, ordering: .releasing) }
    }

    /// Throws when a recording of `ssrc` into `path` would be refused: one records the
    /// same source, all cells are used, or one writes that file. Checked before the
    /// file is created, so a refused start leaves whatever is at `path` untouched
    /// (the caller serializes starts).
    func checkCanAdd(ssrc: UInt32, path: String) throws {
        try lock.withLock {
            if recorders.contains(where: { $0?.ssrc == ssrc }) {
                throw ClientError.state(ssrc == 0 ? "the mix is already being recorded" : "ssrc \(ssrc) is already being recorded")
            }
            guard recorders.contains(where: { $0 == nil }) else {
                throw ClientError.noMemory("\(RecorderSet.capacity) recordings are running (the most a client has at once)")
            }
            if let id = FileID(path: path), let r = recorders.first(where: { $0?.fileID == id }) ?? nil {
                throw ClientError.state("\(path) is being written by the recording of " + (r.ssrc == 0 ? "the mix" : "ssrc \(r.ssrc)"))
            }
        }
    }

    /// Installs a recorder checked with `checkCanAdd`.
    func add(_ r: Recorder) throws {
        try checkCanAdd(ssrc: r.ssrc, path: "")
        let index: Int = lock.withLock {
            let i = recorders.firstIndex(where: { $0 == nil })!
            recorders[i] = r
            return i
        }
        cells[index].set(r)
        count(r.ssrc, 1)
    }

    /// Takes the recorder of `ssrc` out; returns once the render thread no longer uses it.
    func remove(ssrc: UInt32) -> Recorder? {
        let found: (Int, Recorder)? = lock.withLock {
            guard let i = recorders.firstIndex(where: { $0?.ssrc == ssrc }), let r = recorders[i] else { return nil }
            recorders[i] = nil
            return (i, r)
        }
        guard let (index, r) = found else { return nil }
        cells[index].set(nil)
        count(ssrc, -1)
        return r
    }

    /// Every source being recorded.
    var sources: [UInt32] { lock.withLock { recorders.compactMap { $0?.ssrc } } }

    /// The remote stream `ssrc` was removed: its recording, if any, takes nothing more.
    func sourceRemoved(ssrc: UInt32) {
        lock.withLock { for case let r? in recorders where r.ssrc == ssrc { r.sourceEnded.store(true, ordering: .relaxed) } }
    }

    /// Render thread (one at a time): hands a block of the mix (ssrc 0) or of a
    /// speaker to its recorder.
    func push(ssrc: UInt32, _ pcm: UnsafePointer<Int16>, frames: Int, fadedIn: Bool = false) {
        for i in 0..<RecorderSet.capacity {
            cells[i].call { r in
                if r.ssrc == ssrc && !r.sourceEnded.load(ordering: .relaxed) { r.push(pcm, frames: frames, fadedIn: fadedIn) }
            }
        }
    }
}
