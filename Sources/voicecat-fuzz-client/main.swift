// voicecat-fuzz-client: drives the client's control handling the way a hostile
// server could. An input is a sequence of control plaintexts, each `u16 length
// (big-endian) | u16 message type | protobuf body`; each is decoded and handled
// as the client's network thread would (ControlHarness: the same code, no
// sockets), and the mix is rendered after each. Whatever the client accepts must
// render without a crash or a hang (libFuzzer's -timeout catches a mixer that
// never returns); what it refuses must leave it usable.
//
// Built with `make fuzz` (-sanitize=fuzzer,address -DFUZZING) it is a libFuzzer
// binary. Built normally it replays the files named on its command line, so the
// corpus in Tests/fuzz-corpus-client runs in every test pass.
import CFuzzerDriver
import VoiceCatClient
#if canImport(Glibc)
import Glibc
#endif

let harness = try! ControlHarness()

func fuzzOne(_ data: UnsafeRawBufferPointer) {
    let bytes = Array(data)
    harness.reset()
    var off = 0
    while off + 2 <= bytes.count {
        let n = Int(bytes[off]) << 8 | Int(bytes[off + 1])
        off += 2
        let end = min(bytes.count, off + n)
        harness.handle(plaintext: Array(bytes[off..<end]))
        harness.render(frames: 960)
        off = end
    }
}

#if FUZZING
var argc = CommandLine.argc
var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in
    fuzzOne(UnsafeRawBufferPointer(start: data, count: size))
    return 0
})
#else
var files = 0, streams = 0, changes: UInt64 = 0
for path in CommandLine.arguments.dropFirst() {
    guard let f = fopen(path, "rb") else {
        fputs("voicecat-fuzz-client: cannot open \(path)\n", stderr)
        exit(2)
    }
    var buf = [UInt8](repeating: 0, count: 1 << 20)
    let n = fread(&buf, 1, buf.count, f)
    fclose(f)
    buf.withUnsafeBytes { fuzzOne(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
    streams += harness.remoteStreamCount
    changes += harness.publishedStats?.changes ?? 0
    files += 1
}
print("voicecat-fuzz-client: replayed \(files) inputs without a crash (\(streams) remote streams accepted, "
      + "\(changes) loss protection changes)")
#endif
