"""The C API's enumerations and result codes as IntEnums (values as in include/voicecat.h)."""
from __future__ import annotations

from enum import IntEnum, IntFlag
from typing import Any, Optional, TypeVar

_E = TypeVar("_E", bound="_OpenIntEnum")


class _OpenIntEnum(IntEnum):
    """An IntEnum that keeps values it does not know (a newer library may send them)
    as pseudo-members named ``UNKNOWN_<value>`` instead of raising."""

    @classmethod
    def _missing_(cls, value: object) -> Optional[Any]:
        if not isinstance(value, int):
            return None
        member = int.__new__(cls, value)
        member._name_ = f"UNKNOWN_{value}"
        member._value_ = value
        return member


class ErrorCode(_OpenIntEnum):
    """Result codes of the C API (``VC_OK``, ``VC_ERR_*``)."""

    OK = 0
    INVALID_ARG = -1
    STATE = -2
    NOT_FOUND = -3
    NETWORK = -4
    TIMEOUT = -5
    PROTOCOL = -6
    VERSION = -7
    AUTH = -8
    REJECTED = -9
    DEVICE = -10
    CODEC = -11
    NO_MEMORY = -12
    UNSUPPORTED = -13
    BUFFER_TOO_SMALL = -14


class StreamKind(_OpenIntEnum):
    """What a published stream carries (``vc_stream_kind``)."""

    MIC = 0
    """A microphone; gated by VAD or push-to-talk."""
    SCREEN_AUDIO = 1
    """System or desktop audio for listening together; never gated."""
    AUX_DEVICE = 2
    """A second capture device; never gated."""


class ChannelMode(_OpenIntEnum):
    """A channel's audio mode (``vc_channel_mode``)."""

    MONO = 0
    STEREO = 1


class OpusApplication(_OpenIntEnum):
    """The Opus application a channel encodes with (``vc_opus_application``)."""

    VOIP = 0
    AUDIO = 1
    LOWDELAY = 2


class InputMode(_OpenIntEnum):
    """How MIC streams are gated (``vc_input_mode``)."""

    VAD = 0
    """Voice activation: frame RMS over a threshold, with a hang time (the default)."""
    PTT = 1
    """Push-to-talk: only while :meth:`Client.set_push_to_talk` is on."""
    CONTINUOUS = 2
    """Always transmit."""


class DeviceKind(_OpenIntEnum):
    """Capture or playback (``vc_device_kind``)."""

    CAPTURE = 0
    PLAYBACK = 1


class EventType(_OpenIntEnum):
    """What an :class:`Event` reports (``vc_event_type``); the fields each one sets are
    listed in include/voicecat.h."""

    NONE = 0
    CONNECTED = 1
    """The session was accepted; text is the server name."""
    DISCONNECTED = 2
    """The session ended; code is the reason (OK when asked for), text the detail."""
    CHANNEL_JOINED = 3
    """channel_id joined; text is the channel name."""
    USER_JOINED = 4
    """user_id arrived; text is the username."""
    USER_LEFT = 5
    """user_id left."""
    REMOTE_STREAM_ADDED = 6
    """user_id, stream_id, ssrc, kind, channels of a stream now received."""
    REMOTE_STREAM_REMOVED = 7
    """user_id, stream_id, ssrc of a stream no longer received."""
    TALK_START = 8
    """ssrc, user_id, text = username: a talkspurt's first frame was played (while
    nothing renders the mix: frames started arriving). It is raised as the block
    holding that frame is rendered, so a sink or a pull may get that block before the
    event is read: a program recording a speaker from TALK_START on keeps a block or
    two from before it (the onset is there)."""
    TALK_STOP = 9
    """ssrc, user_id, text = username: the talkspurt's last frame was played
    ``talk_hangover_ms`` ago (or no frame came for that long)."""
    VOICE_DISCONNECTED = 10
    """The media path was lost (no keepalive echo); the client rebinds."""
    VOICE_RECONNECTED = 11
    """The media path is back with fresh keys."""
    SERVER_MUTE_STATE = 12
    """user_id, muted, deafened as the server decided."""
    STREAM_STATE_UPDATE = 13
    """ssrc, user_id, stream_id, kind, muted, hold, text = username: a remote publisher's
    own state of the stream (:meth:`Stream.set_state`)."""
    ERROR = 14
    """code, text: an asynchronous error (DEVICE: a device failed, kind and stream_id
    say which; PROTOCOL: a message from the server was refused, the session goes on)."""
    DEVICE_RESTORED = 15
    """A failed device is back: kind, stream_id, text is the device name."""
    RECONNECTING = 16
    """auto_reconnect: the control connection was lost (code, text say why); reconnecting
    with backoff. Remote streams are removed; local streams keep their ids."""
    RECONNECTED = 17
    """auto_reconnect: the session is back (channel re-joined, streams re-announced with
    new ssrcs); user_id is the new session's, text the server name."""
    GATE_OPENED = 18
    """Local: a MIC stream's input gate opened (stream_id, ssrc, kind); a talkspurt starts."""
    GATE_CLOSED = 19
    """Local: a MIC stream's input gate closed (stream_id, ssrc, kind); its last frame went out."""
    USER_CONNECTED = 20
    """user_id, channel_id, muted, deafened, text = username: a user logged in to the
    server (:meth:`Client.users`)."""
    USER_UPDATED = 21
    """user_id, channel_id, muted, deafened, text = username: a user's entry changed;
    :attr:`Event.changes` says what (channel, server mute, streams)."""
    USER_DISCONNECTED = 22
    """user_id, channel_id (the last), text = username: a user left the server."""
    CHANNELS_CHANGED = 23
    """The server's channel list changed (a reload): :meth:`Client.channels` has it."""
    PROTECTION_CHANGED = 24
    """A published stream's loss protection changed with its listeners' loss: stream_id,
    ssrc; text says what it is now and why (:meth:`Stream.send_stats` has the values)."""
    EVENTS_DROPPED = 25
    """Polling only: the queue was full (``event_queue_size``) and its oldest events were
    dropped; code says how many. It comes where they were; what they told can be read
    again (:meth:`Client.users`, :meth:`Client.remote_streams`, the stats)."""


class UserChange(IntFlag):
    """What changed in a USER_UPDATED event (``VC_USER_CHANGED_*``)."""

    CHANNEL = 1
    """Moved to another channel (or to none)."""
    SERVER_MUTE = 2
    """Server mute or deafen."""
    STREAMS = 4
    """Published a stream, stopped one, or changed one's mute / hold."""


class LogLevel(_OpenIntEnum):
    """Levels of the library's log lines (``vc_log_fn``)."""

    ERROR = 0
    WARNING = 1
    INFO = 2
    DEBUG = 3
