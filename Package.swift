// swift-tools-version:5.9
//
// VoiceCat: a real-time voice core (libvoicecat) and its relay server.
//
// Module layering (pure core below, system edge above):
//   VoiceCatC            C shims: system headers of libsodium, libopus, SpeexDSP, ALSA,
//                        plus one small wrapper per variadic C call Swift cannot import.
//   VoiceCatProtocol     pure: wire format, protobuf codec, messages, crypto, replay window.
//                        Knows nothing about sockets, threads or devices.
//   VoiceCatSystem       system edge: syscalls (EINTR/EAGAIN handling), sockets, poll, clocks.
//   VoiceCatServerCore   the relay server (event loop over VoiceCatSystem + VoiceCatProtocol).
//   voicecat-server      thin executable around VoiceCatServerCore.
//   voicecat-fuzz        libFuzzer target over every parser that reads network bytes.
import PackageDescription

let package = Package(
    name: "VoiceCat",
    products: [
        .executable(name: "voicecat-server", targets: ["voicecat-server"]),
        .executable(name: "voicecat-fuzz", targets: ["voicecat-fuzz"]),
    ],
    targets: [
        .target(
            name: "VoiceCatC",
            cSettings: [.unsafeFlags(["-I/usr/include/opus"])],
            linkerSettings: [
                .linkedLibrary("sodium"),
                .linkedLibrary("opus"),
                .linkedLibrary("speexdsp"),
                .linkedLibrary("asound"),
            ]
        ),
        .target(name: "VoiceCatProtocol", dependencies: ["VoiceCatC"]),
        .target(name: "VoiceCatSystem", dependencies: ["VoiceCatC"]),
        .target(name: "VoiceCatServerCore", dependencies: ["VoiceCatProtocol", "VoiceCatSystem"]),
        .executableTarget(name: "voicecat-server", dependencies: ["VoiceCatServerCore"]),
        .executableTarget(name: "voicecat-fuzz", dependencies: ["VoiceCatProtocol", "VoiceCatC"]),
        .testTarget(name: "VoiceCatProtocolTests", dependencies: ["VoiceCatProtocol"]),
        .testTarget(
            name: "VoiceCatServerTests",
            dependencies: ["VoiceCatServerCore", "VoiceCatProtocol", "VoiceCatSystem"]
        ),
    ]
)
