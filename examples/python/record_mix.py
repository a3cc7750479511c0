#!/usr/bin/env python3
"""Joins a channel and records the final stereo mix to a WAV file.

    record_mix.py HOST PORT USERNAME CHANNEL OUT.wav SECONDS
"""
import os
import sys
import threading
import time
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import voicecat  # noqa: E402


def main():
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    host, port, user, channel, path, seconds = (sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4],
                                                 sys.argv[5], float(sys.argv[6]))
    chunks, lock = [], threading.Lock()

    def on_mix(pcm, frames):
        with lock:
            chunks.append(pcm)

    with voicecat.Client("record_mix.py", external_playback=True) as c:
        c.connect(host, port, user)
        c.join(channel)
        c.set_sink(on_mix)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            e = c.poll_event(100)
            if e:
                print(f"record_mix.py: {e}")
        c.set_sink(None)
        for s in c.remote_streams():
            print(f"record_mix.py: ssrc {s['ssrc']} ({s['username']}): {c.stream_stats(s['ssrc'])}")
        c.disconnect()
    with wave.open(path, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(48000)
        w.writeframes(b"".join(chunks))
    print(f"record_mix.py: wrote {sum(len(x) for x in chunks) / 4 / 48000:.2f} s to {path}")


if __name__ == "__main__":
    main()
