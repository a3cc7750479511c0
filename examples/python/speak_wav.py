#!/usr/bin/env python3
"""Joins a channel and speaks a 16-bit WAV file (any rate from 8 to 192 kHz, such as
espeak-ng's 22050 Hz) as a MIC stream in real time.

    speak_wav.py HOST PORT USERNAME CHANNEL FILE.wav

Uses the installed package (pip install ./python); `voicecat speak` does the same with
more options.
"""
import sys
import time
import wave

import voicecat


def main() -> None:
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    host, port, user, channel, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    with wave.open(path, "rb") as w:
        if not 8000 <= w.getframerate() <= 192000 or w.getsampwidth() != 2 or w.getnchannels() not in (1, 2):
            sys.exit(f"{path}: need 16-bit mono or stereo at 8000..192000 Hz")
        channels, rate = w.getnchannels(), w.getframerate()
        pcm = w.readframes(w.getnframes())
    with voicecat.Client("speak_wav.py", external_playback=True) as client:
        # Send all of it: the default voice-activity gate would drop the quiet start
        # of words (synthesized speech, a file).
        client.set_input_mode(voicecat.InputMode.CONTINUOUS)
        client.connect(host, port, user)
        print(f"speak_wav.py: connected, server fingerprint {client.fingerprint}")
        client.join(channel)
        seconds = len(pcm) / (2 * channels * rate)
        # The whole file at once, at its own rate (the library resamples to 48 kHz): the
        # library sends it at real time from its queue.
        with client.start_stream(voicecat.StreamKind.MIC, channels, max_queue_ms=int(seconds * 1000) + 1000,
                                 sample_rate=rate) as mic:
            mic.feed(pcm)
            mic.drain()
            time.sleep(0.5)  # let listeners play out what is buffered before the stream goes
        stats = client.connection_stats()
        print(f"speak_wav.py: sent {stats.packets_out} packets, media rtt {stats.media_rtt_ms} ms")
        client.disconnect()


if __name__ == "__main__":
    main()
