"""VoiceCat for Python: join voice channels on a voicecat-server, publish audio and
receive the mix, over libvoicecat (ctypes).

    import voicecat

    with voicecat.Client(external_playback=True) as client:
        client.connect("127.0.0.1", 47800, "sam")
        client.join("Lobby")
        with client.start_stream(voicecat.StreamKind.MIC) as mic:
            mic.feed(samples)          # numpy int16/float32, bytes, array('h'), ...
        for event in client.events(timeout=1.0):
            print(event)

The library is found through :func:`load_library` (an explicit path), the
``VOICECAT_LIBRARY`` environment variable, the copy bundled in the wheel, pkg-config,
or the system's search path, in that order (see :func:`library_path`). Its log lines
go to ``logging.getLogger("voicecat.library")``. Audio is 48 kHz unless a stream or
the output format says otherwise (``start_stream(sample_rate=...)``,
:meth:`Client.set_output_format`); int16, or float32 where a call says so.
"""
from __future__ import annotations

import ctypes
import operator
import os
from typing import List, Optional, Union

from . import _lib
from ._callbacks import global_failures, route_to_logging, set_log_handler
from ._callbacks import raise_interrupt as _raise_interrupt
from ._client import (DEFAULT_PORT, SAMPLE_RATE, AsyncEvents, Client, EventHandler, MixBlock, SinkFn, SpeakerSinkFn,
                      Stream)
from ._enums import (ChannelMode, DeviceKind, ErrorCode, EventType, InputMode, LogLevel, OpusApplication,
                     StreamKind, UserChange)
from ._errors import (AuthError, BufferTooSmall, CallbackError, CodecError, DeviceError, InvalidArgument,
                      NetworkError, NoMemory, NotFound, ProtocolError, Rejected, StateError, Timeout, Unsupported,
                      VersionMismatch, VoiceCatError, check, strerror)
from ._lib import LibraryError
from ._pcm import PcmInput, has_numpy
from ._types import (AudioConfig, Channel, ConnectionStats, DeviceInfo, Event, InputLevel, OutputFormat, PlaybackStats,
                     RemoteStreamInfo, RemoteStreamSettings, SendProcessing, SendStats, SpeakerBlock, StreamStats, User,
                     UserStream)

from ._version import __version__ as __version__

__all__ = [
    "AsyncEvents", "AudioConfig", "AuthError", "BufferTooSmall", "CallbackError", "Channel", "ChannelMode", "Client",
    "CodecError", "ConnectionStats", "DEFAULT_PORT", "DeviceError", "DeviceInfo", "DeviceKind", "ErrorCode",
    "Event", "EventHandler", "EventType", "InputLevel", "InputMode", "InvalidArgument", "LibraryError", "LogLevel", "MixBlock",
    "NetworkError", "NoMemory", "NotFound", "OpusApplication", "OutputFormat", "PcmInput", "PlaybackStats", "ProtocolError", "Rejected",
    "RemoteStreamInfo", "RemoteStreamSettings", "SAMPLE_RATE", "SendProcessing", "SendStats", "SinkFn", "SpeakerBlock", "SpeakerSinkFn", "StateError", "Stream",
    "StreamKind", "StreamStats", "Timeout", "Unsupported", "User", "UserChange", "UserStream", "VersionMismatch",
    "VoiceCatError", "event_type_name", "has_numpy", "library_path", "list_devices", "load_library",
    "route_to_logging", "set_alsa_config", "set_log_handler", "strerror", "version", "version_number",
]


def load_library(path: "Optional[Union[str, os.PathLike[str]]]" = None) -> str:
    """Loads libvoicecat now, from ``path`` when given, and returns the file loaded.

    Without ``path`` the usual search applies (``VOICECAT_LIBRARY``, the bundled copy,
    pkg-config, the system). Everything else loads it on first use; call this first to
    choose the file. Raises :class:`LibraryError` if it cannot be loaded or does not
    match this binding.
    """
    _lib.load(path)
    return library_path()


def library_path() -> str:
    """The file libvoicecat was (or now is) loaded from."""
    _lib.get()
    where = _lib.loaded_from()
    assert where is not None
    return where[0]


def version() -> str:
    """The loaded library's version, "major.minor.patch"."""
    return str(_lib.get().vc_version_string().decode())


def version_number() -> int:
    """The loaded library's version as (major << 16) | (minor << 8) | patch."""
    return int(_lib.get().vc_version_number())


def event_type_name(type: Union[EventType, int]) -> str:
    """The C header's name of an event type ("VC_EVENT_TALK_START"); "VC_EVENT_UNKNOWN"
    for a value the loaded library does not know."""
    try:
        number = operator.index(type)   # an EventType, an int, numpy's integers
    except TypeError:
        raise TypeError(f"type must be an EventType or an int, not {type.__class__.__name__}") from None
    return str(_lib.get().vc_event_type_name(number).decode("ascii"))


def set_alsa_config(text: Optional[str]) -> None:
    """Defines extra ALSA PCMs for this process in ALSA configuration syntax (for
    example file-backed PCMs); replaces the previous definitions; None clears them.
    InvalidArgument when the text does not parse."""
    if text is not None and not isinstance(text, str):
        raise TypeError(f"text must be a str or None, not {text.__class__.__name__}")
    global_failures.raise_pending()
    rc = _lib.get().vc_set_alsa_config(text.encode("utf-8") if text is not None else None)
    _raise_interrupt()   # Ctrl-C during the call, caught by the log handler on this thread
    check(rc)


def list_devices(kind: Optional[DeviceKind] = None) -> List[DeviceInfo]:
    """Capture or playback devices (both when ``kind`` is None): ALSA's name hints plus
    the PCMs defined with :func:`set_alsa_config` (for both directions unless their
    definition has ``hint { ioid "Input" }`` or ``"Output"``; ``hint.description`` is
    their description: see vc_list_devices in voicecat.h)."""
    global_failures.raise_pending()
    lib = _lib.get()
    found: List[DeviceInfo] = []
    for k in (DeviceKind.CAPTURE, DeviceKind.PLAYBACK) if kind is None else (DeviceKind(kind),):
        count = ctypes.c_size_t()
        while True:
            rc = lib.vc_list_devices(int(k), None, 0, ctypes.byref(count))
            _raise_interrupt()   # as in set_alsa_config
            check(rc)
            cap = count.value
            arr = (_lib.vc_device_info * max(1, cap))()
            rc = lib.vc_list_devices(int(k), arr, cap, ctypes.byref(count))
            _raise_interrupt()
            check(rc)
            if count.value <= cap:
                break
        found.extend(DeviceInfo._from_c(k, arr[i]) for i in range(count.value))
    return found
