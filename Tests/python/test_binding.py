"""pytest over the Python binding, against the installed libvoicecat and a live
voicecat-server on loopback. `make test` sets VOICECAT_LIBRARY and VOICECAT_SERVER."""
import array
import ctypes
import math
import os
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))
import voicecat  # noqa: E402
from voicecat import _lib  # noqa: E402


@pytest.fixture(scope="module")
def server():
    binary = os.environ.get("VOICECAT_SERVER", ".build/debug/voicecat-server")
    d = tempfile.mkdtemp()
    port_file = os.path.join(d, "port")
    proc = subprocess.Popen([binary, "--port", "0", "--port-file", port_file, "--identity", os.path.join(d, "id.key")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for _ in range(200):
        if os.path.exists(port_file) and open(port_file).read().strip():
            break
        time.sleep(0.02)
    port = int(open(port_file).read())
    yield port
    proc.terminate()
    proc.wait(timeout=10)


def tone(freq, seconds, amp=0.25, channels=1):
    n = int(seconds * 48000)
    a = array.array("h", [0] * (n * channels))
    for i in range(n):
        v = int(amp * 32767 * math.sin(2 * math.pi * freq * i / 48000))
        for ch in range(channels):
            a[i * channels + ch] = v
    return a


def power_at(samples, freq):
    """Goertzel power of `freq` in a list of samples, normalized."""
    w = 2 * math.pi * freq / 48000
    c = 2 * math.cos(w)
    s1 = s2 = 0.0
    for x in samples:
        s1, s2 = x + c * s1 - s2, s1
    return (s1 * s1 + s2 * s2 - c * s1 * s2) / (len(samples) ** 2)


def test_version_and_struct_layouts_match():
    assert voicecat.VERSION == "0.2.0"
    for name, cls in _lib._STRUCTS.items():
        assert _lib.lib.vc_struct_size(name.encode()) == ctypes.sizeof(cls)


def test_every_entry_point_refuses_null_and_unknown_ids(server):
    lib = _lib.lib
    bad = ctypes.c_void_p(0xdead0)
    for h in (None, bad):
        assert lib.vc_disconnect(h) == -1
        assert lib.vc_join_channel(h, b"Lobby") == -1
        assert lib.vc_stream_stop(h, 1) == -1
        assert lib.vc_read_mixed_pcm(h, None, 10) == -1
        assert lib.vc_poll_event(h, None, 0) == -1
        lib.vc_client_destroy(h)
    with voicecat.Client() as c:
        with pytest.raises(voicecat.StateError):
            c.join("Lobby")
        c.connect("127.0.0.1", server, "py-null")
        with pytest.raises(voicecat.NotFound):
            c.join("Nowhere")
        c.join("Lobby")
        with pytest.raises(voicecat.NotFound):
            c.stream_stats(424242)
        with pytest.raises(voicecat.NotFound):
            c.set_remote(424242, gain=0.5)
        with pytest.raises(voicecat.NotFound):
            c.feed(99, b"\0\0" * 960)
        with pytest.raises(voicecat.InvalidArgument):
            c.start_stream(channels=3)
        assert lib.vc_get_stream_stats(c._h, 1, None) == -1
        assert lib.vc_stream_feed_pcm(c._h, 1, None, 960, 1) == -1
        with pytest.raises(voicecat.DeviceError):
            c.start_stream(device="vc_py_no_such_device")
        sid = c.start_stream()
        c.set_send_processing(sid, noise_suppression=True, agc=True)
        assert c.get_send_processing(sid)["noise_suppression"] is True
        with pytest.raises(voicecat.InvalidArgument):
            c.set_send_processing(sid, agc=True, agc_level=5.0)
        screen = c.start_stream(voicecat.STREAM_SCREEN_AUDIO)
        with pytest.raises(voicecat.InvalidArgument):
            c.set_send_processing(screen, noise_suppression=True)


def test_wrong_fingerprint_is_an_auth_error_and_reports_the_real_one(server):
    with voicecat.Client() as c:
        with pytest.raises(voicecat.AuthError) as e:
            c.connect("127.0.0.1", server, "py-pin", fingerprint="ab" * 32)
        assert "does not match" in str(e.value)
        real = c.fingerprint
        assert len(real) == 64
        c.connect("127.0.0.1", server, "py-pin", fingerprint=real)


def test_feed_in_one_client_comes_out_of_the_others_sink(server):
    got, events, pushed = [], [], []
    with voicecat.Client(external_playback=True) as talker, voicecat.Client(external_playback=True) as listener:
        talker.connect("127.0.0.1", server, "py-talker")
        listener.connect("127.0.0.1", server, "py-listener")
        talker.join("Lobby")
        listener.set_event_handler(lambda e: pushed.append(e.type))
        listener.join("Lobby")
        listener.set_sink(lambda pcm, frames: got.append(pcm))
        sid = talker.start_stream()
        signal = tone(600, 1.5)
        raw = signal.tobytes()
        start = time.monotonic()
        for k, i in enumerate(range(0, len(raw), 1920)):
            talker.feed(sid, raw[i:i + 1920])
            delay = start + (k + 1) * 0.02 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        time.sleep(0.3)
        streams = listener.remote_streams()
        assert [s["username"] for s in streams] == ["py-talker"]
        stats = listener.stream_stats(streams[0]["ssrc"])
        assert stats["packets_received"] >= 70
        assert stats["packets_lost"] == 0
        listener.set_sink(None)
        while True:
            e = listener.poll_event(0)
            if not e:
                break
            events.append(e.type)
    mix = array.array("h")
    mix.frombytes(b"".join(got))
    left = mix[0::2]
    assert "remote_stream_added" in events and "talk_start" in events
    assert "remote_stream_added" in pushed and "talk_start" in pushed, "the event callback sees them too"
    # The 600 Hz tone dominates the left channel; an unrelated frequency does not.
    assert power_at(left, 600) > 1000 * power_at(left, 1700)
    assert max(abs(x) for x in left) > 5000


def test_pull_mode_and_sink_are_exclusive(server):
    with voicecat.Client(external_playback=True) as c:
        c.connect("127.0.0.1", server, "py-pull")
        c.join("Lobby")
        assert c.read_mix(480) == b"\0" * 1920
        c.set_sink(lambda pcm, frames: None)
        with pytest.raises(voicecat.StateError):
            c.read_mix(480)
        c.set_sink(None)
        assert len(c.read_mix(100)) == 400


def test_device_capture_to_device_playback_through_file_backed_pcms(server, tmp_path):
    """A Python host captures from an ALSA PCM backed by a file; another plays the mix
    into a file-backed PCM; the tone arrives."""
    infile, outfile = tmp_path / "in.raw", tmp_path / "out.raw"
    infile.write_bytes(tone(700, 2.0).tobytes())
    voicecat.set_alsa_config(
        f'pcm.py_cap {{ type file slave.pcm {{ type null }} file "/dev/null" infile "{infile}" format "raw" }}\n'
        f'pcm.py_play {{ type file slave.pcm {{ type null }} file "{outfile}" format "raw" }}\n')
    try:
        assert "py_cap" in [n for n, _ in voicecat.list_devices(voicecat.DEVICE_CAPTURE)]
        with voicecat.Client(playback_device="py_play") as listener, voicecat.Client(external_playback=True) as talker:
            listener.connect("127.0.0.1", server, "py-dev-listener")
            listener.join("Lobby")
            talker.connect("127.0.0.1", server, "py-dev-talker")
            talker.join("Lobby")
            talker.set_input_mode(voicecat.INPUT_CONTINUOUS)
            sid = talker.start_stream(device="py_cap")
            time.sleep(1.5)
            talker.stop_stream(sid)
        out = array.array("h")
        out.frombytes(outfile.read_bytes())
        left = out[0::2]
        assert power_at(left, 700) > 1000 * power_at(left, 1900)
    finally:
        voicecat.set_alsa_config(None)


def test_the_python_example_programs_talk_through_a_server(server, tmp_path):
    """examples/python: speak_wav.py speaks a WAV, record_mix.py records the mix."""
    import wave
    examples = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")
    speech = tmp_path / "tone.wav"
    with wave.open(str(speech), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(48000)
        w.writeframes(tone(520, 1.5).tobytes())
    out = tmp_path / "mix.wav"
    rec = subprocess.Popen([sys.executable, os.path.join(examples, "record_mix.py"), "127.0.0.1", str(server),
                            "py-ex-listener", "Lobby", str(out), "3"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.7)
    subprocess.run([sys.executable, os.path.join(examples, "speak_wav.py"), "127.0.0.1", str(server),
                    "py-ex-talker", "Lobby", str(speech)], check=True, timeout=30)
    log, _ = rec.communicate(timeout=30)
    assert rec.returncode == 0, log
    assert "talk_start" in log
    with wave.open(str(out), "rb") as w:
        assert w.getnchannels() == 2 and w.getframerate() == 48000
        mix = array.array("h")
        mix.frombytes(w.readframes(w.getnframes()))
    left = mix[0::2]
    assert power_at(left, 520) > 1000 * power_at(left, 1300)
