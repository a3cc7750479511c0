"""The voicecat command end to end: speak a spoken sentence, record it at the other end
and correlate; and each failure with its exit status."""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import wave


import voicecat

from conftest import (_start_server, best_correlation, envelope, joined, numpy, pace, read_wav, speak_to_wav,
                      start_recorder, tone, unique, waveform_correlations)

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


def test_speak_and_record_carry_speech_end_to_end(server, tmp_path):
    speech = speak_to_wav(SPEECH, tmp_path / "speech.wav", tmp_path)
    other = speak_to_wav(OTHER, tmp_path / "other.wav", tmp_path)
    out = tmp_path / "mix.wav"
    recorder, stderr_lines, reader = start_recorder(server, str(out), "--seconds", "7", "--user", unique("cli-rec"),
                                                    "--progress", "always")
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


def _closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_exit_status_says_what_went_wrong(server, password_server, tmp_path):
    refused = voicecat_cmd("ping", "127.0.0.1", "--port", str(_closed_port()), check=3)
    assert "refused" in refused.stderr.lower()
    pinned = voicecat_cmd("ping", "--fingerprint", "ab" * 32, server=server, check=4)
    assert server.fingerprint in pinned.stderr
    voicecat_cmd("ping", "--password", "wrong", server=password_server, check=4)
    voicecat_cmd("ping", "--known-servers", "", server=server, check=4)  # no store and no pin
    voicecat_cmd("ping", "--known-servers", "", "--allow-unverified", "--count", "1", server=server, check=0)
    env = dict(os.environ, VOICECAT_PASSWORD=password_server.password)
    voicecat_cmd("ping", "--count", "1", server=password_server, env=env, check=0)
    with voicecat.Client() as holder:
        taken_name = unique("cli-taken")
        holder.connect("127.0.0.1", server.port, taken_name)
        voicecat_cmd("ping", "--user", taken_name, server=server, check=5)
    nowhere = voicecat_cmd("record", str(tmp_path / "x.wav"), "--seconds", "1", "--channel", "Nowhere",
                           server=server, check=5)
    assert "Nowhere" in nowhere.stderr
    missing = voicecat_cmd("speak", str(tmp_path / "missing.wav"), server=server, check=7)
    assert "missing.wav" in missing.stderr
    # An output that cannot be written is refused before an hour is recorded into it.
    t0 = time.monotonic()
    voicecat_cmd("record", "", "--seconds", "3600", server=server, check=2)
    into_dir = voicecat_cmd("record", str(tmp_path), "--seconds", "3600", server=server, check=7)
    assert "directory" in into_dir.stderr
    assert time.monotonic() - t0 < 30, "the output was checked only after recording"
    # Any rate the library resamples is spoken (espeak-ng writes 22050 Hz); below it, refused.
    def silent_wav(name, rate):   # 0.1 s of mono 16-bit silence at `rate`
        path = tmp_path / name
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(rate)
            w.writeframes(bytes(2 * rate // 10))
        return path
    low_rate = silent_wav("low.wav", 22050)
    spoke = voicecat_cmd("speak", str(low_rate), "--user", unique("cli-22k"), "--tail", "0", server=server, check=0)
    assert "spoke 0.10 s" in spoke.stdout, spoke.stdout
    too_low = silent_wav("too-low.wav", 4000)
    wrong_rate = voicecat_cmd("speak", str(too_low), server=server, check=7)
    assert "4000 Hz" in wrong_rate.stderr and "8000..192000" in wrong_rate.stderr
    not_wav = tmp_path / "text.wav"
    not_wav.write_text("hello")
    voicecat_cmd("speak", str(not_wav), server=server, check=7)
    # WAVE_FORMAT_EXTENSIBLE headers (sox and many recorders write them) are read too;
    # what is refused says why.
    def extensible_wav(name, channels, bits, subformat=1, rate=44100):
        frames = rate // 10
        data = bytes(frames * channels * bits // 8)
        fmt = (struct.pack("<HHIIHH", 0xFFFE, channels, rate, rate * channels * bits // 8, channels * bits // 8, bits)
               + struct.pack("<HHI", 22, bits, 3) + struct.pack("<H", subformat) + bytes.fromhex("000000001000800000aa00389b71"))
        path = tmp_path / name
        path.write_bytes(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(data)) + b"WAVE"
                         + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data)
        return path
    spoke = voicecat_cmd("speak", str(extensible_wav("ext.wav", 2, 16)), "--user", unique("cli-ext"), "--tail", "0",
                         "--channel", "Music", server=server, check=0)
    assert "spoke 0.10 s" in spoke.stdout, spoke.stdout
    three = voicecat_cmd("speak", str(extensible_wav("three.wav", 3, 16)), server=server, check=7)
    assert "3 channels" in three.stderr, three.stderr
    floats = voicecat_cmd("speak", str(extensible_wav("float.wav", 1, 32, subformat=3)), server=server, check=7)
    assert "not integer PCM" in floats.stderr, floats.stderr
    voicecat_cmd("record", str(tmp_path / "no-such-dir" / "x.wav"), "--seconds", "1", server=server, check=7)
    # Arguments the library refuses are usage errors too.
    voicecat_cmd("ping", "--fingerprint", "00", server=server, check=2)
    voicecat_cmd("ping", "--user", "a\nb", server=server, check=2)
    voicecat_cmd("speak", check=2)
    voicecat_cmd("record", str(tmp_path / "x.wav"), check=2)
    voicecat_cmd("nonsense", check=2)
    # Values out of range are usage errors that say what is wanted, not tracebacks or
    # another failure's status (they crashed with exit 1, or ran and failed with 3).
    for args, says in [(("ping", "--timeout", "-1"), "more than 0"), (("ping", "--timeout", "0"), "more than 0"),
                       (("ping", "--count", "0"), "at least 1"), (("ping", "--interval", "0.03"), "at least 0.05"),
                       (("ping", "--port", "99999"), "0..65535"), (("record", "x.wav", "--seconds", "nan"), "more than 0"),
                       (("record", "x.wav", "--seconds", "inf"), "more than 0"), (("stats", "--seconds", "-1"), "at least 0"),
                       (("speak", "x.wav", "--tail", "-1"), "at least 0")]:
        run = voicecat_cmd(*args, check=2)
        assert says in run.stderr and "Traceback" not in run.stderr, run.stderr
    bad_env = voicecat_cmd("ping", env=dict(os.environ, VOICECAT_PORT="abc"), check=2)
    assert "VOICECAT_PORT" in bad_env.stderr, bad_env.stderr
    summary = voicecat_cmd("--help", check=0).stdout
    assert "unless --rate / --channels say otherwise)" in re.sub(r"\s+", " ", summary), summary


def test_a_server_that_dies_mid_command_is_exit_3_for_every_command(tmp_path):
    # --help: 3 = the server could not be reached or did not answer. speak said 5
    # ("refused": its stream was gone with the session), stats 1 ("not in a channel")
    # and ping 1 (helper-88).
    path = tmp_path / "long.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(48000)
        w.writeframes(tone(440, 20).tobytes())
    proc, private = _start_server([])
    try:
        def start(*args):
            return subprocess.Popen([sys.executable, "-m", "voicecat", *args, "--port", str(private.port)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        running = {"speak": start("speak", str(path), "--user", unique("dies-speak")),
                   "stats": start("stats", "--seconds", "5", "--user", unique("dies-stats")),
                   "ping": start("ping", "127.0.0.1", "--count", "1000", "--user", unique("dies-ping")),
                   "record": start("record", str(tmp_path / "x.wav"), "--seconds", "20", "--user", unique("dies-rec"))}
        time.sleep(3)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    for name, p in running.items():
        out, err = p.communicate(timeout=60)
        assert p.returncode == 3 and "disconnected from" in err, f"{name}: exit {p.returncode}\n{out}\n{err}"


def test_speak_reads_standard_input_and_says_when_a_file_is_cut_short(server, tmp_path):
    # A WAV written to a pipe has no size in its header (espeak-ng --stdout writes
    # 0x7FFFF000): "speak -" reads one from standard input to its end. A file whose data
    # ends before its header says played what it held without a word (helper-88).
    speech = tmp_path / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(speech), "one two three"], check=True)
    piped = subprocess.run(["espeak-ng", "--stdout", "one two three"], check=True, capture_output=True).stdout
    argv = [sys.executable, "-m", "voicecat", "speak", "-", "--tail", "0", "--user", unique("cli-stdin"),
            "--port", str(server.port)]
    run = subprocess.run(argv, input=piped, capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr
    _, rate, reference = read_wav(speech)
    spoke = float(re.search(rb"spoke ([0-9.]+) s from -", run.stdout).group(1))
    assert abs(spoke - len(reference) / rate) < 0.05, (spoke, len(reference) / rate)
    cut = tmp_path / "cut.wav"
    cut.write_bytes(speech.read_bytes()[:len(speech.read_bytes()) // 2])
    half = voicecat_cmd("speak", str(cut), "--tail", "0", "--user", unique("cli-cut"), server=server, check=0)
    assert "cut short?" in half.stderr, half.stderr


def test_record_interrupted_by_ctrl_c_writes_what_it_recorded(server, tmp_path):
    """Ctrl-C (SIGINT) ends `voicecat record` with exit status 130 and files that hold
    what was recorded until then (they were empty, or an older recording, before)."""
    out = tmp_path / "cut.wav"
    out.write_bytes(b"an older file")
    recorder, lines, reader = start_recorder(server, str(out), "--seconds", "60", "--per-speaker",
                                             "--user", unique("cli-cut"))
    time.sleep(1.5)
    recorder.send_signal(signal.SIGINT)
    assert recorder.wait(timeout=20) == 130
    reader.join()
    assert any("interrupted" in line for line in lines), lines
    channels, rate, pcm = read_wav(out)
    assert (channels, rate) == (2, 48000)
    assert 0.5 < len(pcm) / 2 / rate < 10, len(pcm)


def test_devices_lists_both_kinds(tmp_path):
    listing = voicecat_cmd("devices", check=0)
    assert any(line.split()[:2] == ["capture", "null"] for line in listing.stdout.splitlines())
    devices = json.loads(voicecat_cmd("devices", "--json", "--kind", "playback", check=0).stdout)
    assert devices and {d["kind"] for d in devices} == {"playback"} and "null" in [d["name"] for d in devices]


def test_stats_shows_a_stream_being_received(server):
    with joined(server, "cli-stats-talker") as talker:
        talker.set_input_mode(voicecat.InputMode.CONTINUOUS)
        mic = talker.start_stream()
        stop = threading.Event()
        feeder = threading.Thread(target=lambda: [pace([tone(600, 0.02)] * 5, mic.feed) for _ in range(200)
                                                  if not stop.is_set()])
        feeder.start()
        try:
            run = voicecat_cmd("stats", "--seconds", "1.5", "--json", server=server, check=0)
        finally:
            stop.set()
            feeder.join()
    stats = json.loads(run.stdout)
    assert stats["fingerprint"] == server.fingerprint and stats["audio"]["mode"] == "mono"
    mine = [s for s in stats["streams"] if s["username"].startswith("cli-stats-talker")]
    assert len(mine) == 1 and mine[0]["stats"]["packets_received"] > 20
    assert stats["connection"]["voice_connected"] is True


def test_ping_shows_the_fingerprint_and_round_trips(server):
    run = voicecat_cmd("ping", "127.0.0.1", "--count", "3", "--json", server=server, check=0)
    result = json.loads(run.stdout)
    assert result["fingerprint"] == server.fingerprint
    assert len(result["media_rtt_ms"]) == 3 and all(1 <= r < 1000 for r in result["media_rtt_ms"])  # 0 means none yet
    assert result["keepalives_sent"] >= 3 and result["keepalives_lost"] == 0
    text = voicecat_cmd("ping", "--count", "2", server=server, check=0).stdout
    assert f"server fingerprint {server.fingerprint}" in text and "media rtt: 2 keepalive echoes" in text


def test_help_is_plain_text_without_rest_markup(capsys):
    from voicecat import cli
    for argv in (["--help"], *([command, "--help"] for command in ("speak", "record", "devices", "stats", "ping"))):
        assert cli.main(argv) == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: voicecat"), out
        assert not re.search(r"``|:[a-z]+:`", out), f"voicecat {' '.join(argv)} shows reST markup:\n{out}"
