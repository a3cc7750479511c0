"""The voicecat command end to end: speak a spoken sentence, record it at the other end
and correlate; and each failure with its exit status."""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import wave


import voicecat

from conftest import joined, numpy, pace, tone, unique

SPEECH = "The quick brown fox jumps over the lazy dog, twice."
OTHER = "Seven silver swans swam silently southward at sunset."


def voicecat_cmd(*args, server=None, env=None, timeout=60, check=None):
    """Runs `python -m voicecat ARGS` (with --port of `server` for server commands)."""
    argv = [sys.executable, "-m", "voicecat", *args]
    if server is not None:
        argv += ["--port", str(server.port)]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if check is not None:
        assert run.returncode == check, f"exit {run.returncode}, expected {check}\n{run.stdout}\n{run.stderr}"
    return run


def speak_to_wav(text, path, tmp_path):
    """espeak-ng speech, converted by sox to 48 kHz 16-bit mono."""
    for tool in ("espeak-ng", "sox"):
        assert shutil.which(tool), f"{tool} is needed (scripts/deps.sh installs it)"
    raw = tmp_path / (path.name + ".22k.wav")
    subprocess.run(["espeak-ng", "-w", str(raw), text], check=True)
    subprocess.run(["sox", str(raw), "-r", "48000", "-b", "16", str(path)], check=True)
    return path


def read_wav(path):
    with wave.open(str(path), "rb") as w:
        import array
        a = array.array("h")
        a.frombytes(w.readframes(w.getnframes()))
        return w.getnchannels(), w.getframerate(), a


def envelope(samples, step=480):
    """Mean absolute value per 10 ms."""
    return [sum(abs(x) for x in samples[i:i + step]) / step for i in range(0, len(samples) - step + 1, step)]


def best_correlation(recorded, reference):
    """Pearson correlation of `reference` with the best-aligned stretch of `recorded`, and the lag."""
    n = len(reference)
    mr = sum(reference) / n
    ref = [x - mr for x in reference]
    sr = math.sqrt(sum(x * x for x in ref))
    best = (-1.0, 0)
    for lag in range(0, len(recorded) - n + 1):
        seg = recorded[lag:lag + n]
        ms = sum(seg) / n
        num = sum((a - ms) * b for a, b in zip(seg, ref))
        ss = math.sqrt(sum((a - ms) ** 2 for a in seg))
        if ss > 0:
            best = max(best, (num / (ss * sr), lag))
    return best


def _xcorr(a, b):
    """Cross-correlation of a with b at lags 0..len(a)-len(b) (numpy, by FFT)."""
    size = 1 << (len(a) + len(b)).bit_length()
    xc = numpy.fft.irfft(numpy.fft.rfft(a, size) * numpy.conj(numpy.fft.rfft(b, size)), size)
    return xc[:len(a) - len(b) + 1]


def waveform_correlations(recorded, reference, window=24000, search=2400):
    """Pearson correlation of each speech window of `reference` with `recorded`, each
    aligned within `search` samples of the best whole-sentence alignment."""
    at = int(numpy.argmax(_xcorr(recorded, reference)))
    scores = []
    for k in range(0, len(reference) - window + 1, window):
        piece = reference[k:k + window]
        if numpy.sqrt(numpy.mean(piece ** 2)) < 300:  # a pause between words
            continue
        lo = max(0, at + k - search)
        region = recorded[lo:min(len(recorded), at + k + window + search)]
        j = int(numpy.argmax(_xcorr(region, piece)))
        seg = region[j:j + window]
        scores.append(float(numpy.dot(seg, piece) / math.sqrt(numpy.dot(seg, seg) * numpy.dot(piece, piece))))
    return scores


def test_speak_and_record_carry_speech_end_to_end(server, tmp_path):
    speech = speak_to_wav(SPEECH, tmp_path / "speech.wav", tmp_path)
    other = speak_to_wav(OTHER, tmp_path / "other.wav", tmp_path)
    out = tmp_path / "mix.wav"
    recorder = subprocess.Popen([sys.executable, "-m", "voicecat", "record", str(out), "--seconds", "7",
                                 "--port", str(server.port), "--user", unique("cli-rec"), "--progress", "always"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr_lines = []
    ready = threading.Event()

    def read_stderr():
        for line in recorder.stderr:
            stderr_lines.append(line)
            if "recording" in line:
                ready.set()

    reader = threading.Thread(target=read_stderr)
    reader.start()
    assert ready.wait(20), "".join(stderr_lines)
    spoke = voicecat_cmd("speak", str(speech), "--user", unique("cli-speak"), server=server, check=0)
    assert "packets to Lobby" in spoke.stdout
    stdout, _ = recorder.communicate(timeout=30)
    reader.join()
    assert recorder.returncode == 0, "".join(stderr_lines)
    assert "recorded 7.00 s" in stdout and "1 talker(s) heard" in stdout
    assert any(re.match(r"record: 3\.\d/7\.0 s", line) for line in stderr_lines), "progress shown"

    channels, rate, mix = read_wav(out)
    assert (channels, rate, len(mix)) == (2, 48000, 7 * 48000 * 2)
    _, _, reference = read_wav(speech)
    _, _, unrelated = read_wav(other)
    left = mix[0::2]
    # The loudness contour of the sentence is in the recording; another sentence's is not.
    env_mix = envelope(left)
    r_same, lag = best_correlation(env_mix, envelope(reference))
    r_other, _ = best_correlation(env_mix, envelope(unrelated)[:len(envelope(reference))])
    print(f"speech envelope correlation {r_same:.3f}, another sentence {r_other:.3f}")
    assert r_same > 0.9, r_same
    assert r_other < 0.6, r_other
    if numpy is not None:  # and the waveform itself, sample-aligned window by window
        scores = waveform_correlations(numpy.asarray(left, dtype=float), numpy.asarray(reference, dtype=float))
        print("waveform correlation per 0.5 s:", " ".join(f"{r:.2f}" for r in scores))
        # A jitter buffer may shift playout by a frame mid-sentence: each window finds its
        # own alignment near the sentence's.
        assert sorted(scores)[len(scores) // 2] > 0.8, scores
