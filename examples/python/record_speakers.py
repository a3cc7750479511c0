#!/usr/bin/env python3
"""Joins a channel and records each talker to a file of its own, at 16 kHz mono (what a
speech recognizer takes), with the library's recordings.

    record_speakers.py HOST PORT USERNAME CHANNEL OUTDIR SECONDS

Writes OUTDIR/<user>-<ssrc>.wav for every remote stream, from when it appears (or from
the start) until it goes (or the end). Uses the installed package (pip install ./python);
`voicecat record OUT.wav --per-speaker --rate 16000 --channels 1` does the same with a
per-speaker sink, plus the mix.
"""
import os
import re
import sys
import time
from typing import Dict

import voicecat
from voicecat import EventType


def main() -> None:
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    host, port, user, channel, outdir, seconds = (sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4],
                                                   sys.argv[5], float(sys.argv[6]))
    recording: Dict[int, str] = {}  # ssrc -> file

    with voicecat.Client("record_speakers.py", external_playback=True) as client:
        client.set_output_format(16000, 1)  # recordings take the format of their start
        client.connect(host, port, user)
        client.join(channel)

        def start(ssrc: int) -> None:
            names = {s.ssrc: s.username for s in client.remote_streams()}
            if ssrc in recording or ssrc not in names:
                return
            path = os.path.join(outdir, f"{re.sub(r'[^A-Za-z0-9._-]', '_', names[ssrc])}-{ssrc}.wav")
            client.start_recording(path, ssrc)  # a writer thread of the library writes it
            recording[ssrc] = path
            print(f"record_speakers.py: recording ssrc {ssrc} to {path}", flush=True)

        def stop(ssrc: int) -> None:
            if ssrc in recording:
                client.stop_recording(ssrc)  # the file is complete when this returns
                print(f"record_speakers.py: wrote {recording.pop(ssrc)}", flush=True)

        for s in client.remote_streams():
            start(s.ssrc)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            event = client.poll_event(timeout=min(left, 0.1))
            if event is None:
                continue
            if event.type == EventType.REMOTE_STREAM_ADDED:
                start(event.ssrc)
            elif event.type == EventType.REMOTE_STREAM_REMOVED:
                stop(event.ssrc)
        for ssrc in list(recording):
            stop(ssrc)
        client.disconnect()


if __name__ == "__main__":
    main()
