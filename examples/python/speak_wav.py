#!/usr/bin/env python3
"""Joins a channel and speaks a 48 kHz 16-bit WAV file as a MIC stream in real time.

    speak_wav.py HOST PORT USERNAME CHANNEL FILE.wav
"""
import os
import sys
import time
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import voicecat  # noqa: E402


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    host, port, user, channel, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    with wave.open(path, "rb") as w:
        if w.getframerate() != 48000 or w.getsampwidth() != 2 or w.getnchannels() not in (1, 2):
            sys.exit(f"{path}: need 48 kHz 16-bit mono or stereo")
        channels = w.getnchannels()
        pcm = w.readframes(w.getnframes())
    with voicecat.Client("speak_wav.py", external_playback=True) as c:
        c.connect(host, port, user)
        print(f"speak_wav.py: connected, server fingerprint {c.fingerprint}")
        c.join(channel)
        sid = c.start_stream(voicecat.STREAM_MIC, channels)
        block = 960 * 2 * channels
        start = time.monotonic()
        for k, i in enumerate(range(0, len(pcm), block)):
            c.feed(sid, pcm[i:i + block], channels)
            delay = start + (k + 1) * 0.02 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        time.sleep(0.5)  # let listeners play out what is buffered before the stream goes
        c.stop_stream(sid)
        s = c.connection_stats()
        print(f"speak_wav.py: sent {s['packets_out']} packets, media rtt {s['media_rtt_ms']} ms")
        c.disconnect()


if __name__ == "__main__":
    main()
