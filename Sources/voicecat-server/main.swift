// voicecat-server: the VoiceCat relay. See docs/server.md.
import Glibc
import VoiceCatServerCore

let usage = """
usage: voicecat-server [options]
  --config FILE            settings and channels (docs/server.md); options below override it
  --bind HOST              address to listen on (default 127.0.0.1)
  --port N                 TCP and UDP port (default 47800; 0 = any free port)
  --identity FILE          identity key file, created 0600 on first start (default voicecat-identity.key)
  --password PW            server password required in Hello
  --admin-password PW      credential for server mute/deafen requests
  --reap-seconds S         drop sessions silent on TCP and UDP for S seconds (default 30)
  --stats-interval S       print counters every S seconds (default 0 = never)
  --port-file FILE         write the bound port to FILE once listening (for scripts)
  --help
"""

func fail(_ message: String) -> Never {
    fputs("voicecat-server: \(message)\n", stderr)
    exit(2)
}

var config = ServerConfig()
var overrides: [(inout ServerConfig) -> Void] = []
var portFile: String? = nil
var args = CommandLine.arguments.dropFirst()
while let a = args.popFirst() {
    func value() -> String {
        guard let v = args.popFirst() else { fail("\(a) needs a value\n\(usage)") }
        return v
    }
    func number() -> Double {
        let v = value()
        guard let d = Double(v), d >= 0 else { fail("\(a) needs a non-negative number, got \(v)") }
        return d
    }
    switch a {
    case "--config":
        let path = value()
        guard let f = fopen(path, "r") else { fail("cannot open config \(path): \(String(cString: strerror(errno)))") }
        var text = ""
        var buf = [CChar](repeating: 0, count: 4096)
        while fgets(&buf, 4096, f) != nil { text += String(cString: buf) }
        fclose(f)
        do { try config.apply(configText: text) } catch { fail("\(path): \(error)") }
    case "--bind": let v = value(); overrides.append { $0.bindHost = v }
    case "--port":
        let v = value()
        guard let p = UInt16(v) else { fail("--port needs 0..65535, got \(v)") }
        overrides.append { $0.port = p }
    case "--identity": let v = value(); overrides.append { $0.identityPath = v }
    case "--password": let v = value(); overrides.append { $0.password = v }
    case "--admin-password": let v = value(); overrides.append { $0.adminPassword = v }
    case "--reap-seconds": let v = number(); overrides.append { $0.reapSeconds = v }
    case "--stats-interval": let v = number(); overrides.append { $0.statsIntervalSeconds = v }
    case "--port-file": portFile = value()
    case "--help", "-h": print(usage); exit(0)
    default: fail("unknown option \(a)\n\(usage)")
    }
}
for o in overrides { o(&config) }

let server: Server
do { server = try Server(config: config) } catch { fail("cannot start: \(error)") }
setvbuf(stdout, nil, _IOLBF, 0)
print(server.identityCreated ? "created identity \(config.identityPath)" : "loaded identity \(config.identityPath)")
print("fingerprint \(server.fingerprint)")
for c in config.channels {
    print("channel \(c.name): \(c.audio.mode == .stereo ? "stereo" : "mono") \(c.audio.bitrate) bps \(Double(c.audio.frameMicros) / 1000) ms")
}
if let pf = portFile, let f = fopen(pf, "w") {
    fputs("\(server.port)\n", f)
    fclose(f)
}

// SIGINT/SIGTERM stop the loop cleanly (the handler only flips a flag the main thread waits on).
nonisolated(unsafe) var stopSignal: sig_atomic_t = 0
signal(SIGINT) { _ in stopSignal = 1 }
signal(SIGTERM) { _ in stopSignal = 1 }
signal(SIGPIPE, SIG_IGN)
server.start()
while stopSignal == 0 { usleep(100_000) }
server.stop()
