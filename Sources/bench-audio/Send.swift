// The `send` role: the send path of a real-time external feed against a bare
// opus_encode of the same frames.
//
// A client connected to the server feeds a MIC stream (continuous input mode, so
// every frame is encoded) one frame per frame period at absolute times, as a host
// feeding from its own capture clock does. VoiceClient.feed queues the frame and
// encodes, seals and sends it on the calling thread when it is due, or leaves it to
// the client's pacer thread (vc-send) when it is early for the talkspurt's clock.
// The send path's CPU per frame is the feeding thread's CPU in feed (its thread CPU
// clock around each call) plus the pacer thread's (its scheduler run time, read
// from /proc without allocating). Half a period after each feed, on the feeding
// thread, a bare OpusEncoderBox at the channel's settings encodes the same frame
// (timed the same way): same frames, same machine, same moments, caches neither
// warmer nor colder. The two take turns in the first slot (the engine first in even
// windows, the bare encode first in odd ones): the slot on the frame period's
// boundary costs more, whoever is in it (an A/A run, --control 1, read 1.02x with the
// control first and 0.93x with it second; the engine 1.08x first and 0.97-0.99x
// second), so with one fixed order the ratio measured the slots, not the engine. The
// ratio is the send path's cost over the codec's, per pair of windows (one of each
// order), the median over the pairs.
//
// The kernel's part, for reference: right after each bare encode, a bare loopback
// sendto of a datagram of the size the engine sends (the packet plus the media
// header and tag) to a socket another thread of this process waits on, as the
// server waits on its own. On loopback the sender's syscall also runs the
// receiver's side of the stack and wakes it, which a network card would not.
import Glibc
import Synchronization
import VoiceCatAllocCounter
import VoiceCatAudio
import VoiceCatClient
import VoiceCatProtocol
import VoiceCatSystem

/// A client with external playback, connected to the `serve` process (its identity
/// pinned: `--fingerprint`; no known-servers file is read or written) and joined.
func connectClient(_ args: Arguments, _ name: String, channel: String, maxRemoteStreams: Int = 32) throws -> VoiceClient {
    var config = ClientConfig()
    config.externalPlayback = true
    config.maxRemoteStreams = maxRemoteStreams
    config.knownServersPath = ""
    let client = try VoiceClient(config: config)
    try client.connect(host: "127.0.0.1", port: UInt16(args.int("port", 0)), username: name, password: nil,
                       pinnedFingerprint: args.string("fingerprint", ""), timeoutMs: 5000)
    try client.joinChannel(channel)
    return client
}

func runSender(_ args: Arguments) throws {
    let warm = 50, windows = args.int("windows", 32), perWindow = args.int("frames", 25)
    let client = try connectClient(args, "sender", channel: BenchChannels.speech20)
    client.setInputMode(.continuous)
    let sid = try client.startStream(kind: .mic, externalFeed: true, channels: 1)
    guard let audio = client.currentChannelAudio else { fail("no channel settings") }
    let bare = try OpusEncoderBox(config: audio)
    // --control 1: a second bare encoder takes the engine's place (an A/A check of the method).
    let control = args.int("control", 0) == 1 ? try OpusEncoderBox(config: audio) : nil
    let fs = audio.frameSamples
    let total = warm + windows * perWindow
    let pcm = TestSignal.speech(samples: total * fs, seed: 11)
    let out = UnsafeMutableRawBufferPointer.allocate(byteCount: 1500, alignment: 16)
    defer { out.deallocate() }
    var feedNs = [UInt64](repeating: 0, count: windows)
    var pacerNs = [UInt64](repeating: 0, count: windows)
    var bareNs = [UInt64](repeating: 0, count: windows)
    var sendtoNs = [UInt64](repeating: 0, count: windows)
    let floor = try SendtoFloor()
    var onFeeder = 0
    var pacer: NamedThreadClock? = nil
    var network: NamedThreadClock? = nil
    var proc0: UInt64 = 0, alloc0: UInt64 = 0, sent0: UInt64 = 0, pacer0: UInt64 = 0, net0: UInt64 = 0
    var proc1: UInt64 = 0, alloc1: UInt64 = 0
    let periodNs = UInt64(audio.frameMicros) * 1000
    let t0 = MonotonicClock.nanoseconds() + 20_000_000
    try pcm.withUnsafeBufferPointer { p in
        for k in 0..<total {
            sleepUntil(ns: t0 + UInt64(k) * periodNs)
            let w = (k - warm) / perWindow
            if k == warm {
                pacer = NamedThreadClock("vc-send")
                network = NamedThreadClock("vc-network")
                guard pacer!.found, network!.found else { fail("the client's vc-send / vc-network threads were not found") }
                sent0 = client.connectionStats().packetsOut
                pacer0 = pacer!.read()
                net0 = network!.read()
                proc0 = CPUClock.process()
                alloc0 = vc_alloc_count()
            }
            let frame = p.baseAddress! + k * fs
            var e: UInt64 = 0, b: UInt64 = 0, st: UInt64 = 0
            func engineSlot() throws {
                let c = CPUClock.thread()
                if let control {
                    _ = try control.encode(frame, into: out)
                } else {
                    try client.feed(streamID: sid, pcm: frame, frames: fs, channels: 1)
                }
                e = CPUClock.thread() - c
            }
            func bareSlot() throws {
                var c = CPUClock.thread()
                let n = try bare.encode(frame, into: out)
                b = CPUClock.thread() - c
                c = CPUClock.thread()
                floor.send(UnsafeRawBufferPointer(rebasing: out[0..<min(out.count, n + MediaLimits.overheadBytes)]))
                st = CPUClock.thread() - c
            }
            // The other half a period later, so that neither warms the caches for the other;
            // the order turns with each window (the warm-up in the first order).
            let bareFirst = k >= warm && w % 2 == 1
            if bareFirst { try bareSlot() } else { try engineSlot() }
            sleepUntil(ns: t0 + UInt64(k) * periodNs + periodNs / 2)
            if bareFirst { try engineSlot() } else { try bareSlot() }
            if k >= warm {
                feedNs[w] += e
                bareNs[w] += b
                sendtoNs[w] += st
                if e > b / 2 { onFeeder += 1 }
                // The pacer's CPU since the last reading belongs to this frame's window.
                // Read here, after both slots, not just before the feed: reading it (a
                // /proc file) right before one of the two slots made that slot slower.
                let pNow = pacer!.read()
                pacerNs[w] += pNow - pacer0
                pacer0 = pNow
            }
        }
        alloc1 = vc_alloc_count()
        proc1 = CPUClock.process()
    }
    let netNs = network!.read() - net0
    let sent = client.connectionStats().packetsOut - sent0
    let frames = Double(windows * perWindow)
    // Per pair of windows (engine first, then bare first): the slots' bias cancels.
    let pairs = stride(from: 0, to: windows - 1, by: 2).map { $0 }
    let ratios = pairs.map { w in Double(feedNs[w] + pacerNs[w] + feedNs[w + 1] + pacerNs[w + 1]) / Double(bareNs[w] + bareNs[w + 1]) }
    let us = { (xs: [UInt64]) in median(xs.map { Double($0) / Double(perWindow) / 1000 }) }
    report("frames", frames)
    report("sent", Double(sent))
    report("on_feeder", Double(onFeeder))
    report("engine_us", median((0..<windows).map { Double(feedNs[$0] + pacerNs[$0]) / Double(perWindow) / 1000 }))
    report("feed_us", us(feedNs))
    report("pacer_us", us(pacerNs))
    report("bare_us", us(bareNs))
    report("sendto_us", us(sendtoNs))
    // The send path less the kernel's loopback sendto, over the bare encode.
    var lessSendto: [Double] = []
    for w in pairs {
        let engine = Double(feedNs[w] + pacerNs[w] + feedNs[w + 1] + pacerNs[w + 1]), kernel = Double(sendtoNs[w] + sendtoNs[w + 1])
        lessSendto.append((engine - kernel) / Double(bareNs[w] + bareNs[w + 1]))
    }
    report("ratio_less_sendto", median(lessSendto))
    report("ratio", median(ratios))
    report("ratio_min", ratios.min() ?? .nan)
    report("ratio_max", ratios.max() ?? .nan)
    let measured = feedNs.reduce(0, +) + pacerNs.reduce(0, +) + bareNs.reduce(0, +)
    report("network_us", Double(netNs) / frames / 1000)
    report("other_us", (Double(proc1 - proc0) - Double(measured) - Double(netNs)) / frames / 1000)
    report("allocs", Double(alloc1 - alloc0))
    // A tight loop of bare encodes of the same frames (caches hot), for reference.
    let hot = try OpusEncoderBox(config: audio)
    var hotRuns: [Double] = []
    for _ in 0..<3 {
        let c = CPUClock.thread()
        try pcm.withUnsafeBufferPointer { p in
            for k in warm..<total { _ = try hot.encode(p.baseAddress! + k * fs, into: out) }
        }
        hotRuns.append(Double(CPUClock.thread() - c) / frames / 1000)
    }
    report("bare_hot_us", median(hotRuns))
    floor.stop()
    client.shutdown()
    say("done")
}

/// A loopback UDP socket that a thread of this process waits on (poll, then reads
/// what came), and a socket to send to it from: the kernel's cost of a send.
final class SendtoFloor: @unchecked Sendable {
    private let rx: Socket
    private let tx: Socket
    private let to: SocketAddress
    private let stopping = Atomic<Bool>(false)
    private var thread: SystemThread?

    init() throws {
        rx = try Socket.bindUDP(try SocketAddress(host: "127.0.0.1", port: 0))
        to = try rx.localAddress()
        tx = try Socket.udp(familyOf: to)
        thread = SystemThread(name: "sendto-floor") { [self] in
            let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: 2048, alignment: 16)
            defer { buf.deallocate() }
            while !stopping.load(ordering: .relaxed) {
                guard (try? rx.waitFor(events: Int16(POLLIN), timeoutMs: 100)) == true else { continue }
                while let got = try? rx.receiveFrom(into: buf), got.0 > 0 {}
            }
        }
    }

    func send(_ bytes: UnsafeRawBufferPointer) { _ = try? tx.sendTo(bytes, to) }

    func stop() {
        stopping.store(true, ordering: .relaxed)
        thread?.join()
        thread = nil
        rx.close()
        tx.close()
    }
}
