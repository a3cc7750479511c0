// voicecat-server: the VoiceCat relay. See docs/server.md.
import Glibc
import VoiceCatServerCore
import VoiceCatSystem

let usage = """
usage: voicecat-server [options]
  --config FILE            settings and channels (docs/server.md); options below override it.
                           SIGHUP reads it again: channels and limits change, sessions stay.
  --bind HOST              address to listen on (default 127.0.0.1)
  --port N                 TCP and UDP port (default 47800, as is 0); `any`: a free port (see --port-file)
  --identity FILE          identity key file, created 0600 on first start (default voicecat-identity.key)
  --password PW            server password required in Hello
  --admin-password PW      credential for server mute/deafen and kick requests
  --max-users N            sessions at once (default 64)
  --reap-seconds S         drop sessions silent on TCP and UDP for S seconds (default 30)
  --stats-interval S       print counters every S seconds (default 0 = never)
  --port-file FILE         write the bound port to FILE once listening (for scripts)
  --help
"""

func fail(_ message: String) -> Never {
    fputs("voicecat-server: \(message)\n", stderr)
    exit(2)
}

var configPath: String? = nil
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
        guard let d = Double(v) else { fail("\(a) needs a number, got \(v)") }
        return d
    }
    switch a {
    case "--config": configPath = value()
    case "--bind": let v = value(); overrides.append { $0.bindHost = v }
    case "--port":
        let v = value()
        if v == "any" {
            overrides.append { $0.anyPort = true }
        } else {
            guard let p = UInt16(v) else { fail("--port needs 0..65535 (0 = 47800) or any, got \(v)") }
            overrides.append { $0.port = p; $0.anyPort = false }
        }
    case "--identity": let v = value(); overrides.append { $0.identityPath = v }
    case "--password", "--admin-password":
        // Empty would mean none: an unset shell variable (`--password "$PW"`) must not
        // start an open server, as `password =` in the config file does not.
        let v = value()
        guard !v.isEmpty else { fail("\(a) is empty (leave the option out for none)") }
        if a == "--password" { overrides.append { $0.password = v } } else { overrides.append { $0.adminPassword = v } }
    case "--max-users":
        let v = value()
        guard let n = Int(v) else { fail("--max-users needs a whole number, got \(v)") }
        overrides.append { $0.maxUsers = n }
    case "--reap-seconds": let v = number(); overrides.append { $0.reapSeconds = v }
    case "--stats-interval": let v = number(); overrides.append { $0.statsIntervalSeconds = v }
    case "--port-file": portFile = value()
    case "--help", "-h": print(usage); exit(0)
    default: fail("unknown option \(a)\n\(usage)")
    }
}

/// The config file (if any) with the command-line options on top.
func loadConfig() throws -> ServerConfig {
    var c = ServerConfig()
    if let path = configPath {
        guard let bytes = try Files.read(path) else { throw SystemError("open(\(path))", errno: ENOENT) }
        do { try c.apply(configBytes: bytes) } catch {
            throw ConfigFileError(description: "\(path): \(error)")
        }
    }
    for o in overrides { o(&c) }
    return c
}

struct ConfigFileError: Error, CustomStringConvertible { let description: String }

let config: ServerConfig
do { config = try loadConfig() } catch { fail("\(error)") }
do { try config.validate() } catch { fail("invalid setting \(error)") }

// Every session and every connection not yet logged in holds a descriptor.
let wantedFiles = config.maxUsers + config.maxUnauthenticated + 64
let openFiles = ResourceLimits.raiseOpenFiles(to: wantedFiles)
if openFiles < wantedFiles {
    fputs("voicecat-server: warning: the open-file limit is \(openFiles), below max_users + max_unauthenticated + 64 = \(wantedFiles); "
          + "raise it (systemd: LimitNOFILE=) or lower max_users\n", stderr)
}

// The port file is written once the port is bound; one that cannot be is refused now,
// before the identity file is created or the port taken.
if let pf = portFile {
    let dir = pf.contains("/") ? String(pf[..<pf.lastIndex(of: "/")!]) : "."
    if access(pf, F_OK) == 0 ? access(pf, W_OK) != 0 : access(dir.isEmpty ? "/" : dir, W_OK) != 0 {
        fail("cannot write the port file \(pf): \(String(cString: strerror(errno)))")
    }
}

let server: Server
do { server = try Server(config: config) } catch { fail("cannot start: \(error)") }
setvbuf(stdout, nil, _IOLBF, 0)
print(server.identityCreated ? "created identity \(config.identityPath)" : "loaded identity \(config.identityPath)")
print("fingerprint \(server.fingerprint)")
for c in config.channels.prefix(20) {
    print("channel \(c.name): \(c.audio.mode == .stereo ? "stereo" : "mono") \(c.audio.bitrate) bps \(Double(c.audio.frameMicros) / 1000) ms")
}
if config.channels.count > 20 { print("... and \(config.channels.count - 20) more channels") }
if let pf = portFile {
    // A script waits for this file: one that cannot be written is an error, not a
    // server running on a port nobody learns.
    guard let f = fopen(pf, "w") else {
        fail("cannot write the port file \(pf): \(String(cString: strerror(errno)))")
    }
    let written = fputs("\(server.port)\n", f) >= 0
    guard fclose(f) == 0, written else { fail("cannot write the port file \(pf): \(String(cString: strerror(errno)))") }
}

// SIGINT/SIGTERM stop the loop cleanly and SIGHUP reloads. They are blocked in every
// thread (the server's thread inherits the mask) and taken here with sigwait.
var signals = sigset_t()
sigemptyset(&signals)
for s in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&signals, s) }
pthread_sigmask(SIG_BLOCK, &signals, nil)
signal(SIGPIPE, SIG_IGN)
server.start()
while true {
    var sig: Int32 = 0
    guard sigwait(&signals, &sig) == 0 else { continue }
    guard sig == SIGHUP else { break }
    do {
        try server.reload(try loadConfig())
        fputs("voicecat-server: SIGHUP: configuration reloaded\n", stderr)
    } catch {
        fputs("voicecat-server: SIGHUP: configuration not reloaded: \(error)\n", stderr)
    }
}
server.stop()
