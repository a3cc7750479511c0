// swift-tools-version:5.9
//
// VoiceCat: a real-time voice core (libvoicecat) and its relay server.
//
// Module layering (pure core below, system edge above):
//   CSodium, COpus,      one C module per system library: its headers for Swift and, where
//   CSpeexDSP, CAlsa,    Swift cannot call something (variadic *_ctl, variadic handlers,
//   CLinux               GNU-only calls), a prefixed vcshim_* pass-through. A product links
//                        only the libraries of the modules it uses (the server: libsodium).
//   VoiceCatProtocol     pure: wire format, protobuf codec, messages, crypto, replay window.
//                        Knows nothing about sockets, threads or devices.
//   VoiceCatAudio        pure: Opus wrappers, reframer, jitter buffer, mixer and limiter.
//   VoiceCatSystem       system edge: syscalls (EINTR/EAGAIN handling), sockets, poll, clocks.
//   VoiceCatDevices      system edge: ALSA capture and playback PCMs, device lists.
//   VoiceCatABI          the public header's types (include/voicecat.h) for Swift.
//   VoiceCatCompat       C entry points for earlier releases' struct layouts (symbol versions).
//   VoiceCatClient       the client engine: session, send and receive paths, mixer threads.
//   VoiceCatImpl         the C ABI: @_cdecl vc_* exports over VoiceCatClient (libvoicecat.so).
//   VoiceCatServerCore   the relay server (event loop over VoiceCatSystem + VoiceCatProtocol).
//   voicecat-server      thin executable around VoiceCatServerCore.
//   voicecat-fuzz        libFuzzer target over every parser that reads network bytes.
//   voicecat-fuzz-client libFuzzer target over the client's control handling (decoded messages).
//   VoiceCatSimulation   trace simulator for the jitter buffer (bench-jitter and tests; not shipped).
//   voicecat-loadgen     load generator for the server (`make bench-relay`), speaking the protocol.
//   bench-audio          the client's audio paths against bare libopus (`make bench`; docs/benchmarks.md).
import PackageDescription

// The pure audio core (VoiceCatAudio: jitter buffer, codec wrappers, mixer, DSP) leaves
// the run-time exclusivity checks to debug builds. In release builds each access to a
// class's stored property that the optimizer cannot prove exclusive costs a
// swift_beginAccess/endAccess pair (a thread-local lookup): perf uprobes on the listener's
// renderer thread counted ~26 per received frame at 64 streams, most in the jitter buffer.
// The run-time check catches a same-thread re-entry; the core never calls host code (its
// only closures are the engine's own: Reframer's emit, the decoder's call), and its tests
// and the engine's run in debug with the checks on. The client engine calls host code
// (sinks, event and log callbacks, which may call back in: c-test and py-test do, against
// the release library) and keeps the checks in every build, as do the protocol and server.
let audioCoreSettings: [SwiftSetting] = [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]

let package = Package(
    name: "VoiceCat",
    products: [
        .library(name: "voicecat", type: .dynamic, targets: ["VoiceCatImpl"]),
        .executable(name: "voicecat-server", targets: ["voicecat-server"]),
        .executable(name: "voicecat-fuzz", targets: ["voicecat-fuzz"]),
        .executable(name: "voicecat-fuzz-client", targets: ["voicecat-fuzz-client"]),
        .executable(name: "bench-jitter", targets: ["bench-jitter"]),
        .executable(name: "bench-quality", targets: ["bench-quality"]),
        .executable(name: "voicecat-loadgen", targets: ["voicecat-loadgen"]),
        .executable(name: "bench-audio", targets: ["bench-audio"]),
    ],
    targets: [
        .systemLibrary(name: "CSodium"),
        .systemLibrary(name: "CSpeexDSP"),
        .target(name: "COpus", cSettings: [.unsafeFlags(["-I/usr/include/opus"])],
                linkerSettings: [.linkedLibrary("opus"), .linkedLibrary("dl")]),
        .target(name: "CAlsa", linkerSettings: [.linkedLibrary("asound")]),
        .target(name: "CLinux"),
        .target(name: "CFuzzerDriver"),
        .target(name: "VoiceCatProtocol", dependencies: ["CSodium"]),
        .target(name: "VoiceCatSystem", dependencies: ["CLinux"]),
        .target(name: "VoiceCatAudio", dependencies: ["COpus", "CSpeexDSP", "VoiceCatProtocol"], swiftSettings: audioCoreSettings),
        .target(name: "VoiceCatABI"),
        // Entry points for the struct layouts of earlier releases (symbol versions, the ABI policy).
        .target(name: "VoiceCatCompat"),
        .target(name: "VoiceCatDevices", dependencies: ["CAlsa", "VoiceCatSystem"]),
        .target(name: "VoiceCatClient", dependencies: ["VoiceCatABI", "VoiceCatAudio", "VoiceCatDevices", "VoiceCatProtocol", "VoiceCatSystem"]),
        .target(name: "VoiceCatImpl", dependencies: ["VoiceCatClient", "VoiceCatABI", "VoiceCatCompat"]),
        .target(name: "VoiceCatServerCore", dependencies: ["VoiceCatProtocol", "VoiceCatSystem"]),
        .executableTarget(name: "voicecat-server", dependencies: ["VoiceCatServerCore"]),
        .executableTarget(name: "voicecat-fuzz", dependencies: ["VoiceCatProtocol", "CFuzzerDriver"]),
        .executableTarget(name: "voicecat-fuzz-client", dependencies: ["VoiceCatClient", "VoiceCatProtocol", "CFuzzerDriver"]),
        // Trace simulator for the jitter buffer (benchmark and tests only; not in any product).
        .target(name: "VoiceCatSimulation", dependencies: ["VoiceCatAudio", "VoiceCatProtocol"]),
        .executableTarget(name: "bench-jitter", dependencies: ["VoiceCatSimulation", "VoiceCatAudio", "CSpeexDSP"]),
        // What a listener hears under loss (PESQ by tools/quality_bench.py; make bench-quality).
        .executableTarget(name: "bench-quality", dependencies: ["VoiceCatSimulation", "VoiceCatAudio", "VoiceCatProtocol"]),
        .executableTarget(name: "voicecat-loadgen", dependencies: ["VoiceCatTestSupport", "VoiceCatProtocol", "VoiceCatSystem"]),
        .target(name: "VoiceCatAllocCounter"),
        // The audio paths against bare libopus (issue #15): spawns itself as server, talkers and clients.
        .executableTarget(name: "bench-audio", dependencies: ["VoiceCatClient", "VoiceCatAudio", "VoiceCatProtocol", "VoiceCatSystem",
                                                              "VoiceCatServerCore", "VoiceCatAllocCounter", "VoiceCatTestSupport", "COpus", "CLinux"]),
        .target(name: "VoiceCatTestSupport", dependencies: ["VoiceCatServerCore", "VoiceCatSystem", "VoiceCatSimulation", "VoiceCatProtocol"]),
        .testTarget(name: "VoiceCatProtocolTests", dependencies: ["VoiceCatProtocol"]),
        .testTarget(name: "VoiceCatAudioTests", dependencies: ["VoiceCatAudio", "VoiceCatSimulation", "VoiceCatAllocCounter"]),
        .testTarget(
            name: "VoiceCatServerTests",
            dependencies: ["VoiceCatServerCore", "VoiceCatProtocol", "VoiceCatSystem", "VoiceCatTestSupport", "VoiceCatAllocCounter"]
        ),
        .testTarget(
            name: "VoiceCatClientTests",
            dependencies: ["VoiceCatClient", "VoiceCatAudio", "VoiceCatProtocol", "VoiceCatSystem", "VoiceCatTestSupport",
                           "VoiceCatSimulation", "VoiceCatAllocCounter", "VoiceCatImpl", "VoiceCatABI"]
        ),
    ]
)
