// voicecat-fuzz: feeds arbitrary bytes to every parser that reads network input:
// the media frame header and media open, the UDP binding payload, the control-frame opener, the protobuf
// control-message decoder and the handshake messages. None may crash, hang or
// read out of bounds; each must either parse or throw.
//
// Built with `make fuzz` (-sanitize=fuzzer,address -DFUZZING) it is a libFuzzer
// binary. Built normally it replays the files named on its command line, so the
// corpus in Tests/fuzz-corpus runs in every test pass.
import CFuzzerDriver
import VoiceCatProtocol
#if canImport(Glibc)
import Glibc
#endif

// Fixed keys so that inputs are reproducible.
let mediaKey = SymmetricKey([UInt8](repeating: 0x11, count: 32))
let controlKey = SymmetricKey([UInt8](repeating: 0x22, count: 32))
let identity = try! IdentityKey(seed: [UInt8](repeating: 0x33, count: 32))

func fuzzOne(_ data: UnsafeRawBufferPointer) {
    let bytes = Array(data)

    // Media: header parse, then an in-place open attempt.
    _ = try? FrameHeader.parse(data)
    var copy = bytes
    copy.withUnsafeMutableBytes { d in _ = try? MediaCrypto.open(d, key: mediaKey) }
    _ = try? UDPBindingPayload.parse(data)

    // Control: the byte stream as frames (split in two chunks), and the raw bytes as
    // a plaintext message.
    var opener = ControlOpener(key: controlKey)
    let cut = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
    opener.append(bytes[0..<cut])
    _ = try? opener.next()
    opener.append(bytes[cut...])
    while let p = try? opener.next() { _ = try? ControlMessage.decode(p) }
    if let m = try? ControlMessage.decode(bytes) {
        // Whatever decodes must re-encode to something that decodes the same.
        let again = try? ControlMessage.decode(m.encode())
        if again != m { fatalError("control message does not round-trip: \(m)") }
    }

    // Handshake messages from either side.
    _ = try? Handshake.parseClientHello(bytes)
    _ = try? Handshake.serverHelloBodySize(prefix: bytes)
    _ = try? ServerHandshake.respond(clientHello: bytes, identity: identity)
    _ = try? ClientHandshake().finish(serverHello: bytes, pinnedFingerprint: nil)
}

#if FUZZING
var argc = CommandLine.argc
var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in
    fuzzOne(UnsafeRawBufferPointer(start: data, count: size))
    return 0
})
#else
var files = 0
for path in CommandLine.arguments.dropFirst() {
    guard let f = fopen(path, "rb") else {
        fputs("voicecat-fuzz: cannot open \(path)\n", stderr)
        exit(2)
    }
    var buf = [UInt8](repeating: 0, count: 1 << 20)
    let n = fread(&buf, 1, buf.count, f)
    fclose(f)
    buf.withUnsafeBytes { fuzzOne(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
    files += 1
}
print("voicecat-fuzz: replayed \(files) inputs without a crash")
#endif
