"""Values the library reports or takes, as dataclasses (one per C struct)."""
from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

from . import _lib
from ._enums import ChannelMode, DeviceKind, ErrorCode, EventType, OpusApplication, StreamKind, UserChange


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _flag(value: object, what: str) -> bool:
    """A bool argument checked: a bool, 0 or 1 (numpy's too); TypeError for anything
    else (``muted="no"`` would otherwise be taken as True)."""
    if isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")):
        return bool(value)
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{what} must be a bool, not {type(value).__name__}") from None
    if number not in (0, 1):
        raise ValueError(f"{what} must be a bool (or 0 / 1), not {number}")
    return bool(number)


def _real(value: object, what: str) -> float:
    """A number argument checked: a real number (not a bool or a string)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    return float(value)


@dataclass(frozen=True)
class Event:
    """One event of a client (``vc_event``). Which fields are set depends on ``type``
    (see :class:`EventType`); the others are zero.

    ``kind`` is a :class:`StreamKind` for the stream and talk events (REMOTE_STREAM_ADDED
    / REMOVED, TALK_START / STOP, STREAM_STATE_UPDATE), a :class:`DeviceKind` for ERROR
    and DEVICE_RESTORED, a plain int otherwise. ``code`` is the C field of the same
    name, which holds three kinds of value: for USER_UPDATED the :class:`UserChange`
    bits of what changed (also :attr:`changes`), for EVENTS_DROPPED how many events
    were dropped (a plain int, also :attr:`dropped`), for every other event an
    :class:`ErrorCode` (``OK`` unless the event reports a failure).
    """

    type: EventType
    code: Union[ErrorCode, UserChange, int]
    """An :class:`ErrorCode`; for USER_UPDATED the :class:`UserChange` bits; for
    EVENTS_DROPPED a count."""
    user_id: int
    ssrc: int
    stream_id: int
    channel_id: int
    kind: int
    channels: int
    muted: bool
    deafened: bool
    hold: bool
    text: str

    @classmethod
    def _from_c(cls, e: Any) -> "Event":
        type_ = EventType(e.type)
        kind: int = e.kind
        if type_ in _STREAM_EVENTS:
            kind = StreamKind(kind)
        elif type_ in (EventType.ERROR, EventType.DEVICE_RESTORED):
            kind = DeviceKind(kind)
        code: Union[ErrorCode, UserChange, int]
        if type_ == EventType.USER_UPDATED:
            code = UserChange(e.code)
        elif type_ == EventType.EVENTS_DROPPED:
            code = int(e.code)
        else:
            code = ErrorCode(e.code)
        return cls(type=type_, code=code, user_id=e.user_id, ssrc=e.ssrc, stream_id=e.stream_id,
                   channel_id=e.channel_id, kind=kind, channels=e.channels, muted=bool(e.muted),
                   deafened=bool(e.deafened), hold=bool(e.hold), text=_text(e.text))

    @property
    def changes(self) -> UserChange:
        """What a USER_UPDATED event reports as changed (empty for other events)."""
        return UserChange(self.code) if self.type == EventType.USER_UPDATED else UserChange(0)

    @property
    def dropped(self) -> int:
        """How many events an EVENTS_DROPPED event says were dropped (0 for other events)."""
        return int(self.code) if self.type == EventType.EVENTS_DROPPED else 0

    def __str__(self) -> str:
        parts = [self.type.name.lower()]
        for name in ("user_id", "ssrc", "stream_id", "channel_id", "channels"):
            value = getattr(self, name)
            if value:
                parts.append(f"{name}={value}")
        if self.type == EventType.USER_UPDATED:
            parts.append(f"changes={self.changes!r}")
        if self.type in (EventType.STREAM_STATE_UPDATE, EventType.SERVER_MUTE_STATE, EventType.USER_CONNECTED,
                         EventType.USER_UPDATED):
            parts.append(f"muted={self.muted}")
            parts.append(f"deafened={self.deafened}" if self.type != EventType.STREAM_STATE_UPDATE else f"hold={self.hold}")
        elif self.type == EventType.EVENTS_DROPPED:
            parts.append(f"dropped={self.dropped}")
        elif isinstance(self.code, ErrorCode) and self.code != ErrorCode.OK:
            parts.append(f"code={self.code.name}")
        if self.text:
            parts.append(repr(self.text))
        return " ".join(parts)


_STREAM_EVENTS = (EventType.REMOTE_STREAM_ADDED, EventType.REMOTE_STREAM_REMOVED, EventType.TALK_START,
                  EventType.TALK_STOP, EventType.STREAM_STATE_UPDATE, EventType.GATE_OPENED, EventType.GATE_CLOSED)


@dataclass(frozen=True)
class StreamStats:
    """Receive statistics of one remote stream (``vc_stream_stats``)."""

    packets_received: int
    packets_lost: int
    """Sequence gaps never filled."""
    duplicates: int
    """Replayed or repeated sequence numbers, dropped."""
    late: int
    """Dropped unplayed: arrived after their playout time, or dropped to shed excess
    delay (at a pause or a quiet frame when possible)."""
    underruns: int
    """The buffer ran dry mid-talkspurt."""
    fec_recovered: int
    plc_frames: int
    dred_recovered: int
    target_depth_ms: int
    current_depth_ms: int
    talking: bool

    @classmethod
    def _from_c(cls, s: Any) -> "StreamStats":
        return cls(packets_received=s.packets_received, packets_lost=s.packets_lost, duplicates=s.duplicates,
                   late=s.late, underruns=s.underruns, fec_recovered=s.fec_recovered, plc_frames=s.plc_frames,
                   dred_recovered=s.dred_recovered, target_depth_ms=s.target_depth_ms,
                   current_depth_ms=s.current_depth_ms, talking=bool(s.talking))


@dataclass(frozen=True)
class ConnectionStats:
    """Connection statistics (``vc_connection_stats``)."""

    media_rtt_ms: int
    """From the last keepalive echo, whole ms (under 1 ms reads 1); 0 before the first."""
    control_rtt_ms: int
    """From the last Ping/Pong, whole ms (under 1 ms reads 1); 0 before the first."""
    bytes_in: int
    bytes_out: int
    packets_in: int
    """UDP datagrams received: voice frames and keepalive echoes."""
    packets_out: int
    """Voice frames sent."""
    auth_failures: int
    voice_connected: bool
    keepalives_sent: int
    """Media-path keepalives sent this session (every 0.5 s while streams are active)."""
    keepalives_lost: int
    """Keepalives whose echo did not come within 2 s."""

    @classmethod
    def _from_c(cls, s: Any) -> "ConnectionStats":
        return cls(media_rtt_ms=s.media_rtt_ms, control_rtt_ms=s.control_rtt_ms, bytes_in=s.bytes_in,
                   bytes_out=s.bytes_out, packets_in=s.packets_in, packets_out=s.packets_out,
                   auth_failures=s.auth_failures, voice_connected=bool(s.voice_connected),
                   keepalives_sent=s.keepalives_sent, keepalives_lost=s.keepalives_lost)


@dataclass(frozen=True)
class SendStats:
    """Send statistics and loss protection of a published stream (``vc_send_stats``).

    The stream's in-band FEC and the expected loss its encoder is told start at the
    channel's ``fec`` / ``expected_packet_loss`` and then follow the loss its listeners
    report (summed up by the server): FEC off on a clean path, on and sized to the
    measured loss when isolated losses are seen, never above the channel's setting."""

    ssrc: int
    packets_sent: int
    """Frames sent (empty DTX frames are not sent)."""
    bytes_sent: int
    """Their datagram bytes, header and tag included."""
    fec_packets: int
    """Frames sent that carried in-band FEC."""
    fec: bool
    """The encoder's in-band FEC is on."""
    packet_loss_perc: int
    """The expected loss the encoder is told, percent."""
    channel_fec: bool
    """The channel's fec: ceiling and start."""
    channel_expected_loss: int
    """The channel's expected_packet_loss: ceiling and start, percent."""
    feedback_received: int
    """Loss feedback messages the server sent for this stream."""
    protection_changes: int
    """Times the protection changed (EventType.PROTECTION_CHANGED)."""
    listeners: int
    """Listener reports the last feedback acted on summed up (0: none yet)."""
    reported_expected: int
    """The last feedback acted on: frames expected in its window..."""
    reported_lost: int
    """...lost before any recovery..."""
    reported_isolated: int
    """...and of those, lost alone (what in-band FEC rebuilds whole)."""
    frames_dropped: int
    """Frames that came due while nothing could be sent (an auto-reconnect gap) and were
    dropped: how much of a real-time feed nobody heard."""
    frames_sent_path_lost: int
    """Frames sent while the media path was lost (after VOICE_DISCONNECTED, before
    VOICE_RECONNECTED): sent, but most likely heard by nobody."""
    device_overruns: int
    """A device stream: times its capture device overran (audio captured and lost
    before it was read: a gap listeners hear that no network caused); 0 for a feed."""
    device_failures: int
    """A device stream: times its capture device failed or stopped delivering (each an
    ERROR event; it is reopened on a backoff)."""

    @classmethod
    def _from_c(cls, s: Any) -> "SendStats":
        return cls(ssrc=s.ssrc, packets_sent=s.packets_sent, bytes_sent=s.bytes_sent, fec_packets=s.fec_packets,
                   fec=bool(s.fec), packet_loss_perc=s.packet_loss_perc, channel_fec=bool(s.channel_fec),
                   channel_expected_loss=s.channel_expected_loss, feedback_received=s.feedback_received,
                   protection_changes=s.protection_changes, listeners=s.listeners,
                   reported_expected=s.reported_expected, reported_lost=s.reported_lost,
                   reported_isolated=s.reported_isolated, frames_dropped=s.frames_dropped,
                   frames_sent_path_lost=s.frames_sent_path_lost, device_overruns=s.device_overruns,
                   device_failures=s.device_failures)


@dataclass(frozen=True)
class PlaybackStats:
    """The playback device's losses and fill (``vc_playback_stats``). The counts are over
    every playback device the client has played on, for its life (0 for a client that
    never played on a device)."""

    device_underruns: int
    """Times the playback device ran dry and was restarted (a gap the listener heard
    that no network caused: the client was not scheduled in time, or the card's
    position jumped)."""
    device_failures: int
    """Times it failed, could not be opened at connect, or stopped playing (each an ERROR
    event; it is retried on a backoff)."""
    device_buffered_ms: int
    """What the open sound card held just after the last block was written (how long
    the newest audio waits in it, beyond the card's own latency); 0 while none is open
    or for a PCM that does not play in real time."""

    @classmethod
    def _from_c(cls, s: Any) -> "PlaybackStats":
        return cls(device_underruns=s.device_underruns, device_failures=s.device_failures,
                   device_buffered_ms=s.device_buffered_ms)


@dataclass(frozen=True)
class RemoteStreamSettings:
    """This listener's own settings for one remote stream (``vc_remote_stream``)."""

    gain: float = 1.0
    """Linear, 0..4."""
    muted: bool = False
    noise_reduction: bool = False

    @classmethod
    def _from_c(cls, s: Any) -> "RemoteStreamSettings":
        return cls(gain=s.gain, muted=bool(s.muted), noise_reduction=bool(s.noise_reduction))

    def _to_c(self) -> _lib.vc_remote_stream:
        return _lib.vc_remote_stream(_real(self.gain, "gain"), int(_flag(self.muted, "muted")),
                                     int(_flag(self.noise_reduction, "noise_reduction")))


@dataclass(frozen=True)
class RemoteStreamInfo:
    """A remote stream being received (``vc_remote_stream_info``)."""

    ssrc: int
    user_id: int
    stream_id: int
    kind: StreamKind
    channels: int
    talking: bool
    settings: RemoteStreamSettings
    username: str
    level_rms_dbfs: float = -120.0
    """The decoded audio's RMS over the last rendered block, in dBFS (-120: silent, or
    nothing renders the mix)."""
    level_peak_dbfs: float = -120.0
    """That block's peak sample, in dBFS."""

    @classmethod
    def _from_c(cls, i: Any) -> "RemoteStreamInfo":
        return cls(ssrc=i.ssrc, user_id=i.user_id, stream_id=i.stream_id, kind=StreamKind(i.kind),
                   channels=i.channels, talking=bool(i.talking), settings=RemoteStreamSettings._from_c(i.settings),
                   username=_text(i.username), level_rms_dbfs=i.level_rms_dbfs, level_peak_dbfs=i.level_peak_dbfs)


@dataclass(frozen=True)
class AudioConfig:
    """A channel's Opus configuration (``vc_audio_config``)."""

    codec: int
    """0 = Opus."""
    mode: ChannelMode
    sample_rate: int
    """Caps the encoded bandwidth; PCM is always 48 kHz."""
    bitrate_bps: int
    frame_us: int
    application: OpusApplication
    fec: bool
    expected_packet_loss: int
    """Percent."""
    dtx: bool
    complexity: int
    dred: bool

    @property
    def frame_samples(self) -> int:
        """Sample frames per Opus frame at 48 kHz (960 for 20 ms)."""
        return self.frame_us * 48 // 1000

    @classmethod
    def _from_c(cls, a: Any) -> "AudioConfig":
        return cls(codec=a.codec, mode=ChannelMode(a.mode), sample_rate=a.sample_rate, bitrate_bps=a.bitrate_bps,
                   frame_us=a.frame_us, application=OpusApplication(a.application), fec=bool(a.fec),
                   expected_packet_loss=a.expected_packet_loss, dtx=bool(a.dtx), complexity=a.complexity,
                   dred=bool(a.dred))


@dataclass(frozen=True)
class SendProcessing:
    """Talker-side SpeexDSP processing of a MIC stream (``vc_send_processing``)."""

    noise_suppression: bool = False
    agc: bool = False
    echo_cancellation: bool = False
    agc_level: float = 0.125
    """AGC target: speech RMS as a fraction of full scale, in (0, 1]."""

    @classmethod
    def _from_c(cls, p: Any) -> "SendProcessing":
        return cls(noise_suppression=bool(p.noise_suppression), agc=bool(p.agc),
                   echo_cancellation=bool(p.echo_cancellation), agc_level=p.agc_level)

    def _to_c(self) -> _lib.vc_send_processing:
        return _lib.vc_send_processing(int(_flag(self.noise_suppression, "noise_suppression")), int(_flag(self.agc, "agc")),
                                       int(_flag(self.echo_cancellation, "echo_cancellation")),
                                       _real(self.agc_level, "agc_level"))


@dataclass(frozen=True)
class DeviceInfo:
    """An ALSA PCM usable as a capture device or as the playback device (``vc_device_info``)."""

    kind: DeviceKind
    name: str
    description: str
    is_monitor: bool = False
    """A capture device that records what the system plays (for SCREEN_AUDIO streams)."""

    @classmethod
    def _from_c(cls, kind: DeviceKind, d: Any) -> "DeviceInfo":
        return cls(kind=kind, name=_text(d.name), description=_text(d.description), is_monitor=bool(d.is_monitor))


@dataclass(frozen=True)
class UserStream:
    """A stream a user publishes, in whichever channel (``vc_user_stream``)."""

    user_id: int
    stream_id: int
    """The publisher's stream id."""
    ssrc: int
    """As in :class:`RemoteStreamInfo` where this client receives it."""
    kind: StreamKind
    muted: bool
    """The publisher's own state of the stream (:meth:`Stream.set_state`)."""
    hold: bool

    @classmethod
    def _from_c(cls, s: Any) -> "UserStream":
        return cls(user_id=s.user_id, stream_id=s.stream_id, ssrc=s.ssrc, kind=StreamKind(s.kind), muted=bool(s.muted),
                   hold=bool(s.hold))


@dataclass(frozen=True)
class User:
    """A user on the server (``vc_user_info``), with the streams it publishes."""

    user_id: int
    username: str
    channel_id: Optional[int]
    """The channel the user is in; None when in none."""
    server_muted: bool
    """The server drops this user's audio."""
    server_deafened: bool
    """The server sends this user no audio."""
    streams: Tuple[UserStream, ...]
    is_self: bool
    """This client's own session."""

    @classmethod
    def _from_c(cls, u: Any, streams: Tuple[UserStream, ...]) -> "User":
        return cls(user_id=u.user_id, username=_text(u.username), channel_id=u.channel_id or None,
                   server_muted=bool(u.server_muted), server_deafened=bool(u.server_deafened), streams=streams,
                   is_self=bool(u.is_self))


@dataclass(frozen=True)
class Channel:
    """A channel on the server (``vc_channel_info``), with the users in it."""

    channel_id: int
    name: str
    audio: AudioConfig
    """What streams published there are encoded with."""
    members: Tuple[int, ...]
    """User ids of the users in it, ascending."""
    is_current: bool
    """The channel this client is in."""

    @classmethod
    def _from_c(cls, c: Any, members: Tuple[int, ...]) -> "Channel":
        return cls(channel_id=c.channel_id, name=_text(c.name), audio=AudioConfig._from_c(c.audio), members=members,
                   is_current=bool(c.is_current))


@dataclass(frozen=True)
class InputLevel:
    """The level of a published stream (``vc_get_input_level``): its last frame after
    send processing, before the input gate, in dBFS (full scale 32768, so a full-scale
    sine reads rms -3.01, peak 0). Both are -120 for silence and when no frame went
    through the send path in the last 250 ms."""

    rms_dbfs: float
    """The frame's RMS."""
    peak_dbfs: float
    """The frame's largest sample."""


@dataclass(frozen=True)
class OutputFormat:
    """The format of the PCM a client hands out (mix sink, :meth:`Client.read_mix`, the
    per-speaker sink, recordings): see :meth:`Client.set_output_format`."""

    sample_rate: int = 48000
    channels: int = 2


@dataclass(frozen=True)
class SpeakerBlock:
    """One block of one remote stream, as the per-speaker sink gets it
    (:meth:`Client.set_speaker_sink`): its decoded audio after this listener's noise
    reduction, before gain, mute and mixing, in the client's :class:`OutputFormat`."""

    ssrc: int
    """The remote stream."""
    user_id: int
    """Who publishes it (see :meth:`Client.users`)."""
    kind: StreamKind
    pcm: Any
    """``bytes`` of ``frames * channels`` native int16 samples, interleaved; or, for a
    sink set with ``numpy=True``, a read-only int16 numpy view of shape
    (frames, channels) that is valid only during the call (copy what you keep)."""
    frames: int
    """Sample frames in ``pcm``."""
    channels: int
    """Interleaved channels in ``pcm`` (a mono stream in a stereo format has L = R)."""
