"""The example programs in examples/python, run against the installed package, and
device capture and playback through ALSA PCMs backed by files."""
import array
import os
import subprocess
import sys
import time
import wave

import pytest

import voicecat
from voicecat import DeviceKind, InputMode

from conftest import ROOT, goertzel, numpy, read_wav, speak_to_wav, tone, unique, waveform_correlations

EXAMPLES = os.path.join(ROOT, "examples", "python")


def _tone_wav(path, freq, seconds, rate=48000):
    """A 16-bit mono WAV file of a tone."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(tone(freq, seconds, rate=rate).tobytes())
    return path


def test_speak_wav_record_mix_and_wait_for_talker_talk_through_a_server(server, tmp_path):
    speech = _tone_wav(tmp_path / "tone.wav", 520, 1.5)
    out = tmp_path / "mix.wav"
    common = ["127.0.0.1", str(server.port)]
    rec = subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "record_mix.py"), *common, unique("ex-rec"),
                            "Lobby", str(out), "3.5"], stdout=subprocess.PIPE, text=True)
    waiter = subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "wait_for_talker.py"), *common,
                               unique("ex-wait"), "Lobby", "20"], stdout=subprocess.PIPE, text=True)
    assert waiter.stdout is not None and "waiting" in waiter.stdout.readline()
    time.sleep(0.5)
    subprocess.run([sys.executable, os.path.join(EXAMPLES, "speak_wav.py"), *common, "ex-talker-" + str(os.getpid()),
                    "Lobby", str(speech)], check=True, timeout=30)
    log, _ = rec.communicate(timeout=30)
    assert rec.returncode == 0, log
    assert "talk_start" in log
    said = waiter.communicate(timeout=30)[0]
    assert waiter.returncode == 0 and f"ex-talker-{os.getpid()} started talking" in said
    with wave.open(str(out), "rb") as w:
        assert w.getnchannels() == 2 and w.getframerate() == 48000
        mix = array.array("h")
        mix.frombytes(w.readframes(w.getnframes()))
    left = mix[0::2]
    assert goertzel(left, 520) > 1000 * goertzel(left, 1300)


def test_record_speakers_writes_each_talker_at_16k_mono_from_the_first_word(server, tmp_path):
    # espeak-ng's own 22050 Hz: speak_wav.py has the library resample it.
    speech = speak_to_wav("Peter picked a peck of pickled peppers.", tmp_path / "speech.wav", tmp_path, rate=22050)
    outdir = tmp_path / "speakers"
    outdir.mkdir()
    common = ["127.0.0.1", str(server.port)]
    rec = subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "record_speakers.py"), *common,
                            unique("ex-speakers"), "Lobby", str(outdir), "8"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)  # a head start only: a stream already there when it joins is recorded too
    talker = unique("ex-spk-talker")
    subprocess.run([sys.executable, os.path.join(EXAMPLES, "speak_wav.py"), *common, talker, "Lobby", str(speech)],
                   check=True, timeout=30)
    log, _ = rec.communicate(timeout=30)
    assert rec.returncode == 0, log
    files = list(outdir.glob(f"{talker}-*.wav"))
    assert len(files) == 1 and f"wrote {files[0]}" in log, (log, files)
    channels, rate, pcm = read_wav(files[0])
    assert (channels, rate) == (1, 16000)
    _, _, spoken = read_wav(speech)
    assert len(pcm) > len(spoken) * 16000 // 22050  # the whole sentence and more
    if numpy is None:
        return
    # The recording starts when the stream appears (REMOTE_STREAM_ADDED), yet holds the
    # sentence from its first sound: the best alignment of the reference (resampled to
    # 16 kHz) puts its first sound inside the file, and the waveform matches.
    ref16 = tmp_path / "ref16.wav"
    subprocess.run(["sox", str(speech), "-r", "16000", str(ref16)], check=True)
    reference = numpy.asarray(read_wav(ref16)[2], dtype=float)
    recorded = numpy.asarray(pcm, dtype=float)
    size = 1 << (len(recorded) + len(reference)).bit_length()
    xc = numpy.fft.irfft(numpy.fft.rfft(recorded, size) * numpy.conj(numpy.fft.rfft(reference, size)), size)
    lag = int(numpy.argmax(xc))
    lag = lag - size if lag > size // 2 else lag  # the reference's start in the recording (may be < 0)
    onset = int(numpy.argmax(numpy.abs(reference) > 0.05 * numpy.abs(reference).max()))
    assert lag + onset >= 0, f"the first {-(lag + onset) / 16:.0f} ms of the first word are missing"
    scores = waveform_correlations(recorded, reference, window=8000, search=800)
    assert scores and sorted(scores)[len(scores) // 2] > 0.8, scores  # Opus at 32 kb/s: ~0.95


def test_device_capture_to_device_playback_through_file_backed_pcms(server, tmp_path):
    """A host captures from an ALSA PCM backed by a file; another plays the mix into a
    file-backed PCM; the tone arrives."""
    infile, outfile = tmp_path / "in.raw", tmp_path / "out.raw"
    infile.write_bytes(tone(700, 2.0).tobytes())
    voicecat.set_alsa_config(
        f'pcm.py_cap {{ type file slave.pcm {{ type null }} file "/dev/null" infile "{infile}" format "raw" }}\n'
        f'pcm.py_play {{ type file slave.pcm {{ type null }} file "{outfile}" format "raw" }}\n')
    try:
        assert "py_cap" in [d.name for d in voicecat.list_devices(DeviceKind.CAPTURE)]
        assert "py_play" in [d.name for d in voicecat.list_devices(DeviceKind.PLAYBACK)]
        with voicecat.Client(playback_device="py_play") as listener, \
                voicecat.Client(external_playback=True) as talker:
            listener.connect("127.0.0.1", server.port, unique("dev-listener"))
            listener.join("Lobby")
            talker.connect("127.0.0.1", server.port, unique("dev-talker"))
            talker.join("Lobby")
            talker.set_input_mode(InputMode.CONTINUOUS)
            with talker.start_stream(device="py_cap") as stream:
                assert not stream.external_feed
                time.sleep(1.5)
        out = array.array("h")
        out.frombytes(outfile.read_bytes())
        left = out[0::2]
        assert goertzel(left, 700) > 1000 * goertzel(left, 1900)
    finally:
        voicecat.set_alsa_config(None)
    with pytest.raises(voicecat.InvalidArgument):
        voicecat.set_alsa_config("pcm.broken { type")
