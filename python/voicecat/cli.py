"""The ``voicecat`` command: speak a WAV file, record the mix, list devices, show
statistics, ping a server.

    voicecat speak FILE.wav [--host H] [--port P] [--user U] [--channel C]
    voicecat record OUT.wav --seconds N [--per-speaker] [--rate HZ] [--channels 1|2]
    voicecat devices
    voicecat stats [--seconds N] [--json]
    voicecat ping HOST [--count N] [--json]

Server options default to the environment (VOICECAT_HOST, VOICECAT_PORT, VOICECAT_USER,
VOICECAT_PASSWORD, VOICECAT_FINGERPRINT, VOICECAT_KNOWN_SERVERS), then to 127.0.0.1:47800,
a user name made of the login name and the process id, and channel Lobby. Without
--fingerprint the server is trusted on first use and remembered in the known-servers file.
"""
from __future__ import annotations

import argparse
import array
import getpass
import inspect
import json
import logging
import math
import os
import re
import sys
import threading
import time
import typing
import wave
from contextlib import contextmanager
from dataclasses import asdict
from enum import IntEnum
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, TextIO

from . import (DEFAULT_PORT, SAMPLE_RATE, AuthError, Client, DeviceError, DeviceKind, EventType, InputMode,
               InvalidArgument, LibraryError, NetworkError, NotFound, ProtocolError, Rejected, SpeakerBlock, StateError,
               StreamKind, Timeout,
               VersionMismatch, VoiceCatError, __version__, list_devices)


class ExitCode(IntEnum):
    """What the command's exit status means (``_EXIT_MEANINGS``)."""

    OK = 0
    FAILED = 1
    USAGE = 2
    UNREACHABLE = 3
    AUTH = 4
    REFUSED = 5
    DEVICE = 6
    FILE = 7
    LIBRARY = 8
    INTERRUPTED = 130


_EXIT_MEANINGS = {
    ExitCode.OK: "Done.",
    ExitCode.FAILED: "Any other failure (the message says which).",
    ExitCode.USAGE: "Bad command line.",
    ExitCode.UNREACHABLE: "The server could not be reached or did not answer (network, timeout, protocol, version).",
    ExitCode.AUTH: "Wrong password, or the server's fingerprint is not the pinned one.",
    ExitCode.REFUSED: "The server refused: username taken, server full, no such channel, a limit.",
    ExitCode.DEVICE: "An audio device could not be opened.",
    ExitCode.FILE: "The input file cannot be read or is not 16-bit PCM WAV at 8000..192000 Hz, or the output "
                   "cannot be written.",
    ExitCode.LIBRARY: "libvoicecat could not be loaded.",
    ExitCode.INTERRUPTED: "Stopped with Ctrl-C (record writes what it recorded until then).",
}

_EXIT_HELP = "exit status:\n" + "\n".join(f"  {code.value:<4} {_EXIT_MEANINGS[code]}" for code in ExitCode)


class CommandError(Exception):
    """A failure with the exit code it maps to."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _exit_code_for(error: VoiceCatError) -> ExitCode:
    if isinstance(error, (NetworkError, Timeout, ProtocolError, VersionMismatch)):
        return ExitCode.UNREACHABLE
    if isinstance(error, AuthError):
        return ExitCode.AUTH
    if isinstance(error, (Rejected, NotFound)):
        return ExitCode.REFUSED
    if isinstance(error, DeviceError):
        return ExitCode.DEVICE
    if isinstance(error, InvalidArgument):  # every argument came from the command line
        return ExitCode.USAGE
    return ExitCode.FAILED


# ---- Output ------------------------------------------------------------------------------


class Progress:
    """A progress line on stderr: rewritten in place on a terminal, one line per step
    otherwise (only when asked with --progress always)."""

    def __init__(self, mode: str, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.enabled = mode == "always" or (mode == "auto" and self.tty)
        self._last = -1

    def update(self, label: str, done: float, total: float) -> None:
        """Shows ``done`` of ``total`` seconds (a line per whole second off a terminal)."""
        if not self.enabled:
            return
        if self.tty:
            width = 30
            filled = int(width * min(1.0, done / total)) if total > 0 else width
            self.stream.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done:5.1f}/{total:.1f} s")
            self.stream.flush()
        elif int(done) != self._last:
            self._last = int(done)
            self.stream.write(f"{label}: {done:.1f}/{total:.1f} s\n")
            self.stream.flush()

    def finish(self) -> None:
        """Ends the progress line."""
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, flush=True)


def _note(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(f"voicecat {args.command}: {text}", file=sys.stderr, flush=True)


# ---- Connecting -----------------------------------------------------------------------------


def _client(args: argparse.Namespace, name: str, **options: Any) -> Client:
    """A client with the trust and reconnect options of the command line."""
    return Client(name, external_playback=True, known_servers_path=args.known_servers,
                  auto_reconnect=getattr(args, "reconnect", False), **options)


def _connect(args: argparse.Namespace, client: Client, host: Optional[str] = None) -> str:
    """Connects as the options say; returns "host:port"."""
    host = host or args.host
    where = f"{host}:{args.port}"
    try:
        client.connect(host, args.port, args.user, password=args.password, fingerprint=args.fingerprint,
                       timeout=args.timeout, allow_unverified=args.allow_unverified)
    except AuthError as e:
        if args.fingerprint:
            try:
                seen = client.fingerprint
            except VoiceCatError:
                seen = "unknown"
            raise CommandError(ExitCode.AUTH, f"{where}: {e}; the server's fingerprint is {seen}") from e
        raise
    return where


def _session_end(client: Client) -> Optional[str]:
    """Why the client's session ended, if it has: the DISCONNECTED event's text (the
    events not read yet are looked through), else a generic reason when the library
    says the client is not connected (or is reconnecting); None while it is."""
    reason: Optional[str] = None
    try:
        while (event := client.poll_event(0)) is not None:
            if event.type == EventType.DISCONNECTED:
                reason = event.text or "the session ended"
        if reason is None:
            client.users()
    except StateError as e:
        reason = reason or str(e)
    except VoiceCatError:
        pass
    return reason


@contextmanager
def _session(where: str, client: Client) -> Iterator[None]:
    """A failure after the server went away (a stream, a channel or statistics gone
    with the session: NotFound, StateError) is reported as that: exit 3."""
    try:
        yield
    except (NotFound, StateError) as e:
        reason = _session_end(client)
        if reason is None:
            raise
        raise CommandError(ExitCode.UNREACHABLE, f"disconnected from {where}: {reason} ({e})") from e


def _join(args: argparse.Namespace, client: Client) -> None:
    try:
        client.join(args.channel)
    except NotFound as e:
        raise CommandError(ExitCode.REFUSED, f"no channel {args.channel!r} on the server ({e})") from e


# ---- speak ---------------------------------------------------------------------------------


def _riff_pcm(path: str) -> "tuple[bytes, int, int, int, int]":
    """(PCM, format tag, sample width in bytes, channels, rate) of a RIFF/WAVE file ("-":
    standard input), its chunks read directly: Python's wave module before 3.12 refuses
    WAVE_FORMAT_EXTENSIBLE headers, which sox and many recorders write for 16-bit PCM
    too. The format tag is 1 (PCM) for an extensible header whose sub-format is PCM.
    A data chunk whose size is 0 or a placeholder (a WAV written to a pipe, its size not
    known) is read to the end; one cut short is read as far as it goes, with a note."""
    if path == "-":
        return _riff_from(sys.stdin.buffer, "standard input")
    with open(path, "rb") as f:
        return _riff_from(f, path)


def _riff_from(f: "typing.BinaryIO", path: str) -> "tuple[bytes, int, int, int, int]":
    # (Chunks are skipped by reading them: standard input cannot seek.)
    head = f.read(12)
    if len(head) >= 12 and head[:4] in (b"RF64", b"BW64") and head[8:12] == b"WAVE":
        raise CommandError(ExitCode.FILE, f"{path}: an RF64 (64-bit) WAV file is not read; convert it: "
                                          f"sox {path} -b 16 out.wav")
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise CommandError(ExitCode.FILE, f"{path}: not a WAV file (no RIFF/WAVE header)")
    fmt: Optional[bytes] = None
    while True:
        chunk = f.read(8)
        if len(chunk) < 8:
            raise CommandError(ExitCode.FILE, f"{path}: not a complete WAV file (no {'data' if fmt else 'fmt'} chunk)")
        cid, size = chunk[:4], int.from_bytes(chunk[4:], "little")
        if cid == b"fmt ":
            fmt = f.read(size)
            if len(fmt) < 16:
                raise CommandError(ExitCode.FILE, f"{path}: its fmt chunk is {len(fmt)} bytes, too short")
        elif cid == b"data":
            if fmt is None:
                raise CommandError(ExitCode.FILE, f"{path}: its data comes before its fmt chunk")
            # A size of 0 or a placeholder near 2 GiB or 4 GiB (espeak-ng --stdout writes
            # 0x7FFFF000, others 0xFFFFFFFF): written to a pipe, the size was not known.
            unknown = size == 0 or size >= 0x7FFFF000
            data = f.read() if unknown else f.read(size)
            if not unknown and len(data) < size:
                print(f"voicecat: {path}: its header gives {size} bytes of audio, the file holds {len(data)} "
                      f"(cut short?); what it holds is used", file=sys.stderr, flush=True)
            break
        else:
            f.read(size + (size & 1))  # chunks are padded to an even size
        if cid == b"fmt " and size & 1:
            f.read(1)
    tag = int.from_bytes(fmt[0:2], "little")
    channels = int.from_bytes(fmt[2:4], "little")
    rate = int.from_bytes(fmt[4:8], "little")
    bits = int.from_bytes(fmt[14:16], "little")
    if tag == 0xFFFE:  # WAVE_FORMAT_EXTENSIBLE: the sub-format GUID starts with the tag
        if len(fmt) < 26:
            raise CommandError(ExitCode.FILE, f"{path}: an extensible fmt chunk of {len(fmt)} bytes has no sub-format")
        tag = int.from_bytes(fmt[24:26], "little")
    width = (bits + 7) // 8
    if channels > 0 and width > 0:
        data = data[:len(data) - len(data) % (channels * width)]  # a cut-off last frame
    return data, tag, width, channels, rate


def _read_wav(path: str) -> "tuple[bytes, int, int]":
    """The file's PCM, channels and rate: 16-bit PCM, mono or stereo, 8000..192000 Hz
    (the library resamples to the channel's 48 kHz); plain or extensible WAV headers."""
    try:
        pcm, tag, width, channels, rate = _riff_pcm(path)
    except OSError as e:
        raise CommandError(ExitCode.FILE, f"{path}: cannot read it ({e.strerror or e})") from e
    fix = f"(convert: sox {path} -r 48000 -b 16 -c 1 out.wav)"
    if tag != 1:
        raise CommandError(ExitCode.FILE, f"{path}: sample format {tag:#06x} is not integer PCM; need 16-bit PCM {fix}")
    if width != 2 or not 8000 <= rate <= 192000 or channels not in (1, 2):
        raise CommandError(ExitCode.FILE, f"{path}: {rate} Hz, {8 * width}-bit, {channels} channels; need "
                           f"16-bit mono or stereo at 8000..192000 Hz {fix}")
    if sys.byteorder != "little":  # WAV samples are little-endian; the library takes native int16
        swapped = array.array("h", pcm)
        swapped.byteswap()
        pcm = swapped.tobytes()
    return pcm, channels, rate


def cmd_speak(args: argparse.Namespace) -> ExitCode:
    """Speaks a WAV file into the channel in real time."""
    pcm, channels, rate = _read_wav(args.file)
    frames = len(pcm) // (2 * channels)
    seconds = frames / rate
    kind = StreamKind[args.kind.upper()]
    progress = Progress(args.progress)
    with _client(args, "voicecat speak") as client:
        where = _connect(args, client)
        _join(args, client)
        if kind == StreamKind.MIC and args.gate == "off":
            client.set_input_mode(InputMode.CONTINUOUS)
        sent_before = client.connection_stats().packets_out
        with _session(where, client), client.start_stream(kind, channels, sample_rate=rate) as stream:
            _note(args, f"speaking {args.file} ({seconds:.2f} s) into {args.channel} on {where}")
            # The library sends what is fed at real time; keep about a second queued.
            second = rate * 2 * channels
            fed = 0
            while fed < len(pcm) or stream.queued_ms > 0:
                if fed < len(pcm) and stream.queued_ms < 1000:
                    stream.feed(pcm[fed:fed + second])
                    fed = min(len(pcm), fed + second)
                progress.update("speak", max(0.0, fed / second - stream.queued_ms / 1000), seconds)
                time.sleep(0.05)
            stream.drain(timeout=5)
            progress.update("speak", seconds, seconds)
            progress.finish()
            time.sleep(args.tail)  # listeners play out what they buffered before the stream goes
        stats = client.connection_stats()
        _say(args, f"spoke {seconds:.2f} s from {args.file}: {stats.packets_out - sent_before} packets "
                   f"to {args.channel} on {where}")
        with _session(where, client):
            client.disconnect()
    return ExitCode.OK


# ---- record --------------------------------------------------------------------------------


class _Speaker:
    """What --per-speaker keeps of one remote stream: its blocks, placed on the mix's
    timeline (the frames of the mix recorded before its first block become silence)."""

    def __init__(self, ssrc: int, user_id: int, start_frame: int) -> None:
        self.ssrc = ssrc
        self.user_id = user_id
        self.start_frame = start_frame
        self.chunks: List[bytes] = []
        self.username = ""


def _speaker_path(out: str, username: str, ssrc: int) -> str:
    """OUT.wav -> OUT-<user>-<ssrc>.wav (characters other than ASCII letters, digits, '.', '_'
    and '-' in the user name become '_')."""
    base, ext = os.path.splitext(out)
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", username) or "user"
    return f"{base}-{safe}-{ssrc}{ext or '.wav'}"


def _write_wav(path: str, pcm: bytes, rate: int, channels: int) -> None:
    """Writes the WAV beside `path` and renames it into place: an interrupted write
    leaves the file as it was, never half-written."""
    part = path + ".part"
    try:
        with wave.open(part, "wb") as w:
            w.setnchannels(channels)
            w.setsampwidth(2)
            w.setframerate(rate)
            w.writeframes(pcm)
        os.replace(part, path)
    except BaseException as e:
        try:
            os.unlink(part)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise CommandError(ExitCode.FILE, f"{path}: cannot write ({e})") from e
        raise


def cmd_record(args: argparse.Namespace) -> ExitCode:
    """Records the channel's final mix to a WAV file (48 kHz stereo unless --rate /
    --channels say otherwise). With --per-speaker it also writes each remote stream
    heard, before mixing, to OUT-<user>-<ssrc>.wav next to OUT.wav (same format and
    length as the mix, silence before the stream appeared and after it went)."""
    if args.seconds <= 0:
        raise CommandError(ExitCode.USAGE, "--seconds must be positive")
    if not 8000 <= args.rate <= 192000:
        raise CommandError(ExitCode.USAGE, f"--rate must be 8000..192000 Hz, not {args.rate}")
    rate, channels = args.rate, args.channels
    frame_bytes = 2 * channels
    wanted = int(round(args.seconds * rate))
    chunks: List[bytes] = []
    have = [0]
    done = threading.Event()
    talkers: Set[int] = set()
    speakers: Dict[int, _Speaker] = {}

    def on_mix(pcm: bytes, frames: int) -> None:
        if have[0] < wanted:
            chunks.append(pcm)
            have[0] += frames
            if have[0] >= wanted:
                done.set()

    def on_speaker(block: SpeakerBlock) -> None:
        if have[0] >= wanted:
            return
        speaker = speakers.get(block.ssrc)
        if speaker is None:
            speaker = speakers[block.ssrc] = _Speaker(block.ssrc, block.user_id, have[0])
        speaker.chunks.append(block.pcm)

    if not args.out:
        raise CommandError(ExitCode.USAGE, "OUT.wav must name a file (it is empty)")
    if os.path.isdir(args.out):
        raise CommandError(ExitCode.FILE, f"{args.out}: cannot write (it is a directory)")
    try:  # fail on an unwritable output now, not after the recording (and leave OUT.wav as it is)
        open(args.out + ".part", "wb").close()
        os.unlink(args.out + ".part")
    except OSError as e:
        raise CommandError(ExitCode.FILE, f"{args.out}: cannot write ({e})") from e
    progress = Progress(args.progress)
    with _client(args, "voicecat record") as client:
        if (rate, channels) != (SAMPLE_RATE, 2):
            client.set_output_format(rate, channels)
        where = _connect(args, client)
        _join(args, client)
        if args.per_speaker:
            client.set_speaker_sink(on_speaker)
        client.set_sink(on_mix)
        _note(args, f"recording {args.seconds:g} s of {args.channel} on {where} to {args.out}")
        deadline = time.monotonic() + args.seconds + 10
        names: Dict[int, str] = {}
        # Ctrl-C, or the session or the mix lost, ends the recording early: what was
        # recorded until then is still written, then the error is reported.
        stopped_by: Optional[BaseException] = None
        try:
            while not done.is_set():
                if time.monotonic() > deadline:
                    raise CommandError(ExitCode.FAILED, "the mix stopped coming")
                for event in client.events(timeout=0.1):
                    logging.getLogger("voicecat.cli").info("%s", event)
                    if event.type == EventType.TALK_START:
                        talkers.add(event.user_id)
                    elif event.type == EventType.DISCONNECTED:
                        raise CommandError(ExitCode.UNREACHABLE, f"disconnected from {where}: {event.text}")
                    elif event.type in (EventType.RECONNECTING, EventType.RECONNECTED):
                        _note(args, f"{event}")
                if args.per_speaker and any(s.user_id not in names for s in list(speakers.values())):
                    names.update((s.user_id, s.username) for s in client.remote_streams())
                progress.update("record", have[0] / rate, args.seconds)
        except (KeyboardInterrupt, CommandError, VoiceCatError) as e:
            stopped_by = e
        progress.finish()
        client.set_sink(None)
        if args.per_speaker:
            client.set_speaker_sink(None)
            if any(s.user_id not in names for s in speakers.values()):
                try:
                    names.update((u.user_id, u.username) for u in client.users())
                except VoiceCatError:  # the session is gone: the files are named by user id
                    pass
        try:
            client.disconnect()
        except VoiceCatError:  # already disconnected
            pass
    wanted = min(wanted, have[0])  # all of it, or what came before the stop
    data = b"".join(chunks)[:wanted * frame_bytes]
    _write_wav(args.out, data, rate, channels)
    _say(args, f"recorded {len(data) / frame_bytes / rate:.2f} s to {args.out} "
               f"(peak {_peak_dbfs(data):.1f} dBFS, {len(talkers)} talker(s) heard)")
    for speaker in sorted(speakers.values(), key=lambda s: s.start_frame):
        pcm = (bytes(speaker.start_frame * frame_bytes) + b"".join(speaker.chunks))[:wanted * frame_bytes]
        pcm += bytes(wanted * frame_bytes - len(pcm))
        path = _speaker_path(args.out, names.get(speaker.user_id, f"user{speaker.user_id}"), speaker.ssrc)
        _write_wav(path, pcm, rate, channels)
        _say(args, f"recorded ssrc {speaker.ssrc} of user {speaker.user_id} to {path} "
                   f"(peak {_peak_dbfs(pcm):.1f} dBFS)")
    if stopped_by is not None:
        raise stopped_by
    return ExitCode.OK


def _peak_dbfs(pcm: bytes) -> float:
    samples = array.array("h", pcm)
    peak = max((abs(x) for x in samples), default=0)
    return 20 * math.log10(peak / 32768) if peak else -math.inf


# ---- devices, stats, ping ------------------------------------------------------------------


def cmd_devices(args: argparse.Namespace) -> ExitCode:
    """Lists the ALSA capture and playback devices."""
    kinds = None if args.kind == "all" else DeviceKind[args.kind.upper()]
    devices = list_devices(kinds)
    if args.json:
        print(json.dumps([{"kind": d.kind.name.lower(), "name": d.name, "description": d.description}
                          for d in devices], indent=2))
        return ExitCode.OK
    for d in devices:
        description = " ".join(d.description.split())
        print(f"{d.kind.name.lower():<9} {d.name:<32} {description}")
    return ExitCode.OK


def cmd_stats(args: argparse.Namespace) -> ExitCode:
    """Joins the channel, listens a while, prints connection and per-stream statistics."""
    progress = Progress(args.progress)
    with _client(args, "voicecat stats") as client:
        where = _connect(args, client)
        _join(args, client)
        client.set_sink(lambda pcm, frames: None)  # receive (and count) like a listener
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < args.seconds:
            progress.update("stats", elapsed, args.seconds)
            time.sleep(0.1)
        progress.finish()
        with _session(where, client):
            audio = client.channel_audio()
            conn = client.connection_stats()
            streams = [(s, client.stream_stats(s.ssrc)) for s in client.remote_streams()]
        fingerprint = client.fingerprint
        client.set_sink(None)
        with _session(where, client):
            client.disconnect()
    if args.json:
        print(json.dumps({"server": where, "fingerprint": fingerprint, "channel": args.channel,
                          "audio": _plain(asdict(audio)), "connection": asdict(conn),
                          "streams": [{**_plain(asdict(s)), "stats": asdict(st)} for s, st in streams]}, indent=2))
        return ExitCode.OK
    print(f"server {where}, fingerprint {fingerprint}")
    print(f"channel {args.channel}: {audio.mode.name.lower()}, {audio.bitrate_bps // 1000} kbps, "
          f"{audio.frame_us / 1000:g} ms frames, {audio.application.name.lower()}, fec {'on' if audio.fec else 'off'}")
    print(f"connection: media rtt {conn.media_rtt_ms} ms, control rtt {conn.control_rtt_ms} ms, "
          f"{conn.packets_in} packets / {conn.bytes_in} bytes in, {conn.packets_out} packets / {conn.bytes_out} bytes "
          f"out, {conn.auth_failures} auth failures, voice {'connected' if conn.voice_connected else 'down'}")
    if not streams:
        print("no remote streams")
    for s, st in streams:
        print(f"stream ssrc {s.ssrc} ({s.username}, {s.kind.name.lower()}, {s.channels} ch): "
              f"{st.packets_received} received, {st.packets_lost} lost, {st.late} late, {st.duplicates} duplicates, "
              f"{st.fec_recovered} fec, {st.plc_frames} plc, depth {st.current_depth_ms}/{st.target_depth_ms} ms"
              f"{', talking' if st.talking else ''}")
    return ExitCode.OK


def _plain(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: (v.name.lower() if isinstance(v, IntEnum) else _plain(v) if isinstance(v, dict) else v)
            for k, v in d.items()}


def cmd_ping(args: argparse.Namespace) -> ExitCode:
    """Connects (handshake), shows the fingerprint, and measures the round-trip time."""
    interval_ms = max(20, int(args.interval * 1000))
    with _client(args, "voicecat ping", keepalive_ms=interval_ms) as client:
        start = time.monotonic()
        where = _connect(args, client, host=args.target)
        connect_ms = (time.monotonic() - start) * 1000
        fingerprint = client.fingerprint
        samples: List[int] = []
        seen = client.connection_stats().packets_in
        deadline = time.monotonic() + args.count * args.interval + args.timeout
        checked = time.monotonic()
        while len(samples) < args.count and time.monotonic() < deadline:
            time.sleep(0.005)
            stats = client.connection_stats()
            if stats.packets_in != seen:  # a keepalive echo came back
                seen = stats.packets_in
                samples.append(stats.media_rtt_ms)
            elif time.monotonic() - checked > 0.1:  # the server gone: no echo will come
                checked = time.monotonic()
                if (reason := _session_end(client)) is not None:
                    raise CommandError(ExitCode.UNREACHABLE, f"disconnected from {where}: {reason}")
        final = client.connection_stats()
        control_rtt = final.control_rtt_ms
        with _session(where, client):
            client.disconnect()
    if args.json:
        print(json.dumps({"server": where, "connect_ms": round(connect_ms, 3), "fingerprint": fingerprint,
                          "media_rtt_ms": samples, "control_rtt_ms": control_rtt,
                          "keepalives_sent": final.keepalives_sent, "keepalives_lost": final.keepalives_lost},
                         indent=2))
    else:
        print(f"connected to {where} in {connect_ms:.1f} ms (TCP, handshake, Hello, UDP binding)")
        print(f"server fingerprint {fingerprint}")
        if samples:
            print(f"media rtt: {len(samples)} keepalive echoes, min {min(samples)} / "
                  f"avg {sum(samples) / len(samples):.1f} / max {max(samples)} ms (whole ms; under 1 ms reads 1); "
                  f"{final.keepalives_lost} of {final.keepalives_sent} keepalives lost")
        print(f"control rtt: {control_rtt} ms (last Ping/Pong)")
    if not samples:
        raise CommandError(ExitCode.UNREACHABLE, f"{where}: the media path did not answer a keepalive")
    return ExitCode.OK


# ---- The parser ----------------------------------------------------------------------------


def _port(text: str) -> int:
    """--port (and VOICECAT_PORT, its default): 0 (the default port) to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0..65535 (--port or VOICECAT_PORT), not {text!r}")
    return port


def _seconds(least: float, inclusive: bool = True) -> Callable[[str], float]:
    """A finite number of seconds of at least ``least`` (more than it, unless ``inclusive``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < least or (value == least and not inclusive):
            bound = f"at least {least:g}" if inclusive else f"more than {least:g}"
            raise argparse.ArgumentTypeError(f"must be a number of seconds {bound}, not {text!r}")
        return value
    parse.__name__ = "seconds"
    return parse


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


def _server_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("server")
    # An empty VOICECAT_HOST, _PORT or _USER is unset (VOICECAT_PORT= was a usage error).
    g.add_argument("--host", default=os.environ.get("VOICECAT_HOST") or "127.0.0.1", help="server (default %(default)s)")
    g.add_argument("--port", type=_port, default=os.environ.get("VOICECAT_PORT") or str(DEFAULT_PORT),
                   help="server port (default %(default)s; 0: the default port)")
    g.add_argument("--user", default=os.environ.get("VOICECAT_USER") or f"{_login()}-{os.getpid()}",
                   help="username, unique on the server (default %(default)s)")
    g.add_argument("--password", default=os.environ.get("VOICECAT_PASSWORD"),
                   help="server password (or VOICECAT_PASSWORD, which ps does not show)")
    g.add_argument("--fingerprint", default=os.environ.get("VOICECAT_FINGERPRINT"),
                   help="pin the server's key: 64 hex digits (default: trust on first use)")
    g.add_argument("--channel", default="Lobby", help="channel to join (default %(default)s)")
    g.add_argument("--timeout", type=_seconds(0, inclusive=False), default=5.0,
                   help="connect timeout in seconds (default %(default)s)")
    g.add_argument("--known-servers", metavar="FILE", default=os.environ.get("VOICECAT_KNOWN_SERVERS"),
                   help="trust on first use: the known-servers file (default: the per-user one; '' for none)")
    g.add_argument("--allow-unverified", action="store_true",
                   help="connect without a pinned fingerprint or known-servers file (identity unchecked)")
    return p


def _login() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name in this environment
        return "voicecat"


def _common_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-v", "--verbose", action="count", default=0, help="log the library's lines (-vv: debug)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print only errors and the report a command exists for (ping, stats, devices)")
    p.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                   help="progress on stderr (auto: on a terminal)")
    return p


def _plain_text(text: str) -> str:
    """A docstring's text as --help shows it: reST markup (``literal``, :role:`name`) as
    plain text."""
    text = re.sub(r":[a-z]+(?::[a-z]+)?:`~?([^`]+)`", r"\1", text)   # :func:`name`, :meth:`~a.b`
    return re.sub(r"``(.+?)``", r"\1", text, flags=re.S)              # ``literal``


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``voicecat`` command."""
    common, server = _common_options(), _server_options()
    description = _plain_text(__doc__.split("\n\n")[0]) if __doc__ else None
    parser = argparse.ArgumentParser(prog="voicecat", description=description,
                                     epilog=_EXIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"voicecat {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], ExitCode], parents: Sequence[argparse.ArgumentParser],
            ) -> argparse.ArgumentParser:
        doc = _plain_text(inspect.cleandoc(fn.__doc__ or ""))
        p = sub.add_parser(name, parents=list(parents), help=doc.split("\n\n")[0].split(". ")[0].replace("\n", " "),
                           description=doc, epilog=_EXIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(func=fn)
        return p

    p = add("speak", cmd_speak, [common, server])
    p.add_argument("file", metavar="FILE.wav", help="16-bit mono or stereo WAV at any rate 8000..192000 Hz (-: standard input)")
    p.add_argument("--kind", choices=["mic", "screen_audio", "aux_device"], default="mic", help="stream kind")
    p.add_argument("--gate", choices=["off", "vad"], default="off",
                   help="MIC input gate: off sends everything (default), vad only what is louder than the threshold")
    p.add_argument("--tail", type=_seconds(0), default=0.5, help="seconds to keep the stream after the end (default 0.5)")

    p = add("record", cmd_record, [common, server])
    p.add_argument("out", metavar="OUT.wav", help="where to write the mix (16-bit WAV)")
    p.add_argument("--seconds", type=_seconds(0, inclusive=False), required=True, help="how much to record")
    p.add_argument("--per-speaker", action="store_true",
                   help="also write each remote stream, before mixing, to OUT-<user>-<ssrc>.wav (user: the "
                        "publisher's name, characters outside [A-Za-z0-9._-] as '_'), aligned with OUT.wav")
    p.add_argument("--rate", type=int, default=SAMPLE_RATE, metavar="HZ",
                   help="sample rate of the files, 8000..192000 (default %(default)s)")
    p.add_argument("--channels", type=int, choices=[1, 2], default=2, help="1 or 2 (default %(default)s)")
    p.add_argument("--reconnect", action="store_true", help="reconnect by itself if the server goes away")

    p = add("devices", cmd_devices, [common])
    p.add_argument("--kind", choices=["all", "capture", "playback"], default="all")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("stats", cmd_stats, [common, server])
    p.add_argument("--seconds", type=_seconds(0), default=3.0, help="how long to listen first (default 3)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("ping", cmd_ping, [common, server])
    p.add_argument("target", metavar="HOST", nargs="?", help="server to ping (default: --host)")
    p.add_argument("--count", type=_count, default=4, help="keepalive echoes to time (default 4)")
    p.add_argument("--interval", type=_seconds(0.05), default=0.2,
                   help="seconds between keepalives, at least 0.05 (default 0.2)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _fail(args: Optional[argparse.Namespace], code: ExitCode, message: str) -> ExitCode:
    name = f"voicecat {args.command}" if args is not None else "voicecat"
    print(f"{name}: {message}", file=sys.stderr, flush=True)
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line ``argv`` (default: sys.argv[1:]); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help, --version, or a usage error (2)
        return int(e.code) if isinstance(e.code, int) else ExitCode.USAGE
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG if args.verbose > 1 else logging.INFO,
                            format="%(name)s: %(levelname)s: %(message)s")
    try:
        return int(args.func(args))
    except CommandError as e:
        return _fail(args, e.code, str(e))
    except LibraryError as e:
        return _fail(args, ExitCode.LIBRARY, str(e))
    except VoiceCatError as e:
        return _fail(args, _exit_code_for(e), str(e))
    except KeyboardInterrupt:
        return _fail(args, ExitCode.INTERRUPTED, "interrupted")
    except BrokenPipeError:
        return ExitCode.FAILED


if __name__ == "__main__":
    sys.exit(main())
