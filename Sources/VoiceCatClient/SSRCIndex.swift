// ssrc → receive slot, looked up for every datagram that arrives.
//
// A Dictionary hashes each key with SipHash (a seeded hash that guards a table
// whose keys an attacker chooses) and is a stored `var` whose every access is
// checked for exclusivity at run time. Here the keys are the ssrcs the server
// assigned to the streams this client receives (at most one per slot), and the
// network only looks them up; so a table of fixed size made at start, with open
// addressing, linear probing and a multiplicative hash, does the same with no
// allocation and no check: at most half full, a lookup reads one or two entries.
// A missing or hostile ssrc probes at most until the next empty entry.
//
// Changed by the network thread holding the media input's token (ReceiveSet.add /
// remove); read by it or by the token's holder. Not thread-safe on its own.

final class SSRCIndex {
    /// Entries: a power of two, at least twice the slot count.
    let capacity: Int
    private let mask: Int
    private let shift: UInt32
    private let keys: UnsafeMutablePointer<UInt32>
    /// The slot index of each entry, or -1 (empty).
    private let values: UnsafeMutablePointer<Int32>
    private(set) var count = 0

    init(slots: Int) {
        var bits: UInt32 = 1
        while (1 << bits) < 2 * max(1, slots) { bits += 1 }
        capacity = 1 << Int(bits)
        mask = capacity - 1
        shift = 32 - bits
        keys = .allocate(capacity: capacity)
        keys.initialize(repeating: 0, count: capacity)
        values = .allocate(capacity: capacity)
        values.initialize(repeating: -1, count: capacity)
    }

    deinit {
        keys.deallocate()
        values.deallocate()
    }

    /// The home entry of `ssrc` (Fibonacci hashing: the top bits of ssrc × 2^32/φ).
    @inline(__always)
    private func home(_ ssrc: UInt32) -> Int { Int((ssrc &* 0x9E37_79B1) >> shift) }

    /// The slot of `ssrc`, or nil.
    @inline(__always)
    subscript(ssrc: UInt32) -> Int? {
        var i = home(ssrc)
        while true {
            let v = values[i]
            if v < 0 { return nil }
            if keys[i] == ssrc { return Int(v) }
            i = (i + 1) & mask
        }
    }

    /// Maps `ssrc` to `slot` (replacing what it mapped to). False when the table holds
    /// as many entries as it has slots for (half its capacity): the caller has no free slot.
    @discardableResult
    func insert(_ ssrc: UInt32, slot: Int) -> Bool {
        var i = home(ssrc)
        while values[i] >= 0 {
            if keys[i] == ssrc { values[i] = Int32(slot); return true }
            i = (i + 1) & mask
        }
        guard count < capacity / 2 else { return false }
        keys[i] = ssrc
        values[i] = Int32(slot)
        count += 1
        return true
    }

    /// Removes `ssrc`; returns its slot. Later entries of the same run move back into
    /// the gap (no tombstones), so lookups stay as short as after inserts alone.
    @discardableResult
    func remove(_ ssrc: UInt32) -> Int? {
        var i = home(ssrc)
        while true {
            if values[i] < 0 { return nil }
            if keys[i] == ssrc { break }
            i = (i + 1) & mask
        }
        let slot = Int(values[i])
        var gap = i
        var j = i
        while true {
            j = (j + 1) & mask
            if values[j] < 0 { break }
            // An entry may fill the gap if its home is not in (gap, j], cyclically.
            let h = home(keys[j])
            let homeBetween = gap <= j ? (h > gap && h <= j) : (h > gap || h <= j)
            if !homeBetween {
                keys[gap] = keys[j]
                values[gap] = values[j]
                gap = j
            }
        }
        values[gap] = -1
        count -= 1
        return slot
    }

    /// Calls `body` with each ssrc and its slot (no allocation).
    func forEach(_ body: (UInt32, Int) -> Void) {
        for i in 0..<capacity where values[i] >= 0 { body(keys[i], Int(values[i])) }
    }

    /// The ssrcs, as an array (control paths).
    var ssrcs: [UInt32] {
        var out: [UInt32] = []
        out.reserveCapacity(count)
        forEach { s, _ in out.append(s) }
        return out
    }
}
