import XCTest
@testable import VoiceCatClient

/// The ssrc → slot table the receive path looks up per datagram (SSRCIndex): checked
/// against a Dictionary through random inserts and removes, including ssrcs chosen to
/// share a home entry (long runs, removals from their middle, wrap-around).
final class SSRCIndexTests: XCTestCase {
    /// Every ssrc in `probe` maps in `table` as in `model`, and the table holds no more.
    private func assertSame(_ table: SSRCIndex, _ model: [UInt32: Int], probe: [UInt32], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(table.count, model.count, file: file, line: line)
        for s in probe { XCTAssertEqual(table[s], model[s], "ssrc \(s)", file: file, line: line) }
        var seen: [UInt32: Int] = [:]
        table.forEach { s, i in XCTAssertNil(seen.updateValue(i, forKey: s), "ssrc \(s) twice", file: file, line: line) }
        XCTAssertEqual(seen, model, file: file, line: line)
        XCTAssertEqual(Set(table.ssrcs), Set(model.keys), file: file, line: line)
    }

    /// SplitMix64: a seeded generator, so a failure repeats.
    struct Seeded: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    func testAgreesWithADictionaryThroughRandomChanges() {
        var rng = Seeded(state: 20261201)
        for slots in [1, 2, 5, 32, 64] {
            let table = SSRCIndex(slots: slots)
            XCTAssertGreaterThanOrEqual(table.capacity, 2 * slots)
            var model: [UInt32: Int] = [:]
            // A small key space, so inserts hit present keys and removes hit absent ones.
            let space = (0..<(3 * slots + 3)).map { _ in UInt32.random(in: 0...UInt32.max, using: &rng) } + [0, UInt32.max]
            for _ in 0..<4000 {
                let s = space.randomElement(using: &rng)!
                if Bool.random(using: &rng), model.count < slots || model[s] != nil {
                    let slot = Int.random(in: 0..<slots, using: &rng)
                    XCTAssertTrue(table.insert(s, slot: slot))
                    model[s] = slot
                } else {
                    XCTAssertEqual(table.remove(s), model.removeValue(forKey: s))
                }
            }
            assertSame(table, model, probe: space)
        }
    }

    func testRunsOfOneHomeEntrySurviveRemovalsFromTheirMiddle() {
        let table = SSRCIndex(slots: 8)
        // Find 8 ssrcs whose home is the last entry, so their run wraps to the start.
        var colliding: [UInt32] = []
        var s: UInt32 = 1
        let last = UInt32(table.capacity - 1)
        while colliding.count < 8 {
            if (s &* 0x9E37_79B1) >> UInt32(32 - table.capacity.trailingZeroBitCount) == last { colliding.append(s) }
            s &+= 1
        }
        var model: [UInt32: Int] = [:]
        for (i, c) in colliding.enumerated() {
            XCTAssertTrue(table.insert(c, slot: i))
            model[c] = i
        }
        // Full for its slot count: a ninth ssrc is refused, a present one is remapped.
        XCTAssertFalse(table.insert(999_999_937, slot: 0))
        XCTAssertTrue(table.insert(colliding[3], slot: 7))
        model[colliding[3]] = 7
        for victim in [colliding[2], colliding[0], colliding[6]] {
            XCTAssertEqual(table.remove(victim), model.removeValue(forKey: victim))
            assertSame(table, model, probe: colliding + [999_999_937])
        }
        XCTAssertNil(table.remove(colliding[0]))
        XCTAssertNil(table[999_999_937])
    }
}
