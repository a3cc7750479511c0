"""The audio edge of issue #13 through the Python package: per-speaker PCM, other rates
and float in and out, input levels, recordings, devices mid-session, and the
`voicecat record --per-speaker` command. Speech is judged by correlation with what was
fed (loudness contour everywhere; the waveform too where numpy is installed)."""
import array
import ctypes
import glob
import logging
import math
import os
import subprocess
import sys
import threading
import time
import wave

import pytest

import voicecat
from voicecat import EventType, InputMode, StreamKind

from conftest import (best_correlation, envelope, joined, needs_numpy, numpy, pace, read_wav, rms, speak_to_wav,
                      start_recorder, tone, unique, wait_until, waveform_correlations)

SPEECH_A = "The quick brown fox jumps over the lazy dog, twice."
SPEECH_B = "Seven silver swans swam silently southward at sunset."


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """Both sentences at 48 kHz, 44.1 kHz and 16 kHz (16-bit mono WAV paths)."""
    d = tmp_path_factory.mktemp("speech")
    return {(name, rate): speak_to_wav(text, d / f"{name}-{rate}.wav", d, rate)
            for name, text in (("a", SPEECH_A), ("b", SPEECH_B)) for rate in (48000, 44100, 16000)}


def samples(path):
    return read_wav(path)[2]


def _self_id(client):
    return next(u.user_id for u in client.users() if u.is_self)


def _judge(recorded, own, other, rate, what, contour=0.85, waveform=0.75):
    """`recorded` (mono int16 samples at `rate`) carries the speech `own` and none of
    `other`: contour correlation, and with numpy the waveform window by window. (A
    jitter buffer that grows by a frame mid-sentence, as it may on a loaded machine,
    shifts the rest: the contour is compared at one alignment, hence the margins.)"""
    step = rate // 100
    env = envelope(recorded, step)
    r_own, _ = best_correlation(env, envelope(own, step))
    r_other, _ = best_correlation(env, envelope(other, step))
    print(f"{what}: contour correlation {r_own:.3f} with its speech, {r_other:.3f} with the other")
    assert r_own > contour, (what, r_own)
    assert r_other < 0.6, (what, r_other)
    if numpy is None:
        return
    rec = numpy.asarray(recorded, dtype=float)
    scores = waveform_correlations(rec, numpy.asarray(own, dtype=float), window=rate // 2, search=rate // 20)
    print(f"{what}: waveform correlation per 0.5 s:", " ".join(f"{r:.2f}" for r in scores))
    assert sorted(scores)[len(scores) // 2] > waveform, (what, scores)
    # None of the other talker: his waveform is not in it at any alignment.
    ref = numpy.asarray(other, dtype=float)
    size = 1 << (len(rec) + len(ref)).bit_length()
    xc = numpy.fft.irfft(numpy.fft.rfft(rec, size) * numpy.conj(numpy.fft.rfft(ref, size)), size)
    leak = float(numpy.max(numpy.abs(xc)) / math.sqrt(numpy.dot(rec, rec) * numpy.dot(ref, ref)))
    print(f"{what}: the other's waveform at its best alignment: {leak:.3f}")
    assert leak < 0.25, (what, leak)


def _interleaved(chunks):
    a = array.array("h")
    for c in chunks:
        a.frombytes(c if isinstance(c, bytes) else c.tobytes())
    return a


# ---- Per-speaker PCM ----------------------------------------------------------------------


def test_the_per_speaker_sink_gets_each_of_two_talkers_separately(server, speech):
    """Two talkers at once: the listener's per-speaker sink gets each one's speech on
    its own ssrc, none of the other's (and there is no mix consumer at all)."""
    use_numpy = numpy is not None
    blocks, seen = {}, {}

    def sink(block):
        blocks.setdefault(block.ssrc, []).append(block.pcm.copy() if use_numpy else block.pcm)
        seen[block.ssrc] = (block.user_id, block.kind, block.channels)
        if use_numpy:
            assert block.pcm.shape == (block.frames, block.channels) and not block.pcm.flags.writeable

    a_pcm, b_pcm = samples(speech["a", 48000]), samples(speech["b", 48000])
    with joined(server, "edge-spk-a") as a, joined(server, "edge-spk-b") as b, \
            joined(server, "edge-spk-listener") as listener:
        listener.set_speaker_sink(sink, numpy=use_numpy)
        a.set_input_mode(InputMode.CONTINUOUS)
        with a.start_stream(StreamKind.MIC) as sa, b.start_stream(StreamKind.SCREEN_AUDIO) as sb:
            ssrc_a, ssrc_b = sa.send_stats().ssrc, sb.send_stats().ssrc
            for ssrc in (ssrc_a, ssrc_b):
                listener.wait_event(EventType.REMOTE_STREAM_ADDED, where=lambda e: e.ssrc == ssrc)
            sa.feed(a_pcm)  # whole sentences at once: the library sends them at real time, together
            sb.feed(b_pcm)
            sa.drain(timeout=15)
            sb.drain(timeout=15)
            frames_now = {s: sum(len(c) for c in blocks[s]) for s in (ssrc_a, ssrc_b)}
            # played out: another second of each stream's timeline
            assert wait_until(lambda: all(sum(len(c) for c in blocks[s]) > frames_now[s] + 48000 * 2
                                          for s in frames_now))
            listener.set_speaker_sink(None)
        ids = (_self_id(a), _self_id(b))
    assert seen[ssrc_a] == (ids[0], StreamKind.MIC, 2)
    assert seen[ssrc_b] == (ids[1], StreamKind.SCREEN_AUDIO, 2)
    for ssrc, own, other, what in ((ssrc_a, a_pcm, b_pcm, "talker A"), (ssrc_b, b_pcm, a_pcm, "talker B")):
        pcm = _interleaved(blocks[ssrc])
        # A mono stream in stereo output: L = R, concealed frames included.
        assert pcm[0::2] == pcm[1::2], what
        _judge(pcm[0::2], own, other, 48000, what)


def test_a_per_speaker_sink_that_raises_is_disabled_and_raised_from_the_next_call(server, caplog):
    calls = []

    def sink(block):
        calls.append(block.ssrc)
        raise RuntimeError("speaker sink broke")

    with joined(server, "edge-spk-raise-talker") as talker, joined(server, "edge-spk-raise") as listener:
        with talker.start_stream():
            listener.set_speaker_sink(sink)
            assert wait_until(lambda: calls)
            assert not wait_until(lambda: len(calls) > 1, seconds=0.3), "disabled after the first failure"
            with pytest.raises(voicecat.CallbackError) as e:
                listener.remote_streams()
            assert isinstance(e.value.__cause__, RuntimeError) and "per-speaker sink" in str(e.value)
            records = [r for r in caplog.records if r.name == "voicecat" and "per-speaker sink" in r.getMessage()]
            assert len(records) == 1 and records[0].levelno == logging.ERROR
            listener.set_speaker_sink(None)


# ---- Rates and float ---------------------------------------------------------------------


@needs_numpy
def test_float32_feeds_go_to_the_library_as_they_are_and_int16_as_int16(server, monkeypatch):
    lib = voicecat._lib.get()
    calls = []
    for name in ("vc_stream_feed_pcm", "vc_stream_feed_pcm_f32"):
        real = getattr(lib, name)
        monkeypatch.setattr(lib, name, lambda *args, _real=real, _name=name: calls.append(
            (_name, ctypes.cast(args[2], ctypes.c_void_p).value, args[3], args[4]))
            or _real(*args))
    with joined(server, "edge-f32") as talker, talker.start_stream(sample_rate=44100) as mic:
        floats = numpy.zeros(882, dtype=numpy.float32)
        assert mic.feed(floats) == 882
        stereo = numpy.zeros((441, 2), dtype=numpy.float32)
        assert mic.feed(stereo) == 441
        assert mic.feed(numpy.zeros(882, dtype=numpy.float64)) == 882
        assert mic.feed(numpy.zeros(882, dtype=numpy.int16)) == 882
    assert calls[0] == ("vc_stream_feed_pcm_f32", floats.ctypes.data, 882, 1), "the array itself, no copy"
    assert calls[1] == ("vc_stream_feed_pcm_f32", stereo.ctypes.data, 441, 2)
    assert [(c[0], c[2]) for c in calls[2:]] == [("vc_stream_feed_pcm_f32", 882), ("vc_stream_feed_pcm", 882)]
    assert mic.sample_rate == 44100 and "44100 Hz" in repr(mic)


@needs_numpy
def test_a_pull_racing_a_format_change_stays_inside_its_buffer(server):
    # One thread pulls into a buffer sized for the format it sees; another switches the
    # output between mono and stereo. The pull is sized and rendered in one format:
    # nothing past the buffer is written (before, half of such pulls wrote twice the
    # samples of a mono buffer once the library had switched to stereo).
    sentinel, n = 12345, 320
    buf = numpy.full(2 * n + 64, sentinel, dtype=numpy.int16)
    stop = threading.Event()
    pulls, overruns, errors = [0], [0], []
    with joined(server, "edge-format-race") as client:
        client.set_output_format(16000, 1)

        def pull():
            while not stop.is_set():
                buf[n:] = sentinel
                try:
                    client.read_mix_into(buf[:n])
                except Exception as e:  # noqa: BLE001 - counted, then asserted empty
                    errors.append(repr(e))
                    return
                pulls[0] += 1
                overruns[0] += bool((buf[n:] != sentinel).any())

        def switch():
            while not stop.is_set():
                for channels in (2, 1):
                    client.set_output_format(16000, channels)

        threads = [threading.Thread(target=pull), threading.Thread(target=switch)]
        for t in threads:
            t.start()
        time.sleep(2)
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert pulls[0] > 50
    assert overruns[0] == 0, f"{overruns[0]} of {pulls[0]} pulls wrote past the buffer"


_SINK_WHILE_PULLING = """
import array, math, sys, threading, time
import voicecat
from voicecat import InputMode, StreamKind
port, password, tag = int(sys.argv[1]), sys.argv[2] or None, sys.argv[3]
def joined(name):
    c = voicecat.Client(external_playback=True)
    c.connect("127.0.0.1", port, name + tag, password=password)
    c.join("Lobby")
    return c
talker, listener = joined("sinkpull-talker"), joined("sinkpull-listener")
talker.set_input_mode(InputMode.CONTINUOUS)
stream = talker.start_stream(StreamKind.SCREEN_AUDIO)
stream.feed(array.array("h", (int(8000 * math.sin(i / 10)) for i in range(48000 * 3))))
refused = []
def sink(block):
    for call in (lambda: listener.set_output_format(48000, 2),
                 lambda: listener.read_mix_into(array.array("h", bytes(4 * 960)))):
        try:
            call()
        except voicecat.StateError:
            refused.append(1)
listener.set_speaker_sink(sink)
out = array.array("h", bytes(4 * 960))
pulls = 0
end = time.monotonic() + 2
while time.monotonic() < end:
    listener.read_mix_into(out)
    pulls += 1
    time.sleep(0.02)
listener.set_speaker_sink(None)
print(pulls, len(refused))
listener.close(); talker.close()
"""


def test_a_sink_that_misuses_the_client_while_the_host_pulls_is_refused_not_deadlocked(server):
    # A per-speaker sink runs on the library's render thread with its render lock held;
    # a pull on the host's thread waits for that lock. set_output_format or a pull from
    # the sink is refused (StateError), and must not wait for the pull (both threads
    # stuck for ever, the first pull never returned). In a child process: a deadlock
    # fails the test instead of hanging the suite.
    run = subprocess.run([sys.executable, "-c", _SINK_WHILE_PULLING, str(server.port), server.password or "",
                          unique("-")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    pulls, refused = map(int, run.stdout.split())
    assert pulls > 50, run.stdout
    assert refused > 10, run.stdout


@needs_numpy
def test_a_44k1_float_feed_pulled_as_16k_mono_float_keeps_the_speech(server, speech):
    fed = numpy.asarray(samples(speech["a", 44100]), dtype=numpy.float32) / 32768
    pulled = []
    with joined(server, "edge-44k-talker", resampler_quality=10) as talker, \
            joined(server, "edge-16k-listener", resampler_quality=10) as listener:
        listener.set_output_format(16000, 1)
        assert listener.output_format == voicecat.OutputFormat(16000, 1)
        talker.set_input_mode(InputMode.CONTINUOUS)
        with talker.start_stream(sample_rate=44100) as mic:
            stop = threading.Event()

            def talk():
                mic.feed(fed)
                mic.drain(timeout=15)
                stop.set()

            feeder = threading.Thread(target=talk)
            feeder.start()
            # Pull 20 ms (320 frames at 16 kHz) every 20 ms, as an audio callback would,
            # until a second after the talker has sent everything.
            start, k, after = time.monotonic(), 0, 0
            while not stop.is_set() or after < 50:
                after += stop.is_set()
                pulled.append(listener.read_mix(320, dtype="float32"))
                k += 1
                time.sleep(max(0.0, start + k * 0.02 - time.monotonic()))
            feeder.join()
    assert all(p.shape == (320, 1) and p.dtype == numpy.float32 for p in pulled)
    mix = numpy.concatenate(pulled)[:, 0]
    assert numpy.abs(mix).max() <= 1.0
    recorded = array.array("h", numpy.rint(mix * 32767).astype(numpy.int16).tobytes())
    _judge(recorded, samples(speech["a", 16000]), samples(speech["b", 16000]), 16000, "44.1 kHz float in, 16 kHz out")


# ---- Levels ------------------------------------------------------------------------------


def _levels_while_feeding(mic, blocks, skip=25):
    """Feeds 20 ms blocks in real time, reading the level after each one past `skip`.
    A reading at the floor means no frame went through for 250 ms: this shared machine
    stalled the feeding thread. Such readings are left out; most must remain."""
    readings = []

    def feed(block):
        mic.feed(block)
        if len(readings) + skip <= feed.k:
            readings.append(mic.level)
        feed.k += 1

    feed.k = 0
    pace(blocks, feed)
    measured = [r for r in readings if r.peak_dbfs > -120]
    assert len(measured) >= 0.8 * len(readings), readings
    return measured


def test_the_input_level_tracks_a_known_tone_within_a_db(server):
    with joined(server, "edge-level") as talker:  # the default VAD gate: the quiet tone is not sent
        with talker.start_stream() as mic:
            assert mic.level == voicecat.InputLevel(-120.0, -120.0), "nothing sent yet"
            for amp in (0.3, 0.03):
                peak = 20 * math.log10(int(amp * 32767) / 32768)
                readings = _levels_while_feeding(mic, [tone(1000, 0.02, amp)] * 50)
                print(f"amplitude {amp}: peak {peak:.2f} dBFS expected; read",
                      sorted({(round(r.rms_dbfs, 2), round(r.peak_dbfs, 2)) for r in readings}))
                assert readings and all(abs(r.peak_dbfs - peak) < 1 for r in readings), readings
                assert all(abs(r.rms_dbfs - (peak - 3.01)) < 1 for r in readings), readings
            assert wait_until(lambda: mic.level.rms_dbfs == -120.0), "no frame for 250 ms reads silence"
            if numpy is not None:  # float32 at 44.1 kHz, resampled before it is measured
                n = 882
                block = (0.1 * numpy.sin(2 * numpy.pi * 1000 * numpy.arange(n) / 44100)).astype(numpy.float32)
                with talker.start_stream(sample_rate=44100) as mic44:
                    readings = _levels_while_feeding(mic44, [block] * 50)
                assert readings and all(abs(r.rms_dbfs - (-20 - 3.01)) < 1 and abs(r.peak_dbfs + 20) < 1
                                        for r in readings), readings
        with pytest.raises(voicecat.NotFound):
            mic.level  # stopped


# ---- Recording ---------------------------------------------------------------------------


def test_recordings_of_the_mix_and_of_a_speaker_are_wav_files_with_the_speech(server, speech, tmp_path):
    mix_path, spk_path = tmp_path / "mix.wav", tmp_path / "speaker.wav"
    with joined(server, "edge-rec-talker") as talker, joined(server, "edge-rec-listener") as listener:
        listener.set_output_format(16000, 1)
        listener.start_recording(mix_path)  # the mix: nothing else renders, the client does it by itself
        with pytest.raises(voicecat.StateError):
            listener.start_recording(tmp_path / "again.wav")  # the mix is recorded already
        with pytest.raises(voicecat.StateError):
            listener.set_output_format(48000, 2)  # not while a recording runs
        talker.set_input_mode(InputMode.CONTINUOUS)
        with talker.start_stream() as mic:
            ssrc = mic.send_stats().ssrc
            listener.wait_event(EventType.REMOTE_STREAM_ADDED, where=lambda e: e.ssrc == ssrc)
            listener.start_recording(str(spk_path).encode(), ssrc)  # a path as bytes too
            mic.feed(samples(speech["a", 48000]))
            mic.drain(timeout=15)
            listener.wait_event(EventType.TALK_STOP, where=lambda e: e.ssrc == ssrc)
            listener.stop_recording(ssrc)
        listener.stop_recording()
        with pytest.raises(voicecat.NotFound):
            listener.stop_recording()
        listener.set_output_format()  # free again: back to 48 kHz stereo
        assert listener.output_format == voicecat.OutputFormat(48000, 2)
    for path, what in ((mix_path, "recorded mix"), (spk_path, "recorded speaker")):
        with wave.open(str(path), "rb") as w:
            assert (w.getnchannels(), w.getframerate(), w.getsampwidth()) == (1, 16000, 2)
            assert w.getnframes() > 3 * 16000
        _judge(samples(path), samples(speech["a", 16000]), samples(speech["b", 16000]), 16000, what)


# ---- The command ------------------------------------------------------------------------


def test_record_per_speaker_writes_a_file_per_talker(server, speech, tmp_path):
    out = tmp_path / "talk.wav"
    seconds = 9
    users = {"a": unique("cli-spk-a"), "b": unique("cli-spk-b")}
    recorder, lines, reader = start_recorder(server, str(out), "--seconds", str(seconds), "--per-speaker",
                                             "--rate", "16000", "--channels", "1", "--user", unique("cli-spk-rec"))
    speakers = [subprocess.Popen([sys.executable, "-m", "voicecat", "speak", str(speech[name, 48000]),
                                  "--user", users[name], "--port", str(server.port)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    for s in speakers:
        s.communicate(timeout=30)
        assert s.returncode == 0
    stdout, _ = recorder.communicate(timeout=30)
    reader.join()
    assert recorder.returncode == 0, "".join(lines)
    assert f"recorded {seconds}.00 s" in stdout and "2 talker(s) heard" in stdout, stdout
    channels, rate, mix = read_wav(out)
    assert (channels, rate, len(mix)) == (1, 16000, seconds * 16000)
    files = sorted(glob.glob(str(tmp_path / "talk-*.wav")))
    assert len(files) == 2, (files, stdout)
    refs = {name: samples(speech[name, 16000]) for name in ("a", "b")}
    for name, other in (("a", "b"), ("b", "a")):
        mine = [f for f in files if os.path.basename(f).startswith(f"talk-{users[name]}-")]
        assert len(mine) == 1, (files, users)
        assert os.path.basename(mine[0])[len(f"talk-{users[name]}-"):-4].isdigit(), "OUT-<user>-<ssrc>.wav"
        assert mine[0] in stdout
        channels, rate, pcm = read_wav(mine[0])
        assert (channels, rate, len(pcm)) == (1, 16000, seconds * 16000), "as long as the mix"
        # Two talkers and the recorder start together here: wider margins still.
        _judge(pcm, refs[name], refs[other], 16000, f"voicecat record --per-speaker, talker {name}", 0.8, 0.7)
    usage = subprocess.run([sys.executable, "-m", "voicecat", "record", "--help"], capture_output=True, text=True)
    assert "OUT-<user>-<ssrc>.wav" in usage.stdout and "--rate" in usage.stdout
    bad = subprocess.run([sys.executable, "-m", "voicecat", "record", str(out), "--seconds", "1", "--rate", "4000",
                          "--port", str(server.port)], capture_output=True, text=True)
    assert bad.returncode == 2 and "8000..192000" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "voicecat", "record", str(out), "--seconds", "1", "--channels", "3"],
                         capture_output=True, text=True)
    assert bad.returncode == 2


# ---- Devices and bad arguments --------------------------------------------------------------


def test_devices_switch_mid_session_and_bad_ones_are_refused(server):
    with joined(server, "edge-devices", external_playback=False, playback_device="null") as client:
        with pytest.raises(voicecat.DeviceError):
            client.set_playback_device("vc_py_no_such_device")
        client.set_playback_device("null")
        with pytest.raises(voicecat.InvalidArgument):
            client.set_playback_device("")
        with pytest.raises(ValueError):
            client.set_playback_device(None)
        with client.start_stream(device="null") as captured:
            ssrc = captured.send_stats().ssrc
            with pytest.raises(voicecat.DeviceError):
                captured.set_capture_device("vc_py_no_such_device")
            assert captured.device == "null"
            captured.set_capture_device("null")
            assert captured.send_stats().ssrc == ssrc, "the same stream"
            with pytest.raises(voicecat.InvalidArgument):
                captured.set_capture_device("")
        with client.start_stream() as fed:
            with pytest.raises(voicecat.StateError):
                fed.set_capture_device("null")


FAKE_CARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "alsa-fake-card", "fakecard.c")


def test_sound_cards_xruns_are_counted_where_the_host_sees_them(server, tmp_path):
    """A gap made on this machine (a card that over- or underran) and one made by the
    network look alike to a listener: playback_stats() and send_stats() tell them
    apart. The test's sound cards (an ALSA plugin with a clock of its own, built here)
    jump 200 ms ahead a second after each start, twice in all."""
    lib = tmp_path / "libasound_module_pcm_vcfakecard.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-DPIC", "-O2", "-o", str(lib), FAKE_CARD, "-lasound"], check=True)
    (tmp_path / "in.raw").write_bytes(tone(300, 6).tobytes())
    voicecat.set_alsa_config(f"""
        pcm_type.vcfakecard {{ lib "{lib}" }}
        pcm.vc_py_card_in {{ type vcfakecard file "{tmp_path}/in.raw" rate 48000 channels 1 jump_after 1 jumps 2 }}
        pcm.vc_py_card_out {{ type vcfakecard file "{tmp_path}/out.raw" rate 48000 channels 2 jump_after 1 jumps 2 }}
        """)
    try:
        with joined(server, "cards-talk") as talker, \
                joined(server, "cards-listen", external_playback=False, playback_device="vc_py_card_out") as listener:
            talker.set_input_mode(InputMode.CONTINUOUS)
            with talker.start_stream(device="vc_py_card_in") as mic:
                assert wait_until(lambda: listener.playback_stats().device_underruns == 2, seconds=8), \
                    listener.playback_stats()
                assert wait_until(lambda: mic.send_stats().device_overruns == 2, seconds=8), mic.send_stats()
                time.sleep(0.5)   # the card back at its lead after the last underrun
                played, sent = listener.playback_stats(), mic.send_stats()
                assert played.device_failures == 0 and sent.device_failures == 0, "an xrun is recovered, not a failure"
                assert played.device_underruns == 2 and sent.device_overruns == 2, "two jumps each, no more"
                # What the card holds after a block: about 45 ms (a block, a 5 ms period, a block).
                assert 25 <= played.device_buffered_ms <= 70, played
            listener.set_external_playback(True)
            assert listener.playback_stats().device_buffered_ms == 0, "no card open"
            assert listener.playback_stats().device_underruns == 2, "counted for the client's life"
    finally:
        voicecat.set_alsa_config(None)


def test_ten_ms_sink_blocks_carry_the_talkers_audio_480_frames_at_a_time(server):
    """set_sink_block_ms(10): every sink call has 10 ms (480 frames at 48 kHz) and the
    audio is the talker's; other values are refused; 20 goes back."""
    frames_seen = []
    chunks = []

    def sink(pcm, frames):
        frames_seen.append(frames)
        chunks.append(pcm)

    with joined(server, "block-talker") as talker, joined(server, "block-listener") as listener:
        with pytest.raises(voicecat.InvalidArgument):
            listener.set_sink_block_ms(15)
        with pytest.raises(ValueError):
            listener.set_sink_block_ms(-10)
        listener.set_sink_block_ms(10)
        listener.set_sink(sink)
        talker.set_input_mode(InputMode.CONTINUOUS)
        signal = tone(440, 1.0)
        with talker.start_stream(StreamKind.MIC) as mic:
            pace([signal[i:i + 960] for i in range(0, len(signal), 960)], mic.feed)
            mic.drain(timeout=2)
            time.sleep(0.3)
        listener.set_sink(None)
        listener.set_sink_block_ms(20)
    assert frames_seen and set(frames_seen) == {480}, f"block sizes seen: {sorted(set(frames_seen))}"
    left = array.array("h", b"".join(chunks))[0::2]
    # The loudest 0.8 s of what was sunk is the 0.3 tone (RMS 0.212 of full scale).
    window = 48000 * 8 // 10
    loudest = max(rms(left[i:i + window]) for i in range(0, max(1, len(left) - window), 4800))
    assert loudest > 0.18 * 32767, f"the tone was not heard whole: RMS {loudest / 32767:.3f} of full scale"


def test_bad_arguments_raise_the_documented_exceptions(server, tmp_path):
    with joined(server, "edge-bad") as client:
        for rate in (7999, 192001):
            with pytest.raises(voicecat.InvalidArgument):
                client.start_stream(sample_rate=rate)
            with pytest.raises(voicecat.InvalidArgument):
                client.set_output_format(rate, 2)
        with pytest.raises(ValueError):
            client.start_stream(sample_rate=-1)
        with pytest.raises(TypeError):
            client.start_stream(sample_rate="44100")
        with pytest.raises(voicecat.InvalidArgument):
            client.set_output_format(16000, 3)
        assert client.output_format == voicecat.OutputFormat(48000, 2), "unchanged by a failed call"
        with pytest.raises(ValueError, match="dtype"):
            client.read_mix(10, dtype="int8")
        with pytest.raises(TypeError, match="callable"):
            client.set_speaker_sink(42)
        with pytest.raises(TypeError, match="callable"):
            client.set_sink("not a function")
        with pytest.raises(TypeError, match="callable"):
            client.set_event_handler(3)
        with pytest.raises(TypeError, match="callable"):
            voicecat.set_log_handler("print")
        with pytest.raises(ValueError):
            client.start_recording("")
        with pytest.raises(voicecat.InvalidArgument, match="no-such-dir"):
            client.start_recording(tmp_path / "no-such-dir" / "x.wav")
        with pytest.raises(voicecat.NotFound):
            client.start_recording(tmp_path / "x.wav", ssrc=424242)
        with pytest.raises(voicecat.NotFound):
            client.stop_recording(424242)
        client.set_output_format(16000, 1)
        mono = client.read_mix(160)
        assert len(mono) == 160 if numpy is None else mono.shape == (160, 1)
        with pytest.raises(ValueError, match="mono"):
            client.read_mix_into(bytearray(5))
        with pytest.raises(TypeError, match="list is not a buffer"):
            client.read_mix_into([0] * 320)
        client.set_sink(lambda pcm, frames: None)
        with pytest.raises(voicecat.StateError):
            client.read_mix(160)  # a thread renders for the sink
        client.set_sink(None)
        with client.start_stream() as mic:
            if numpy is not None:
                bad = numpy.zeros(960, dtype=numpy.float32)
                bad[3] = numpy.nan
                with pytest.raises(ValueError, match="NaN"):
                    mic.feed(bad)
                with pytest.raises(ValueError, match="shape"):
                    mic.feed(numpy.zeros((960, 3), dtype=numpy.float32))


def test_without_numpy_float_pulls_are_array_f(server, monkeypatch):
    from voicecat import _pcm
    monkeypatch.setattr(_pcm, "_np", None)
    with joined(server, "edge-nonp") as client:
        mix = client.read_mix(100, dtype="float32")
        assert isinstance(mix, array.array) and mix.typecode == "f" and len(mix) == 200 and not any(mix)
        out = array.array("f", [1.0] * 20)
        assert client.read_mix_into(out) == 10 and not any(out)
        with pytest.raises(ImportError, match="numpy"):
            client.set_speaker_sink(lambda block: None, numpy=True)


@needs_numpy
def test_pulls_take_numpy_dtypes_and_say_why_a_strided_array_is_refused(server):
    with joined(server, "edge-dtype") as client:
        for dtype, want in [(numpy.float32, numpy.float32), (numpy.dtype("float32"), numpy.float32),
                            (numpy.int16, numpy.int16), (numpy.dtype("int16"), numpy.int16), ("float32", numpy.float32)]:
            mix = client.read_mix(10, dtype=dtype)
            assert mix.dtype == want and mix.shape == (10, 2), (dtype, mix.dtype, mix.shape)
        for bad in (numpy.int8, numpy.float64, "int8"):
            with pytest.raises(ValueError, match="dtype must be"):
                client.read_mix(10, dtype=bad)
        for strided in (numpy.zeros((40, 2), dtype=numpy.int16)[::2], numpy.zeros((20, 2), dtype=numpy.float32, order="F")):
            with pytest.raises(ValueError, match="must be C-contiguous") as e:
                client.read_mix_into(strided)
            assert f"not {strided.dtype}" not in str(e.value), str(e.value)
        with pytest.raises(ValueError, match="int16 or float32"):
            client.read_mix_into(numpy.zeros((20, 2), dtype=numpy.float64))
        frozen = numpy.zeros((20, 2), dtype=numpy.int16)
        frozen.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            client.read_mix_into(frozen)


def test_streams_lists_what_the_client_started_even_when_the_program_dropped_the_object(server):
    # A Stream object dropped without stop() stays published (stopping it when
    # collected would end a capture stream started without keeping its object): the
    # client lists its running streams, so the program can get one back and stop it.
    with joined(server, "streams") as c:
        kept = c.start_stream()
        dropped_id = c.start_stream(kind=StreamKind.AUX_DEVICE).id   # the object is dropped here
        listed = c.streams
        assert [s.id for s in listed] == [kept.id, dropped_id]
        assert listed[0] is kept, "the program's own object when it still holds it"
        assert listed[1].kind == StreamKind.AUX_DEVICE and listed[1].external_feed
        listed[1].stop()
        assert [s.id for s in c.streams] == [kept.id]
        kept.stop()
        assert c.streams == []
    assert c.streams == []


def test_bools_and_numbers_of_the_wrong_type_are_type_errors_and_ranges_are_the_real_ones(server):
    with joined(server, "types") as c:
        s = c.start_stream()
        with pytest.raises(TypeError, match="muted must be a bool"):
            s.set_state(muted="yes")
        with pytest.raises(TypeError, match="gain must be a number"):
            c.set_remote_stream(1, voicecat.RemoteStreamSettings(gain="1"))   # type: ignore[arg-type]
        with pytest.raises(TypeError, match="deafened must be a bool"):
            c.admin_set_server_mute(1, False, "no", admin_password="x")   # type: ignore[arg-type]
        with pytest.raises(ValueError, match="hold must be a bool"):
            s.set_state(hold=2)
        with pytest.raises(TypeError, match="agc must be a bool"):
            s.set_send_processing(agc="no")   # was taken as True
        with pytest.raises(TypeError, match="agc_level must be a number"):
            s.set_send_processing(agc=True, agc_level="0.5")
        assert s.send_processing.agc is False, "nothing applied from a refused call"
        with pytest.raises(TypeError, match="active must be a bool"):
            c.set_push_to_talk("no")   # type: ignore[arg-type]
        with pytest.raises(TypeError, match="enabled must be a bool"):
            c.set_external_playback("yes")   # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"channels must be in 1\.\.2, not -1"):
            c.start_stream(channels=-1)
        with pytest.raises(ValueError, match=r"max_queue_ms must be in 0\.\.600000, not -5"):
            c.start_stream(max_queue_ms=-5)
        with pytest.raises(ValueError, match=r"hang_ms must be in 0\.\.10000"):
            c.set_vad(0.02, -1)
        s.set_state(muted=True, hold=0)   # a bool, or 0 / 1
        if numpy is not None:
            s.set_state(muted=numpy.bool_(False), hold=numpy.int64(1))   # numpy's too
    with pytest.raises(TypeError, match="external_playback must be a bool"):
        voicecat.Client(external_playback="no")   # type: ignore[arg-type]
    with pytest.raises(TypeError, match="type must be an EventType or an int"):
        voicecat.event_type_name("x")   # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text must be a str or None"):
        voicecat.set_alsa_config(5)   # type: ignore[arg-type]


def test_ctrl_c_landing_at_a_trampolines_entry_is_raised_by_the_call_that_ran(server):
    # Ctrl-C can land as one of the package's trampolines starts, before its guard
    # (Python handles a pending signal on entering a function): ctypes hands it to
    # sys.unraisablehook and drops it. A trial joined a frozen server, pressed Ctrl-C,
    # and the join's failure, logged on the main thread, took it: the join returned
    # Timeout 5 s later and the Ctrl-C was gone. The package keeps it (main thread only)
    # and the call raises it. Driven here through the hook as ctypes calls it (pytest
    # puts its own hook in place during a test: the package's is called directly, and
    # checked to be the one a program gets on import).
    import sys
    import types
    from voicecat import _callbacks, _client
    installed = subprocess.run([sys.executable, "-c", "import sys, voicecat._callbacks as c; "
                                "print(sys.unraisablehook is c._keep_interrupt_at_trampoline_entry)"],
                               capture_output=True, text=True, env=os.environ)
    assert installed.stdout.strip() == "True", installed
    hook = _callbacks._keep_interrupt_at_trampoline_entry
    with joined(server, "ctrl-c-entry") as c:
        dropped = types.SimpleNamespace(exc_type=KeyboardInterrupt, exc_value=KeyboardInterrupt(), exc_traceback=None,
                                        err_msg="Exception ignored on calling ctypes callback function",
                                        object=_client._last_error)
        hook(dropped)
        with pytest.raises(KeyboardInterrupt):
            c.set_input_mode(InputMode.CONTINUOUS)
        c.set_input_mode(InputMode.CONTINUOUS)   # raised once

        # On another thread it is not a Ctrl-C (signals land on the main thread), nor
        # from a function not of the package: left to the hook installed before.
        seen = []
        saved = _callbacks._previous_unraisablehook
        _callbacks._previous_unraisablehook = seen.append
        try:
            t = threading.Thread(target=hook, args=(dropped,))
            t.start()
            t.join()
            foreign = types.SimpleNamespace(**{**dropped.__dict__, "object": len})
            hook(foreign)
        finally:
            _callbacks._previous_unraisablehook = saved
        assert seen == [dropped, foreign]
        c.set_input_mode(InputMode.CONTINUOUS)
