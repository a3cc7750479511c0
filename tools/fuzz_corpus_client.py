#!/usr/bin/env python3
"""Writes the seed inputs of the voicecat-fuzz-client corpus that cover the roster and
admin messages (Tests/fuzz-corpus-client/presence-*): sequences of control plaintexts,
each `u16 length | u16 message type | protobuf body`, as a hostile or an honest server
could send them after login. The fuzzer mutates them from there.

    tools/fuzz_corpus_client.py [DIR]     (default Tests/fuzz-corpus-client)

Field numbers are docs/protocol.md's (and Sources/VoiceCatProtocol/Messages.swift's).
"""
import os
import struct
import sys


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def u(field, v):
    return varint(field << 3) + varint(v) if v else b""


def raw_u(field, v):
    """A varint field written even when zero (repeated elements)."""
    return varint(field << 3) + varint(v)


def ld(field, body):
    body = body.encode() if isinstance(body, str) else body
    return varint(field << 3 | 2) + varint(len(body)) + body


def audio(mode=0, bitrate=32000, frame_ms=20):
    return u(1, 0) + u(2, mode) + u(3, 48000) + u(4, bitrate) + u(5, frame_ms) + u(7, 1) + u(8, 10) + u(9, 1) + u(10, 10)


def stream(stream_id, ssrc, kind=0, muted=False, hold=False):
    return u(1, stream_id) + u(2, ssrc) + u(3, kind) + u(4, int(muted)) + u(5, int(hold))


def user(user_id, name="", channel=0, muted=False, deafened=False, streams=(), gone=False):
    return (u(1, user_id) + (ld(2, name) if name else b"") + u(3, channel) + u(4, int(muted)) + u(5, int(deafened))
            + b"".join(ld(6, s) for s in streams) + u(7, int(gone)))


def msg(mtype, body):
    plain = struct.pack(">H", mtype) + body
    return struct.pack(">H", len(plain)) + plain


ERROR, JOIN_RESULT, REMOTE_ADDED, STATE, USER_LIST, PRESENCE, KICK, ADMIN_RESULT = 3, 7, 12, 15, 30, 31, 32, 33

INPUTS = {
    # An honest sequence: users arrive, move, publish, change state, go; a reload's channels; admin results.
    "presence-valid": [
        msg(PRESENCE, ld(1, user(2, "ann", 1)) + ld(1, user(3, "bo", 2, streams=[stream(1, 1001, 1)]))),
        msg(PRESENCE, ld(1, user(2, "ann", 2, muted=True)) + ld(1, user(3, "bo", 2, streams=[stream(1, 1001, 1, True, True)]))),
        msg(JOIN_RESULT, u(1, 2) + ld(2, audio(1, 128000)) + ld(3, u(1, 3) + ld(2, "bo")) + u(4, 5)),
        msg(REMOTE_ADDED, u(1, 3) + u(2, 1) + u(3, 1001) + u(4, 1) + ld(5, audio(1, 128000))),
        msg(STATE, u(1, 1001) + u(2, 1) + u(3, 1)),
        msg(PRESENCE, ld(5, u(1, 9) + ld(2, "Quiet") + ld(3, audio())) + raw_u(6, 2) + ld(1, user(3, gone=True))),
        msg(ADMIN_RESULT, u(1, 7) + u(2, 2)),
        msg(PRESENCE, ld(1, user(2, gone=True))),
    ],
    # What the client must refuse without acting on it: user 0, a name with a control
    # character, an unknown departure, ssrc 0, a bad channel, a second UserList, a
    # client-only message, and a kick (the session ends for good).
    "presence-hostile": [
        msg(PRESENCE, ld(1, user(0, "zero"))),
        msg(PRESENCE, ld(1, user(4, "bad\x1bname"))),
        msg(PRESENCE, ld(1, user(5, "x")) + ld(1, user(77, gone=True))),
        msg(PRESENCE, ld(1, user(6, "y", streams=[stream(1, 0)]))),
        msg(PRESENCE, ld(5, u(1, 9) + ld(2, "") + ld(3, audio()))),
        msg(PRESENCE, ld(1, user(7, "z", streams=[stream(1, 5000, kind=9)]))),
        msg(USER_LIST, ld(1, user(8, "late")) + u(2, 1)),
        msg(KICK, u(1, 1) + ld(2, "pw") + u(4, 3)),
        msg(ADMIN_RESULT, u(1, 99)),
        msg(PRESENCE, ld(1, user(10, "many", streams=[stream(i, 2000 + i) for i in range(1, 80)]))),
        msg(ERROR, u(1, 11) + ld(2, "kicked by someone: \x07bye")),
        msg(PRESENCE, ld(1, user(11, "after the kick"))),
    ],
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "Tests", "fuzz-corpus-client")
    for name, parts in INPUTS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b"".join(parts))
        print(f"wrote {name}: {len(parts)} messages")


if __name__ == "__main__":
    main()
