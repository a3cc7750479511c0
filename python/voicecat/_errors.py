"""Exceptions: one class per VC_ERR_* code, and the error a failed callback leaves."""
from __future__ import annotations

import ctypes
from typing import Dict, Type

from . import _lib
from ._enums import ErrorCode


def strerror(code: int) -> str:
    """The library's static text for a result code (``vc_strerror``)."""
    return str(_lib.get().vc_strerror(int(code)).decode())


class VoiceCatError(Exception):
    """A libvoicecat call failed.

    ``code`` is the :class:`ErrorCode`, ``detail`` why this call failed as the library
    recorded it (``vc_last_error``: the client's record, or for the calls that take no
    client, such as creating one, the library's own).
    """

    code: ErrorCode
    detail: str

    def __init__(self, code: int, detail: str = "") -> None:
        self.code = ErrorCode(code)
        self.detail = detail
        text = strerror(code)
        super().__init__(f"{text} ({detail})" if detail else text)


class InvalidArgument(VoiceCatError):
    """VC_ERR_INVALID_ARG: a bad handle or an out-of-range value."""


class StateError(VoiceCatError):
    """VC_ERR_STATE: not allowed now (not connected, inside a callback, ...)."""


class NotFound(VoiceCatError):
    """VC_ERR_NOT_FOUND: unknown stream id, ssrc, channel or device."""


class NetworkError(VoiceCatError):
    """VC_ERR_NETWORK: socket error, connection lost or refused."""


class Timeout(VoiceCatError):
    """VC_ERR_TIMEOUT: the server did not answer in time."""


class ProtocolError(VoiceCatError):
    """VC_ERR_PROTOCOL: the server sent something malformed."""


class VersionMismatch(VoiceCatError):
    """VC_ERR_VERSION: the server speaks another protocol version."""


class AuthError(VoiceCatError):
    """VC_ERR_AUTH: wrong password, or the server's fingerprint is not the pinned one."""


class Rejected(VoiceCatError):
    """VC_ERR_REJECTED: the server refused (username taken, server full, a limit)."""


class DeviceError(VoiceCatError):
    """VC_ERR_DEVICE: an audio device could not be opened or failed."""


class CodecError(VoiceCatError):
    """VC_ERR_CODEC: Opus rejected a configuration or frame."""


class NoMemory(VoiceCatError):
    """VC_ERR_NO_MEMORY: allocation failed or a fixed capacity is full."""


class Unsupported(VoiceCatError):
    """VC_ERR_UNSUPPORTED: not available in this build or configuration."""


class BufferTooSmall(VoiceCatError):
    """VC_ERR_BUFFER_TOO_SMALL: a buffer cannot hold the result."""


_BY_CODE: Dict[int, Type[VoiceCatError]] = {
    ErrorCode.INVALID_ARG: InvalidArgument, ErrorCode.STATE: StateError, ErrorCode.NOT_FOUND: NotFound,
    ErrorCode.NETWORK: NetworkError, ErrorCode.TIMEOUT: Timeout, ErrorCode.PROTOCOL: ProtocolError,
    ErrorCode.VERSION: VersionMismatch, ErrorCode.AUTH: AuthError, ErrorCode.REJECTED: Rejected,
    ErrorCode.DEVICE: DeviceError, ErrorCode.CODEC: CodecError, ErrorCode.NO_MEMORY: NoMemory,
    ErrorCode.UNSUPPORTED: Unsupported, ErrorCode.BUFFER_TOO_SMALL: BufferTooSmall}


def error_for(code: int, detail: str = "") -> VoiceCatError:
    """The exception for a negative result code (VoiceCatError itself for a code this
    binding does not know)."""
    return _BY_CODE.get(code, VoiceCatError)(code, detail)


def global_detail() -> str:
    """Why the calling thread's last call that takes no client failed
    (``vc_last_error(NULL, ...)``: vc_client_create, vc_set_alsa_config, vc_list_devices)."""
    buf = ctypes.create_string_buffer(512)
    if int(_lib.get().vc_last_error(None, buf, len(buf))) != 0:
        return ""
    return buf.value.decode("utf-8", errors="replace")


def check(code: int) -> int:
    """Raises the exception for a negative result of a global call, with the library's
    reason; returns the code otherwise."""
    if code < 0:
        raise error_for(code, global_detail())
    return code


class CallbackError(Exception):
    """A callback of yours (event handler, mixed-output sink or log handler) raised.

    The exception it raised is ``__cause__`` (and :attr:`original`). The callback is
    disabled after its first failure: it is not called again until set again.
    """

    def __init__(self, which: str, original: BaseException) -> None:
        self.which = which
        self.original = original
        super().__init__(f"the {which} raised {type(original).__name__}: {original} (it has been disabled)")
