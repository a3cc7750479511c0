"""Python binding of libvoicecat (ctypes).

    with voicecat.Client() as c:
        c.connect("127.0.0.1", 47800, "sam")
        c.join("Lobby")
        ...
"""
import ctypes
import threading

from . import _lib
from ._lib import lib

VERSION = lib.vc_version_string().decode()

STREAM_MIC, STREAM_SCREEN_AUDIO, STREAM_AUX_DEVICE = 0, 1, 2
INPUT_VAD, INPUT_PTT, INPUT_CONTINUOUS = 0, 1, 2
DEVICE_CAPTURE, DEVICE_PLAYBACK = 0, 1

EVENT_NAMES = {1: "connected", 2: "disconnected", 3: "channel_joined", 4: "user_joined", 5: "user_left",
               6: "remote_stream_added", 7: "remote_stream_removed", 8: "talk_start", 9: "talk_stop",
               10: "voice_disconnected", 11: "voice_reconnected", 12: "server_mute_state",
               13: "stream_state_update", 14: "error", 15: "device_restored", 16: "reconnecting",
               17: "reconnected"}


class VoiceCatError(Exception):
    """A libvoicecat call failed; `code` is the VC_ERR_* value."""
    code = 0

    def __init__(self, code, detail=""):
        self.code = code
        text = lib.vc_strerror(code).decode()
        super().__init__(f"{text} ({detail})" if detail else text)


class InvalidArgument(VoiceCatError): pass
class StateError(VoiceCatError): pass
class NotFound(VoiceCatError): pass
class NetworkError(VoiceCatError): pass
class Timeout(VoiceCatError): pass
class ProtocolError(VoiceCatError): pass
class VersionMismatch(VoiceCatError): pass
class AuthError(VoiceCatError): pass
class Rejected(VoiceCatError): pass
class DeviceError(VoiceCatError): pass
class CodecError(VoiceCatError): pass
class NoMemory(VoiceCatError): pass
class Unsupported(VoiceCatError): pass
class BufferTooSmall(VoiceCatError): pass


_ERRORS = {-1: InvalidArgument, -2: StateError, -3: NotFound, -4: NetworkError, -5: Timeout, -6: ProtocolError,
           -7: VersionMismatch, -8: AuthError, -9: Rejected, -10: DeviceError, -11: CodecError, -12: NoMemory,
           -13: Unsupported, -14: BufferTooSmall}


def check(code, handle=None):
    """Raises the VoiceCatError subclass for a negative result; returns the code otherwise."""
    if code >= 0:
        return code
    detail = ""
    if handle:
        buf = ctypes.create_string_buffer(512)
        if lib.vc_last_error(handle, buf, len(buf)) == 0:
            detail = buf.value.decode(errors="replace")
    raise _ERRORS.get(code, VoiceCatError)(code, detail)


class Event:
    def __init__(self, e):
        self.type = EVENT_NAMES.get(e.type, str(e.type))
        self.code, self.user_id, self.ssrc, self.stream_id = e.code, e.user_id, e.ssrc, e.stream_id
        self.channel_id, self.kind, self.channels = e.channel_id, e.kind, e.channels
        self.muted, self.deafened, self.hold = bool(e.muted), bool(e.deafened), bool(e.hold)
        self.text = e.text.decode(errors="replace")

    def __repr__(self):
        return f"Event({self.type}, ssrc={self.ssrc}, user={self.user_id}, text={self.text!r})"


class Client:
    """One libvoicecat client. A context manager; close() destroys it."""

    def __init__(self, client_name="python", keepalive_ms=5000, max_remote_streams=32,
                 external_playback=False, playback_device=None, known_servers_path=None, auto_reconnect=False):
        """known_servers_path: None = the per-user known-servers file, "" = none (then connect
        needs a fingerprint or allow_unverified=True). auto_reconnect: reconnect by itself."""
        cfg = lib.vc_client_config_default()
        self._name = client_name.encode()
        self._playback = playback_device.encode() if playback_device else None
        self._known = known_servers_path.encode() if known_servers_path is not None else None
        cfg.known_servers_path = self._known
        cfg.auto_reconnect = int(auto_reconnect)
        cfg.client_name = self._name
        cfg.keepalive_ms = keepalive_ms
        cfg.max_remote_streams = max_remote_streams
        cfg.external_playback = int(external_playback)
        cfg.playback_device = self._playback
        h = ctypes.c_void_p()
        check(lib.vc_client_create(ctypes.byref(cfg), ctypes.byref(h)))
        self._h = h
        self._sink = None       # keeps the CFUNCTYPE alive while C may call it
        self._on_event = None

    def close(self):
        if self._h:
            lib.vc_client_destroy(self._h)
            self._h = None
            self._sink = None
            self._on_event = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _c(self, code):
        return check(code, self._h)

    def connect(self, host, port, username, password=None, fingerprint=None, timeout_ms=5000, allow_unverified=False):
        p = _lib.vc_connect_params(host.encode(), port, username.encode(),
                                   password.encode() if password else None,
                                   fingerprint.encode() if fingerprint else None, timeout_ms, int(allow_unverified))
        self._c(lib.vc_connect(self._h, ctypes.byref(p)))

    def disconnect(self):
        self._c(lib.vc_disconnect(self._h))

    @property
    def fingerprint(self):
        buf = ctypes.create_string_buffer(65)
        self._c(lib.vc_get_server_fingerprint(self._h, buf, len(buf)))
        return buf.value.decode()

    def join(self, channel):
        self._c(lib.vc_join_channel(self._h, channel.encode()))

    def channel_audio(self):
        a = _lib.vc_audio_config()
        self._c(lib.vc_get_channel_audio(self._h, ctypes.byref(a)))
        return {f: getattr(a, f) for f, _ in a._fields_}

    def start_stream(self, kind=STREAM_MIC, channels=1, device=None):
        """An external-feed stream, or with `device` a stream captured from that ALSA PCM."""
        d = _lib.vc_stream_desc(kind, 0 if device else 1, device.encode() if device else None, channels)
        sid = ctypes.c_uint32()
        self._c(lib.vc_stream_start(self._h, ctypes.byref(d), ctypes.byref(sid)))
        return sid.value

    def stop_stream(self, stream_id):
        self._c(lib.vc_stream_stop(self._h, stream_id))

    def feed(self, stream_id, pcm, channels=1):
        """pcm: a bytes-like object of int16 samples, or a ctypes int16 array."""
        if isinstance(pcm, (bytes, bytearray, memoryview)):
            n = len(pcm) // 2
            buf = (ctypes.c_int16 * n).from_buffer_copy(pcm)
        else:
            buf, n = pcm, len(pcm)
        self._c(lib.vc_stream_feed_pcm(self._h, stream_id, buf, n // channels, channels))

    def set_capture_channels(self, stream_id, channels):
        self._c(lib.vc_set_capture_channels(self._h, stream_id, channels))

    def set_input_mode(self, mode):
        self._c(lib.vc_set_input_mode(self._h, mode))

    def set_vad(self, threshold=0.025, hang_ms=300):
        self._c(lib.vc_set_vad(self._h, threshold, hang_ms))

    def set_push_to_talk(self, active):
        self._c(lib.vc_set_push_to_talk(self._h, int(active)))

    def set_external_playback(self, enabled):
        self._c(lib.vc_set_external_playback(self._h, int(enabled)))

    def suspend_audio(self):
        self._c(lib.vc_audio_suspend(self._h))

    def restart_audio(self):
        self._c(lib.vc_audio_restart(self._h))

    def set_send_processing(self, stream_id, noise_suppression=False, agc=False, echo_cancellation=False, agc_level=0.125):
        p = _lib.vc_send_processing(int(noise_suppression), int(agc), int(echo_cancellation), agc_level)
        self._c(lib.vc_set_send_processing(self._h, stream_id, ctypes.byref(p)))

    def get_send_processing(self, stream_id):
        p = _lib.vc_send_processing()
        self._c(lib.vc_get_send_processing(self._h, stream_id, ctypes.byref(p)))
        return {"noise_suppression": bool(p.noise_suppression), "agc": bool(p.agc),
                "echo_cancellation": bool(p.echo_cancellation), "agc_level": p.agc_level}

    def set_remote(self, ssrc, gain=1.0, muted=False, noise_reduction=False):
        s = _lib.vc_remote_stream(gain, int(muted), int(noise_reduction))
        self._c(lib.vc_set_remote_stream(self._h, ssrc, ctypes.byref(s)))

    def get_remote(self, ssrc):
        s = _lib.vc_remote_stream()
        self._c(lib.vc_get_remote_stream(self._h, ssrc, ctypes.byref(s)))
        return {"gain": s.gain, "muted": bool(s.muted), "noise_reduction": bool(s.noise_reduction)}

    def remote_streams(self):
        count = ctypes.c_size_t()
        self._c(lib.vc_list_remote_streams(self._h, None, 0, ctypes.byref(count)))
        arr = (_lib.vc_remote_stream_info * max(1, count.value))()
        self._c(lib.vc_list_remote_streams(self._h, arr, count.value, ctypes.byref(count)))
        return [{"ssrc": i.ssrc, "user_id": i.user_id, "stream_id": i.stream_id, "kind": i.kind,
                 "channels": i.channels, "talking": bool(i.talking), "username": i.username.decode()}
                for i in arr[:count.value]]

    def stream_stats(self, ssrc):
        s = _lib.vc_stream_stats()
        self._c(lib.vc_get_stream_stats(self._h, ssrc, ctypes.byref(s)))
        return {f: getattr(s, f) for f, _ in s._fields_}

    def connection_stats(self):
        s = _lib.vc_connection_stats()
        self._c(lib.vc_get_connection_stats(self._h, ctypes.byref(s)))
        return {f: getattr(s, f) for f, _ in s._fields_}

    def set_sink(self, fn):
        """fn(pcm_bytes, frames) gets the final stereo mix every 20 ms on the mixer thread; None clears."""
        if fn is None:
            self._c(lib.vc_set_mixed_output_sink(self._h, _lib.SINK_FN(), None))
            self._sink = None
            return

        def trampoline(_user, pcm, frames, channels):
            fn(ctypes.string_at(pcm, frames * channels * 2), frames)

        cb = _lib.SINK_FN(trampoline)
        self._c(lib.vc_set_mixed_output_sink(self._h, cb, None))
        self._sink = cb

    def read_mix(self, frames):
        """Pull mode: `frames` stereo frames of the mix as bytes."""
        buf = (ctypes.c_int16 * (frames * 2))()
        self._c(lib.vc_read_mixed_pcm(self._h, buf, frames))
        return bytes(buf)

    def set_event_handler(self, fn):
        """fn(Event) for every event, called on the client's network thread; None clears.
        Events are queued for poll_event() either way."""
        if fn is None:
            self._c(lib.vc_set_event_callback(self._h, _lib.EVENT_FN(), None))
            self._on_event = None
            return
        cb = _lib.EVENT_FN(lambda _user, e: fn(Event(e.contents)))
        self._c(lib.vc_set_event_callback(self._h, cb, None))
        self._on_event = cb   # C holds the pointer: keep the CFUNCTYPE alive

    def poll_event(self, timeout_ms=0):
        e = _lib.vc_event()
        got = self._c(lib.vc_poll_event(self._h, ctypes.byref(e), timeout_ms))
        return Event(e) if got == 1 else None


def set_alsa_config(text):
    """Defines extra ALSA PCMs for this process (ALSA configuration syntax); None clears."""
    check(lib.vc_set_alsa_config(text.encode() if text is not None else None))


def list_devices(kind=DEVICE_CAPTURE):
    """[(name, description)] of capture or playback devices."""
    count = ctypes.c_size_t()
    check(lib.vc_list_devices(kind, None, 0, ctypes.byref(count)))
    arr = (_lib.vc_device_info * max(1, count.value))()
    check(lib.vc_list_devices(kind, arr, count.value, ctypes.byref(count)))
    return [(d.name.decode(), d.description.decode(errors="replace")) for d in arr[:count.value]]


def set_log_handler(fn):
    """fn(level, message) for the library's log lines; None turns logging off."""
    global _log_cb
    if fn is None:
        lib.vc_set_log_callback(_lib.LOG_FN(), None)
        _log_cb = None
        return
    _log_cb = _lib.LOG_FN(lambda _u, level, msg: fn(level, msg.decode(errors="replace")))
    lib.vc_set_log_callback(_log_cb, None)


_log_cb = None
