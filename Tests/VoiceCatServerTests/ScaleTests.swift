// Lists that do not fit one 64 KiB control frame: a channel of 5,000 members with
// 64-byte names, and a server with 2,000 channels. Every client gets the whole list,
// split over several messages, and nothing is dropped or disconnected.
import Glibc
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class ScaleTests: XCTestCase {
    override class func setUp() {
        super.setUp()
        // Thousands of sessions: both ends of each connection live in this process.
        ResourceLimits.raiseOpenFiles(to: 32_768)
    }

    /// A 64-byte name, distinct for each `i`.
    static func longName(_ prefix: String, _ i: Int) -> String {
        let p = "\(prefix)-\(i)-"
        return p + String(repeating: "x", count: 64 - p.utf8.count)
    }

    func testTwoThousandChannelsReachEveryClient() throws {
        let names = (0..<2000).map { ScaleTests.longName("channel", $0) }
        let ts = try TestServer { $0.channels = names.map { ChannelConfig(name: $0, audio: .speech) } }
        defer { ts.stop() }
        var clients: [TestClient] = []
        for i in 0..<20 {
            let c = try TestClient.login(port: ts.port, username: "user\(i)", openUDP: false)
            XCTAssertEqual(c.hello.channels.map(\.name), names, "client \(i)")
            XCTAssertEqual(Set(c.hello.channels.map(\.id)).count, names.count)
            clients.append(c)
        }
        // The last channel of the list can be joined.
        let r = try clients[0].join(names[1999])
        XCTAssertEqual(r.channelID, clients[0].hello.channels[1999].id)
        XCTAssertEqual(r.audio, .speech)
        let c = ts.counters
        // About 200 KB of channels: every login took several ChannelList parts.
        XCTAssertGreaterThanOrEqual(c.listPartsSent, 40)
        XCTAssertEqual(c.controlOversize, 0)
        XCTAssertEqual(c.controlProtocolErrors, 0)
        for c in clients { c.close() }
    }

    func testChannelOfFiveThousandMembersWithLongNames() throws {
        let total = 5000
        let ts = try TestServer {
            $0.maxUsers = total + 10
            $0.channels = [ChannelConfig(name: "Big", audio: .speech)]
        }
        defer { ts.stop() }
        let names = (0..<total).map { ScaleTests.longName("member", $0) }

        // The first member is in before anyone else: it must hear of every later join.
        let first = try TestClient.login(port: ts.port, username: names[0], openUDP: false)
        XCTAssertEqual(try first.join("Big").members.count, 0)

        // 4,998 members log in one by one, then all ask to join at once. A reader thread
        // drains their connections; every 250th one decodes everything it gets.
        var members: [TestClient] = []
        for i in 1..<(total - 1) {
            members.append(try TestClient.login(port: ts.port, username: names[i], openUDP: false))
        }
        let reader = try MemberListReader(members, verifyEvery: 250)
        for m in members { m.send(.joinChannel(JoinChannel(name: "Big", requestID: 1))) }
        ts.waitFor("every join handled", timeoutMs: 120_000) { $0.controlFramesIn >= UInt64(2 * (total - 1)) }

        // The last member joins a full channel: the whole list, split over several messages.
        let last = try TestClient.login(port: ts.port, username: names[total - 1], openUDP: false)
        let r = try last.join("Big", timeoutMs: 30_000)
        XCTAssertTrue(r.moreMembers, "a 5,000-member list cannot fit one frame")
        XCTAssertEqual(r.members.count, total - 1)
        XCTAssertEqual(Set(r.members.map(\.username)), Set(names[0..<(total - 1)]))

        // The first member was told of all the others.
        var heard = Set<String>()
        while heard.count < total - 1 {
            switch try first.receive(timeoutMs: 30_000) {
            case .userJoined(let u): heard.insert(u.member.username)
            case .usersJoined(let u): for m in u.members { heard.insert(m.username) }
            default: break
            }
        }
        XCTAssertEqual(heard, Set(names[1..<total]))

        // Each sampled member knows every other member: from its list, its parts and the
        // joins that came after it.
        let known = reader.waitUntilEachKnows(total - 1, timeoutMs: 60_000)
        XCTAssertFalse(known.isEmpty)
        for (name, count) in known { XCTAssertEqual(count, total - 1, "\(name) knows \(count) of \(total - 1) other members") }
        reader.stop()

        let c = ts.counters
        XCTAssertEqual(c.sessionsActive, UInt64(total))
        XCTAssertEqual(c.controlOversize, 0)
        XCTAssertEqual(c.controlProtocolErrors, 0)
        XCTAssertGreaterThan(c.listPartsSent, 0)
        for m in members { m.close() }
        first.close()
        last.close()
    }
}

/// Drains many control connections on one thread. Most are read and discarded; the
/// sampled ones are opened and decoded, and the members they learn of are counted.
final class MemberListReader {
    private let clients: [TestClient]
    private let verify: [Bool]
    private let poll: EventPoll
    private let lock = Condition()
    private var known: [Set<UInt32>]
    private var stopping = false
    private var thread: SystemThread?

    init(_ clients: [TestClient], verifyEvery: Int) throws {
        self.clients = clients
        verify = clients.indices.map { $0 % verifyEvery == 0 }
        known = Array(repeating: [], count: clients.count)
        poll = try EventPoll(capacity: 256)
        for (i, c) in clients.enumerated() { try poll.add(c.tcp.fd, .readable, data: UInt64(i)) }
        thread = SystemThread(name: "list-reader") { [self] in run() }
    }

    private func run() {
        let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)
        defer { buf.deallocate() }
        while !lock.withLock({ stopping }) {
            let n = (try? poll.wait(timeoutMs: 50)) ?? 0
            for e in 0..<n {
                let i = Int(poll.event(e).data)
                let c = clients[i]
                while let got = try? c.tcp.read(into: buf), got > 0 {
                    guard verify[i] else { continue }
                    c.opener.append(UnsafeRawBufferPointer(rebasing: buf[0..<got]))
                    while let p = try? c.opener.next(), let m = try? ControlMessage.decode(p) {
                        var ids: [UInt32] = []
                        switch m {
                        case .joinChannelResult(let r): ids = r.members.map(\.userID)
                        case .memberList(let l): ids = l.members.map(\.userID)
                        case .userJoined(let u): ids = [u.member.userID]
                        case .usersJoined(let u): ids = u.members.map(\.userID)
                        default: break
                        }
                        if !ids.isEmpty { lock.withLock { known[i].formUnion(ids); lock.broadcast() } }
                    }
                }
            }
        }
    }

    /// Waits until every sampled client knows `count` members (or the time is up); returns
    /// (username, members known) for each sampled client.
    func waitUntilEachKnows(_ count: Int, timeoutMs: UInt64) -> [(String, Int)] {
        let deadline = MonotonicClock.milliseconds() + timeoutMs
        return lock.withLock {
            while clients.indices.contains(where: { verify[$0] && known[$0].count < count }) {
                if !lock.wait(untilMs: deadline) && MonotonicClock.milliseconds() >= deadline { break }
            }
            return clients.indices.filter { verify[$0] }.map { (clients[$0].hello.userID.description, known[$0].count) }
        }
    }

    func stop() {
        lock.withLock { stopping = true }
        thread?.join()
        thread = nil
    }
}
