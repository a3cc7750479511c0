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
import subprocess
import sys
import tempfile
import threading
import time
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


def tone(freq: float, seconds: float, amp: float = 0.3, channels: int = 1) -> "array.array[int]":
    """A sine as interleaved int16."""
    n = int(seconds * 48000)
    out = array.array("h", bytes(2 * n * channels))
    for i in range(n):
        v = int(amp * 32767 * math.sin(2 * math.pi * freq * i / 48000))
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
