"""Fixtures for the Python package's tests: live voicecat-servers on loopback, signals
and measurements.

`make py-test` (scripts/py-test.sh) runs these twice, each time in a fresh virtual
environment: VOICECAT_TEST_INSTALL=source (pip install ./python, numpy present, the
library found through pkg-config) and VOICECAT_TEST_INSTALL=wheel (the wheel from
`make wheel`, no numpy, nothing but the bundled library). VOICECAT_SERVER names the
server binary."""
import array
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import wave
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Sequence

import pytest

# Trust on first use records every server a test connects to (fresh identities on
# random ports) in the known-servers file: one file per test run, not the user's.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="vc-py-config-")

import voicecat  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INSTALL = os.environ.get("VOICECAT_TEST_INSTALL", "")

try:
    import numpy
except ImportError:
    numpy = None

needs_numpy = pytest.mark.skipif(numpy is None, reason="numpy is not installed in this environment")
without_numpy = pytest.mark.skipif(numpy is not None, reason="numpy is installed in this environment")


class Server(NamedTuple):
    port: int
    fingerprint: str
    password: Optional[str]


def _start_server(extra: Sequence[str]) -> "tuple[subprocess.Popen[str], Server]":
    binary = os.environ.get("VOICECAT_SERVER", os.path.join(ROOT, ".build/debug/voicecat-server"))
    d = tempfile.mkdtemp(prefix="vc-py-")
    port_file = os.path.join(d, "port")
    proc = subprocess.Popen([binary, "--port", "any", "--port-file", port_file, "--identity", os.path.join(d, "id.key"),
                             *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    fingerprint = ""
    assert proc.stderr is not None
    for line in proc.stderr:  # "voicecat-server listening on ADDRESS (TCP+UDP), fingerprint HEX"
        m = re.search(r"listening on .*fingerprint ([0-9a-f]{64})", line)
        if m:
            fingerprint = m.group(1)
            break
    assert fingerprint, f"{binary} did not start"
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep its pipe drained
    port = int(open(port_file).read())
    password = extra[extra.index("--password") + 1] if "--password" in extra else None
    return proc, Server(port, fingerprint, password)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """A voicecat-server with the default channels (Lobby: mono speech, Music: stereo)."""
    proc, info = _start_server([])
    yield info
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def password_server() -> Iterator[Server]:
    """A voicecat-server that wants a password."""
    proc, info = _start_server(["--password", "opensesame"])
    yield info
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def admin_server() -> Iterator[Server]:
    """A voicecat-server with an admin password ("s3cret"), fresh for each module (admin
    tests kick and mute its users)."""
    proc, info = _start_server(["--admin-password", "s3cret"])
    yield info
    proc.terminate()
    proc.wait(timeout=10)


_names = iter(range(1, 1 << 30))


def unique(prefix: str) -> str:
    """A username no other test uses (the server wants them unique)."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


def joined(server: Server, prefix: str, channel: str = "Lobby", **kwargs: Any) -> voicecat.Client:
    """A client connected to `server` and in `channel` (external playback unless asked)."""
    kwargs.setdefault("external_playback", True)
    client = voicecat.Client(**kwargs)
    client.connect("127.0.0.1", server.port, unique(prefix), password=server.password)
    client.join(channel)
    return client


def tone(freq: float, seconds: float, amp: float = 0.3, channels: int = 1, rate: int = 48000) -> "array.array[int]":
    """A sine as interleaved int16."""
    n = int(seconds * rate)
    out = array.array("h", bytes(2 * n * channels))
    for i in range(n):
        v = int(amp * 32767 * math.sin(2 * math.pi * freq * i / rate))
        for ch in range(channels):
            out[i * channels + ch] = v
    return out


def goertzel(samples: Sequence[int], freq: float) -> float:
    """Power of `freq` in `samples`, normalized by length."""
    w = 2 * math.pi * freq / 48000
    c = 2 * math.cos(w)
    s1 = s2 = 0.0
    for x in samples:
        s1, s2 = x + c * s1 - s2, s1
    return (s1 * s1 + s2 * s2 - c * s1 * s2) / (len(samples) ** 2)


def rms(samples: Sequence[int]) -> float:
    return math.sqrt(sum(x * x for x in samples) / len(samples)) if len(samples) else 0.0


def left(pcm: bytes) -> "array.array[int]":
    """The left channel of interleaved stereo int16 bytes."""
    a = array.array("h")
    a.frombytes(pcm)
    return a[0::2]


def pace(blocks: Sequence[Any], feed: Callable[[Any], Any]) -> None:
    """Calls feed(block) for 20 ms blocks in real time."""
    start = time.monotonic()
    for k, block in enumerate(blocks):
        feed(block)
        delay = start + (k + 1) * 0.02 - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def wait_until(predicate: Callable[[], object], seconds: float = 10.0) -> bool:
    """Polls predicate() until true or `seconds` pass (a bound, not a timed assertion)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


class Recorder:
    """A sink that keeps the mix."""

    def __init__(self) -> None:
        self.chunks: List[bytes] = []

    def __call__(self, pcm: bytes, frames: int) -> None:
        self.chunks.append(pcm)

    @property
    def pcm(self) -> bytes:
        return b"".join(self.chunks)


def run_python(code: str, env: "Optional[dict[str, str]]" = None, check: bool = True) -> subprocess.CompletedProcess:
    """Runs `python -c code` in this environment (a fresh interpreter)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=check,
                          timeout=60)


# ---- Speech: making it, reading it, comparing it ---------------------------------------


def speak_to_wav(text, path, tmp_path, rate=48000):
    """espeak-ng speech, converted by sox to `rate` (48 kHz) 16-bit mono."""
    for tool in ("espeak-ng", "sox"):
        assert shutil.which(tool), f"{tool} is needed (scripts/deps.sh installs it)"
    raw = tmp_path / (path.name + ".22k.wav")
    subprocess.run(["espeak-ng", "-w", str(raw), text], check=True)
    subprocess.run(["sox", str(raw), "-r", str(rate), "-b", "16", str(path)], check=True)
    return path


def read_wav(path):
    """(channels, rate, interleaved int16 array('h')) of a 16-bit WAV file."""
    with wave.open(str(path), "rb") as w:
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


def start_recorder(server: Server, *args: str) -> "tuple[subprocess.Popen[str], List[str], threading.Thread]":
    """Starts `python -m voicecat record ARGS --port PORT` and returns, once it says it is
    recording: the process, the list its stderr lines go to, and the thread reading them
    (join it after the process ended)."""
    recorder = subprocess.Popen([sys.executable, "-m", "voicecat", "record", *args, "--port", str(server.port)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: List[str] = []
    ready = threading.Event()

    def read_stderr() -> None:
        assert recorder.stderr is not None
        for line in recorder.stderr:
            lines.append(line)
            if "recording" in line:
                ready.set()

    reader = threading.Thread(target=read_stderr)
    reader.start()
    assert ready.wait(20), "".join(lines)
    return recorder, lines, reader
