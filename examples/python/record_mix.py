#!/usr/bin/env python3
"""Joins a channel and records the final stereo mix to a WAV file.

    record_mix.py HOST PORT USERNAME CHANNEL OUT.wav SECONDS

Uses the installed package (pip install ./python); `voicecat record` does the same.
"""
import sys
import time
import wave
from typing import List

import voicecat


def main() -> None:
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    host, port, user, channel, path, seconds = (sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4],
                                                 sys.argv[5], float(sys.argv[6]))
    chunks: List[bytes] = []

    def on_mix(pcm: bytes, frames: int) -> None:  # an audio thread of the library, every 20 ms
        chunks.append(pcm)

    with voicecat.Client("record_mix.py", external_playback=True) as client:
        client.connect(host, port, user)
        client.join(channel)
        client.set_sink(on_mix)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            event = client.poll_event(timeout=min(left, 0.1))
            if event is not None:
                print(f"record_mix.py: {event}")
        client.set_sink(None)
        for s in client.remote_streams():
            print(f"record_mix.py: ssrc {s.ssrc} ({s.username}): {client.stream_stats(s.ssrc)}")
        client.disconnect()
    with wave.open(path, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(voicecat.SAMPLE_RATE)
        w.writeframes(b"".join(chunks))
    print(f"record_mix.py: wrote {sum(len(x) for x in chunks) / 4 / voicecat.SAMPLE_RATE:.2f} s to {path}")


if __name__ == "__main__":
    main()
