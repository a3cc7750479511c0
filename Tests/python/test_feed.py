"""Audio in every form feed() takes: packet counts at the talker, the right tone at the
right level at a listener."""
import array
import math

import pytest

import voicecat
from voicecat import InputMode, StreamKind

from conftest import Recorder, goertzel, joined, left, numpy, pace, rms, tone, wait_until

SECONDS = 0.4           # per form: 20 frames of 20 ms
FRAMES = int(SECONDS * 48000)


def _forms():
    """(name, frequency, a function turning a mono int16 array('h') into that form)."""
    forms = [
        ("bytes", lambda a: a.tobytes()),
        ("bytearray", lambda a: bytearray(a.tobytes())),
        ("array('h')", lambda a: a),
        ("memoryview of array('h')", lambda a: memoryview(a)),          # item size 2: all of it
        ("memoryview of bytes", lambda a: memoryview(a.tobytes())),     # item size 1: even count
        ("2-D memoryview (frames, 1)", lambda a: memoryview(a.tobytes()).cast("h", (len(a), 1))),
    ]
    if numpy is not None:
        forms += [
            ("numpy int16 (n,)", lambda a: numpy.array(a, dtype=numpy.int16)),
            ("numpy int16 (n, 1)", lambda a: numpy.array(a, dtype=numpy.int16).reshape(-1, 1)),
            ("numpy int16 (n, 2)", lambda a: numpy.repeat(numpy.array(a, dtype=numpy.int16)[:, None], 2, axis=1)),
            ("numpy float32 (n,)", lambda a: numpy.array(a, dtype=numpy.float32) / 32767),
            ("numpy float64 (n, 1)", lambda a: (numpy.array(a, dtype=numpy.float64) / 32767).reshape(-1, 1)),
            ("numpy int16 strided", lambda a: numpy.repeat(numpy.array(a, dtype=numpy.int16), 2)[::2]),
        ]
    # Distinct frequencies, far enough apart for a 100 ms window to tell them apart.
    return [(name, 300 + 130 * i, fn) for i, (name, fn) in enumerate(forms)]


def test_every_input_form_sends_every_frame_and_the_listener_hears_each_tone(server):
    forms = _forms()
    recorder = Recorder()
    with joined(server, "feed-talker") as talker, joined(server, "feed-listener") as listener:
        listener.set_sink(recorder)
        talker.set_input_mode(InputMode.CONTINUOUS)
        frame = talker.channel_audio().frame_samples
        assert frame == 960
        # Every form converted first, so that feeding runs on without gaps.
        inputs = []
        for name, freq, convert in forms:
            pcm = convert(tone(freq, SECONDS))
            # 20 ms pieces (bytes and byte memoryviews slice in bytes, the others in samples)
            step = 1920 if isinstance(pcm, (bytes, bytearray)) or getattr(pcm, "itemsize", 2) == 1 else 960
            inputs.append((name, [pcm[i:i + step] for i in range(0, len(pcm), step)]))
        with talker.start_stream(StreamKind.MIC) as mic:
            sent = []
            for name, pieces in inputs:
                before = talker.connection_stats().packets_out
                taken = []
                pace(pieces, lambda p: taken.append(mic.feed(p)))  # in real time: sent as fed
                mic.drain(timeout=2)
                assert sum(taken) == FRAMES, f"{name}: feed() took {sum(taken)} frames of {FRAMES}"
                sent.append(talker.connection_stats().packets_out - before)
            assert wait_until(lambda: len(recorder.chunks) * 960 > (len(forms) * SECONDS + 0.5) * 48000)
        listener.set_sink(None)
        ssrcs = [s.ssrc for s in listener.remote_streams()]
    # Every frame is sent. A feeder this busy machine held up past the dry slack ends
    # its talkspurt, and that sends a closing frame (silence, last-frame flag) besides
    # (CI once counted 21 for 20 frames): a frame or two more, never fewer.
    for (name, _, _), packets in zip(forms, sent):
        assert FRAMES // frame <= packets <= FRAMES // frame + 2, \
            f"{name}: {packets} packets sent for {SECONDS} s, not {FRAMES // frame}"
    assert ssrcs == [] or len(ssrcs) == 1

    # Which candidate tone dominates each 100 ms of the mix, in order.
    mix = left(recorder.pcm)
    window = 4800
    freqs = [f for _, f, _ in forms]
    heard, levels = [], {f: [] for f in freqs}
    for start in range(0, len(mix) - window, window):
        piece = mix[start:start + window]
        if rms(piece) < 1000:
            continue
        powers = [goertzel(piece, f) for f in freqs]
        best = max(range(len(freqs)), key=lambda i: powers[i])
        others = sorted(powers)[-2]
        if powers[best] > 20 * others:  # a clean window, not a transition
            heard.append(freqs[best])
            levels[freqs[best]].append(rms(piece))
    order = [f for i, f in enumerate(heard) if i == 0 or heard[i - 1] != f]
    assert order == freqs, f"tones heard in this order: {order}, fed: {freqs}"
    # Each form arrives at the level it was fed (0.3 of full scale: RMS about 6950).
    for name, freq, _ in forms:
        level = sorted(levels[freq])[len(levels[freq]) // 2]
        assert 0.5 < level / (0.3 * 32767 / math.sqrt(2)) < 1.5, f"{name}: level {level:.0f}"


def test_stereo_input_on_a_stereo_channel_keeps_left_and_right_apart(server):
    recorder = Recorder()
    with joined(server, "feed-st-talker", "Music") as talker, joined(server, "feed-st-listener", "Music") as listener:
        listener.set_sink(recorder)
        with talker.start_stream(StreamKind.SCREEN_AUDIO, channels=2) as stream:
            l_tone, r_tone = tone(500, 1.0), tone(1300, 1.0)
            stereo = array.array("h", bytes(4 * len(l_tone)))
            stereo[0::2], stereo[1::2] = l_tone, r_tone
            pace([stereo[i:i + 1920] for i in range(0, len(stereo), 1920)], stream.feed)
            assert wait_until(lambda: len(recorder.chunks) > 70)
        listener.set_sink(None)
    a = array.array("h")
    a.frombytes(recorder.pcm)
    lch, rch = a[0::2], a[1::2]
    assert goertzel(lch, 500) > 100 * goertzel(lch, 1300)
    assert goertzel(rch, 1300) > 100 * goertzel(rch, 500)


@pytest.mark.skipif(numpy is None, reason="numpy is not installed in this environment")
def test_read_mix_returns_numpy_and_fills_buffers(server):
    with joined(server, "feed-pull") as client:
        mix = client.read_mix(480)
        assert isinstance(mix, numpy.ndarray) and mix.dtype == numpy.int16 and mix.shape == (480, 2)
        assert not mix.any()
        out = numpy.ones((100, 2), dtype=numpy.int16)
        assert client.read_mix_into(out) == 100 and not out.any()
        raw = bytearray(b"\1" * 400)
        assert client.read_mix_into(raw) == 100 and raw == bytes(400)
        floats = numpy.ones((10, 2), dtype=numpy.float32)  # the float variant: vc_read_mixed_pcm_f32
        assert client.read_mix_into(floats) == 10 and not floats.any()
        with pytest.raises(ValueError, match="int16 or float32"):
            client.read_mix_into(numpy.zeros((10, 2), dtype=numpy.float64))
        with pytest.raises(ValueError, match=r"not \(frames, 2\)"):
            client.read_mix_into(numpy.zeros((10, 1), dtype=numpy.int16))
        with pytest.raises(ValueError, match="stereo"):
            client.read_mix_into(bytearray(6))


def test_read_mix_without_numpy_returns_array_h(server, monkeypatch):
    from voicecat import _pcm
    monkeypatch.setattr(_pcm, "_np", None)
    with joined(server, "feed-pull-nonp") as client:
        mix = client.read_mix(100)
        assert isinstance(mix, array.array) and mix.typecode == "h" and len(mix) == 200
        with pytest.raises(ImportError, match="numpy"):
            client.set_sink(lambda pcm, frames: None, numpy=True)


@pytest.mark.skipif(numpy is None, reason="numpy is not installed in this environment")
def test_a_numpy_sink_gets_read_only_views_of_the_mix(server):
    shapes, copies = [], []

    def sink(pcm, frames):
        shapes.append((type(pcm), pcm.shape, pcm.dtype, pcm.flags.writeable, frames))
        copies.append(pcm.copy())

    with joined(server, "np-sink-talker") as talker, joined(server, "np-sink-listener") as listener:
        listener.set_sink(sink, numpy=True)
        talker.set_input_mode(InputMode.CONTINUOUS)
        with talker.start_stream() as mic:
            signal = numpy.sin(2 * numpy.pi * 700 * numpy.arange(48000) / 48000).astype(numpy.float32) * 0.3
            pace([signal[i:i + 960] for i in range(0, len(signal), 960)], mic.feed)
            assert wait_until(lambda: len(copies) > 60)
        listener.set_sink(None)
    assert set(shapes) == {(numpy.ndarray, (960, 2), numpy.dtype(numpy.int16), False, 960)}
    mix = numpy.concatenate(copies)[:, 0].astype(float)
    spectrum = numpy.abs(numpy.fft.rfft(mix))
    assert abs(numpy.argmax(spectrum) * 48000 / len(mix) - 700) < 5


def test_a_whole_file_fed_at_once_is_sent_at_real_time_drained_or_flushed(server):
    recorder = Recorder()
    with joined(server, "queue-talker") as talker, joined(server, "queue-listener") as listener:
        listener.set_sink(recorder)
        talker.set_input_mode(InputMode.CONTINUOUS)
        with talker.start_stream(max_queue_ms=3000) as mic:
            before = talker.connection_stats().packets_out
            assert mic.feed(tone(440, 2.0)) == 96000
            assert mic.queued_ms > 1000, "queued, not sent at once"
            assert talker.connection_stats().packets_out - before < 50
            mic.drain(timeout=10)
            assert mic.queued_ms == 0
            # The 100 frames fed; the talkspurt's closing frame (silence carrying the
            # last-frame flag, the file being whole frames) follows a frame later, so a
            # slow reader may count it too (it once read 101 under load).
            assert talker.connection_stats().packets_out - before in (100, 101)
            assert wait_until(lambda: talker.connection_stats().packets_out - before == 101)
            # More than the queue holds: refused whole, nothing queued, and said so (it
            # read "queue is full: 0 ms queued").
            with pytest.raises(voicecat.NoMemory, match="is more than stream .* queue holds"):
                mic.feed(tone(440, 4.0))
            assert mic.queued_ms == 0
            mic.feed(tone(440, 2.0))
            with pytest.raises(voicecat.NoMemory, match="queue is full: [0-9]+ ms queued"):
                mic.feed(tone(440, 2.0))
            mic.flush()
            # Barge-in: what is queued goes.
            before = talker.connection_stats().packets_out
            mic.feed(tone(660, 2.5))
            assert wait_until(lambda: mic.queued_ms < 2000)
            mic.flush()
            assert mic.queued_ms == 0
            flushed_at = talker.connection_stats().packets_out - before
            assert not wait_until(lambda: talker.connection_stats().packets_out - before > flushed_at + 1, seconds=0.3)
            assert flushed_at < 100
        listener.set_sink(None)
    mix = left(recorder.pcm)
    assert goertzel(mix, 440) > 100 * goertzel(mix, 1000)
