"""Finds and loads libvoicecat once, and declares every C function with its prototype.

The library is looked for, first found wins:

1. an explicit path given to :func:`load` (``voicecat.load_library(path)``);
2. the ``VOICECAT_LIBRARY`` environment variable;
3. the copy bundled in the wheel (``voicecat/_bundled/libvoicecat.so.0``), built from
   the same commit as this binding;
4. the installed prefix that pkg-config knows (``pkg-config --variable=libdir voicecat``,
   so ``PKG_CONFIG_PATH=PREFIX/lib/pkgconfig`` after ``make install PREFIX=...``);
5. the system's library search path (``ldconfig``).

A location that is named (1, 2) but cannot be loaded is an error, not a reason to try
the next one. Loading declares the ``_protos`` table (every function of
``include/voicecat.h``: name, result type, argument types), and refuses a library whose
struct layouts (``vc_struct_size``) or major version differ from this binding's.

To add a C function: append its prototype (as a comment) and its ``(name, restype,
argtypes)`` row to ``_protos``; ``tools/check_abi.py`` compares the table with the header.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import threading
from typing import Callable, List, Optional, Sequence, Tuple, Type

from ._version import __version__

#: The API version this binding was written against (VC_VERSION_MAJOR/MINOR/PATCH).
BINDING_VERSION = tuple(int(part) for part in __version__.split("."))

c_int16_p = ctypes.POINTER(ctypes.c_int16)


class LibraryError(OSError):
    """libvoicecat could not be found or loaded, or does not match this binding."""


# ---- Structures (field for field as in include/voicecat.h) --------------------------


class vc_client_config(ctypes.Structure):
    _fields_ = [("client_name", ctypes.c_char_p), ("keepalive_ms", ctypes.c_uint32),
                ("max_remote_streams", ctypes.c_uint32), ("event_queue_size", ctypes.c_uint32),
                ("external_playback", ctypes.c_int32), ("playback_device", ctypes.c_char_p),
                ("talk_hangover_ms", ctypes.c_uint32), ("known_servers_path", ctypes.c_char_p),
                ("auto_reconnect", ctypes.c_int32), ("resampler_quality", ctypes.c_int32),
                ("loss_report_ms", ctypes.c_uint32)]


class vc_connect_params(ctypes.Structure):
    _fields_ = [("host", ctypes.c_char_p), ("port", ctypes.c_uint16), ("username", ctypes.c_char_p),
                ("password", ctypes.c_char_p), ("server_fingerprint", ctypes.c_char_p), ("timeout_ms", ctypes.c_uint32),
                ("allow_unverified", ctypes.c_int32)]


class vc_audio_config(ctypes.Structure):
    _fields_ = [("codec", ctypes.c_uint32), ("mode", ctypes.c_int), ("sample_rate", ctypes.c_uint32),
                ("bitrate_bps", ctypes.c_uint32), ("frame_us", ctypes.c_uint32), ("application", ctypes.c_int),
                ("fec", ctypes.c_int32), ("expected_packet_loss", ctypes.c_uint32), ("dtx", ctypes.c_int32),
                ("complexity", ctypes.c_uint32), ("dred", ctypes.c_int32)]


class vc_stream_desc(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("external_feed", ctypes.c_int32), ("device", ctypes.c_char_p),
                ("channels", ctypes.c_uint32), ("max_queue_ms", ctypes.c_uint32), ("sample_rate", ctypes.c_uint32)]


class vc_remote_stream(ctypes.Structure):
    _fields_ = [("gain", ctypes.c_float), ("muted", ctypes.c_int32), ("noise_reduction", ctypes.c_int32)]


class vc_remote_stream_info(ctypes.Structure):
    _fields_ = [("ssrc", ctypes.c_uint32), ("user_id", ctypes.c_uint32), ("stream_id", ctypes.c_uint32),
                ("kind", ctypes.c_int), ("channels", ctypes.c_uint32), ("talking", ctypes.c_int32),
                ("settings", vc_remote_stream), ("username", ctypes.c_char * 65),
                ("level_rms_dbfs", ctypes.c_float), ("level_peak_dbfs", ctypes.c_float)]


class vc_stream_stats(ctypes.Structure):
    _fields_ = [("packets_received", ctypes.c_uint64), ("packets_lost", ctypes.c_uint64),
                ("duplicates", ctypes.c_uint64), ("late", ctypes.c_uint64), ("underruns", ctypes.c_uint64),
                ("fec_recovered", ctypes.c_uint64), ("plc_frames", ctypes.c_uint64), ("dred_recovered", ctypes.c_uint64),
                ("target_depth_ms", ctypes.c_uint32), ("current_depth_ms", ctypes.c_uint32), ("talking", ctypes.c_int32)]


class vc_connection_stats(ctypes.Structure):
    _fields_ = [("media_rtt_ms", ctypes.c_uint32), ("control_rtt_ms", ctypes.c_uint32),
                ("bytes_in", ctypes.c_uint64), ("bytes_out", ctypes.c_uint64),
                ("packets_in", ctypes.c_uint64), ("packets_out", ctypes.c_uint64),
                ("auth_failures", ctypes.c_uint64), ("voice_connected", ctypes.c_int32),
                ("keepalives_sent", ctypes.c_uint64), ("keepalives_lost", ctypes.c_uint64)]


class vc_send_stats(ctypes.Structure):
    _fields_ = [("ssrc", ctypes.c_uint32), ("packets_sent", ctypes.c_uint64), ("bytes_sent", ctypes.c_uint64),
                ("fec_packets", ctypes.c_uint64), ("fec", ctypes.c_int32), ("packet_loss_perc", ctypes.c_uint32),
                ("channel_fec", ctypes.c_int32), ("channel_expected_loss", ctypes.c_uint32),
                ("feedback_received", ctypes.c_uint64), ("protection_changes", ctypes.c_uint64),
                ("listeners", ctypes.c_uint32), ("reported_expected", ctypes.c_uint32),
                ("reported_lost", ctypes.c_uint32), ("reported_isolated", ctypes.c_uint32),
                ("frames_dropped", ctypes.c_uint64), ("frames_sent_path_lost", ctypes.c_uint64),
                ("device_overruns", ctypes.c_uint64), ("device_failures", ctypes.c_uint64)]


class vc_playback_stats(ctypes.Structure):
    _fields_ = [("device_underruns", ctypes.c_uint64), ("device_failures", ctypes.c_uint64),
                ("device_buffered_ms", ctypes.c_uint32)]


class vc_device_info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 128), ("description", ctypes.c_char * 256), ("is_monitor", ctypes.c_int32)]


class vc_send_processing(ctypes.Structure):
    _fields_ = [("noise_suppression", ctypes.c_int32), ("agc", ctypes.c_int32), ("echo_cancellation", ctypes.c_int32),
                ("agc_level", ctypes.c_float)]


class vc_event(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("code", ctypes.c_int32), ("user_id", ctypes.c_uint32),
                ("ssrc", ctypes.c_uint32), ("stream_id", ctypes.c_uint32), ("channel_id", ctypes.c_uint32),
                ("kind", ctypes.c_uint32), ("channels", ctypes.c_uint32), ("muted", ctypes.c_int32),
                ("deafened", ctypes.c_int32), ("hold", ctypes.c_int32), ("text", ctypes.c_char * 256)]


class vc_user_info(ctypes.Structure):
    _fields_ = [("user_id", ctypes.c_uint32), ("channel_id", ctypes.c_uint32), ("server_muted", ctypes.c_int32),
                ("server_deafened", ctypes.c_int32), ("stream_count", ctypes.c_uint32), ("stream_kinds", ctypes.c_uint32),
                ("is_self", ctypes.c_int32), ("username", ctypes.c_char * 65)]


class vc_user_stream(ctypes.Structure):
    _fields_ = [("user_id", ctypes.c_uint32), ("stream_id", ctypes.c_uint32), ("ssrc", ctypes.c_uint32),
                ("kind", ctypes.c_int), ("muted", ctypes.c_int32), ("hold", ctypes.c_int32)]


class vc_channel_info(ctypes.Structure):
    _fields_ = [("channel_id", ctypes.c_uint32), ("member_count", ctypes.c_uint32), ("is_current", ctypes.c_int32),
                ("audio", vc_audio_config), ("name", ctypes.c_char * 65)]


#: Every struct whose size the library reports through vc_struct_size.
_STRUCTS: "dict[str, Type[ctypes.Structure]]" = {
    "vc_client_config": vc_client_config, "vc_connect_params": vc_connect_params,
    "vc_audio_config": vc_audio_config, "vc_stream_desc": vc_stream_desc,
    "vc_remote_stream": vc_remote_stream, "vc_remote_stream_info": vc_remote_stream_info,
    "vc_stream_stats": vc_stream_stats, "vc_connection_stats": vc_connection_stats, "vc_event": vc_event,
    "vc_send_stats": vc_send_stats, "vc_playback_stats": vc_playback_stats, "vc_device_info": vc_device_info, "vc_send_processing": vc_send_processing, "vc_user_info": vc_user_info,
    "vc_user_stream": vc_user_stream, "vc_channel_info": vc_channel_info}

# ---- Callback types ------------------------------------------------------------------

# typedef void (*vc_event_fn)(void *user, const vc_event *event);
EVENT_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(vc_event))
# typedef void (*vc_log_fn)(void *user, int level, const char *message);
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
# typedef void (*vc_pcm_sink_fn)(void *user, const int16_t *pcm, uint32_t frames, uint32_t channels);
SINK_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, c_int16_p, ctypes.c_uint32, ctypes.c_uint32)
# typedef void (*vc_remote_stream_sink_fn)(void *user, uint32_t ssrc, uint32_t user_id, vc_stream_kind kind,
#                                          const int16_t *pcm, uint32_t frames, uint32_t channels);
STREAM_SINK_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int, c_int16_p,
                                  ctypes.c_uint32, ctypes.c_uint32)
c_float_p = ctypes.POINTER(ctypes.c_float)

# ---- Prototypes ------------------------------------------------------------------------

_P = ctypes.c_void_p  # vc_client *
_protos: List[Tuple[str, object, Sequence[object]]] = [
    # uint32_t vc_version_number(void);
    ("vc_version_number", ctypes.c_uint32, []),
    # const char *vc_version_string(void);
    ("vc_version_string", ctypes.c_char_p, []),
    # const char *vc_strerror(int code);
    ("vc_strerror", ctypes.c_char_p, [ctypes.c_int]),
    # size_t vc_struct_size(const char *name);
    ("vc_struct_size", ctypes.c_size_t, [ctypes.c_char_p]),
    # const char *vc_event_type_name(vc_event_type type);
    ("vc_event_type_name", ctypes.c_char_p, [ctypes.c_int]),
    # void vc_set_log_callback(vc_log_fn fn, void *user);
    ("vc_set_log_callback", None, [LOG_FN, ctypes.c_void_p]),
    # vc_client_config vc_client_config_default(void);
    ("vc_client_config_default", vc_client_config, []),
    # vc_connect_params vc_connect_params_default(void);
    ("vc_connect_params_default", vc_connect_params, []),
    # vc_stream_desc vc_stream_desc_default(void);
    ("vc_stream_desc_default", vc_stream_desc, []),
    # int vc_client_create(const vc_client_config *cfg, vc_client **out);
    ("vc_client_create", ctypes.c_int, [ctypes.POINTER(vc_client_config), ctypes.POINTER(_P)]),
    # void vc_client_destroy(vc_client *c);
    ("vc_client_destroy", None, [_P]),
    # int vc_connect(vc_client *c, const vc_connect_params *p);
    ("vc_connect", ctypes.c_int, [_P, ctypes.POINTER(vc_connect_params)]),
    # int vc_disconnect(vc_client *c);
    ("vc_disconnect", ctypes.c_int, [_P]),
    # int vc_get_server_fingerprint(vc_client *c, char *buf, size_t len);
    ("vc_get_server_fingerprint", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t]),
    # int vc_join_channel(vc_client *c, const char *name);
    ("vc_join_channel", ctypes.c_int, [_P, ctypes.c_char_p]),
    # int vc_get_channel_audio(vc_client *c, vc_audio_config *out);
    ("vc_get_channel_audio", ctypes.c_int, [_P, ctypes.POINTER(vc_audio_config)]),
    # int vc_stream_start(vc_client *c, const vc_stream_desc *d, uint32_t *out_stream_id);
    ("vc_stream_start", ctypes.c_int, [_P, ctypes.POINTER(vc_stream_desc), ctypes.POINTER(ctypes.c_uint32)]),
    # int vc_stream_stop(vc_client *c, uint32_t stream_id);
    ("vc_stream_stop", ctypes.c_int, [_P, ctypes.c_uint32]),
    # int vc_stream_feed_pcm(vc_client *c, uint32_t stream_id, const int16_t *pcm, uint32_t frames, uint32_t channels);
    ("vc_stream_feed_pcm", ctypes.c_int, [_P, ctypes.c_uint32, c_int16_p, ctypes.c_uint32, ctypes.c_uint32]),
    # int vc_stream_feed_pcm_f32(vc_client *c, uint32_t stream_id, const float *pcm, uint32_t frames, uint32_t channels);
    ("vc_stream_feed_pcm_f32", ctypes.c_int, [_P, ctypes.c_uint32, c_float_p, ctypes.c_uint32, ctypes.c_uint32]),
    # int vc_get_input_level(vc_client *c, uint32_t stream_id, float *rms_dbfs, float *peak_dbfs);
    ("vc_get_input_level", ctypes.c_int, [_P, ctypes.c_uint32, c_float_p, c_float_p]),
    # int vc_stream_queued_ms(vc_client *c, uint32_t stream_id, uint32_t *out_ms);
    ("vc_stream_queued_ms", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32)]),
    # int vc_stream_drain(vc_client *c, uint32_t stream_id, int timeout_ms);
    ("vc_stream_drain", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_int]),
    # int vc_stream_flush(vc_client *c, uint32_t stream_id);
    ("vc_stream_flush", ctypes.c_int, [_P, ctypes.c_uint32]),
    # int vc_set_remote_stream(vc_client *c, uint32_t ssrc, const vc_remote_stream *s);
    ("vc_set_remote_stream", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(vc_remote_stream)]),
    # int vc_get_remote_stream(vc_client *c, uint32_t ssrc, vc_remote_stream *out);
    ("vc_get_remote_stream", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(vc_remote_stream)]),
    # int vc_list_users(vc_client *c, vc_user_info *out, size_t cap, size_t *count);
    ("vc_list_users", ctypes.c_int, [_P, ctypes.POINTER(vc_user_info), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    # int vc_list_user_streams(vc_client *c, uint32_t user_id, vc_user_stream *out, size_t cap, size_t *count);
    ("vc_list_user_streams", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(vc_user_stream), ctypes.c_size_t,
                                            ctypes.POINTER(ctypes.c_size_t)]),
    # int vc_list_channels(vc_client *c, vc_channel_info *out, size_t cap, size_t *count);
    ("vc_list_channels", ctypes.c_int, [_P, ctypes.POINTER(vc_channel_info), ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_size_t)]),
    # int vc_set_stream_state(vc_client *c, uint32_t stream_id, int muted, int hold);
    ("vc_set_stream_state", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_int, ctypes.c_int]),
    # int vc_admin_set_server_mute(vc_client *c, uint32_t user_id, int muted, int deafened, const char *admin_password);
    ("vc_admin_set_server_mute", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_int, ctypes.c_int, ctypes.c_char_p]),
    # int vc_admin_kick(vc_client *c, uint32_t user_id, const char *reason, const char *admin_password);
    ("vc_admin_kick", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_char_p]),
    # int vc_set_jitter_bounds(vc_client *c, uint32_t ssrc, uint32_t min_ms, uint32_t max_ms);
    ("vc_set_jitter_bounds", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32]),
    # int vc_list_remote_streams(vc_client *c, vc_remote_stream_info *out, size_t cap, size_t *count);
    ("vc_list_remote_streams", ctypes.c_int, [_P, ctypes.POINTER(vc_remote_stream_info), ctypes.c_size_t,
                                              ctypes.POINTER(ctypes.c_size_t)]),
    # int vc_get_stream_stats(vc_client *c, uint32_t ssrc, vc_stream_stats *out);
    ("vc_get_stream_stats", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(vc_stream_stats)]),
    # int vc_get_connection_stats(vc_client *c, vc_connection_stats *out);
    ("vc_get_connection_stats", ctypes.c_int, [_P, ctypes.POINTER(vc_connection_stats)]),
    # int vc_get_send_stats(vc_client *c, uint32_t stream_id, vc_send_stats *out);
    ("vc_get_send_stats", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(vc_send_stats)]),
    # int vc_get_playback_stats(vc_client *c, vc_playback_stats *out);
    ("vc_get_playback_stats", ctypes.c_int, [_P, ctypes.POINTER(vc_playback_stats)]),
    # int vc_set_external_playback(vc_client *c, int enabled);
    ("vc_set_external_playback", ctypes.c_int, [_P, ctypes.c_int]),
    # int vc_set_mixed_output_sink(vc_client *c, vc_pcm_sink_fn fn, void *user);
    ("vc_set_mixed_output_sink", ctypes.c_int, [_P, SINK_FN, ctypes.c_void_p]),
    # int vc_read_mixed_pcm(vc_client *c, int16_t *out, uint32_t frames);
    ("vc_read_mixed_pcm", ctypes.c_int, [_P, c_int16_p, ctypes.c_uint32]),
    # int vc_read_mixed_pcm_f32(vc_client *c, float *out, uint32_t frames);
    ("vc_read_mixed_pcm_f32", ctypes.c_int, [_P, c_float_p, ctypes.c_uint32]),
    # int vc_set_mixed_output_block_ms(vc_client *c, uint32_t ms);
    ("vc_set_mixed_output_block_ms", ctypes.c_int, [_P, ctypes.c_uint32]),
    # int vc_set_output_format(vc_client *c, uint32_t sample_rate, uint32_t channels);
    ("vc_set_output_format", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_uint32]),
    # int vc_set_remote_stream_sink(vc_client *c, vc_remote_stream_sink_fn fn, void *user);
    ("vc_set_remote_stream_sink", ctypes.c_int, [_P, STREAM_SINK_FN, ctypes.c_void_p]),
    # int vc_start_recording(vc_client *c, const char *path, uint32_t ssrc);
    ("vc_start_recording", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_uint32]),
    # int vc_stop_recording(vc_client *c, uint32_t ssrc);
    ("vc_stop_recording", ctypes.c_int, [_P, ctypes.c_uint32]),
    # int vc_set_playback_device(vc_client *c, const char *name);
    ("vc_set_playback_device", ctypes.c_int, [_P, ctypes.c_char_p]),
    # int vc_set_capture_device(vc_client *c, uint32_t stream_id, const char *name);
    ("vc_set_capture_device", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_char_p]),
    # int vc_poll_event(vc_client *c, vc_event *out, int timeout_ms);
    ("vc_poll_event", ctypes.c_int, [_P, ctypes.POINTER(vc_event), ctypes.c_int]),
    # int vc_set_event_callback(vc_client *c, vc_event_fn fn, void *user);
    ("vc_set_event_callback", ctypes.c_int, [_P, EVENT_FN, ctypes.c_void_p]),
    # int vc_set_alsa_config(const char *config_text);
    ("vc_set_alsa_config", ctypes.c_int, [ctypes.c_char_p]),
    # int vc_list_devices(vc_device_kind kind, vc_device_info *out, size_t cap, size_t *count);
    ("vc_list_devices", ctypes.c_int, [ctypes.c_int, ctypes.POINTER(vc_device_info), ctypes.c_size_t,
                                       ctypes.POINTER(ctypes.c_size_t)]),
    # int vc_set_capture_channels(vc_client *c, uint32_t stream_id, uint32_t channels);
    ("vc_set_capture_channels", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_uint32]),
    # int vc_set_input_mode(vc_client *c, vc_input_mode mode);
    ("vc_set_input_mode", ctypes.c_int, [_P, ctypes.c_int]),
    # int vc_set_vad(vc_client *c, float threshold, uint32_t hang_ms);
    ("vc_set_vad", ctypes.c_int, [_P, ctypes.c_float, ctypes.c_uint32]),
    # int vc_set_push_to_talk(vc_client *c, int active);
    ("vc_set_push_to_talk", ctypes.c_int, [_P, ctypes.c_int]),
    # int vc_audio_suspend(vc_client *c);
    ("vc_audio_suspend", ctypes.c_int, [_P]),
    # int vc_audio_restart(vc_client *c);
    ("vc_audio_restart", ctypes.c_int, [_P]),
    # vc_send_processing vc_send_processing_default(void);
    ("vc_send_processing_default", vc_send_processing, []),
    # int vc_set_send_processing(vc_client *c, uint32_t stream_id, const vc_send_processing *p);
    ("vc_set_send_processing", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(vc_send_processing)]),
    # int vc_get_send_processing(vc_client *c, uint32_t stream_id, vc_send_processing *out);
    ("vc_get_send_processing", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(vc_send_processing)]),
    # int vc_last_error(vc_client *c, char *buf, size_t len);
    ("vc_last_error", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t]),
]

# ---- Finding and loading ---------------------------------------------------------------

_BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bundled", "libvoicecat.so.0")

_lock = threading.Lock()
_library: Optional[ctypes.CDLL] = None
_path: Optional[str] = None
_how: Optional[str] = None
#: Called with the library right after it is loaded (the log routing installs itself here).
on_load: List[Callable[[ctypes.CDLL], None]] = []


def _pkg_config_library() -> Tuple[Optional[str], str]:
    try:
        run = subprocess.run(["pkg-config", "--variable=libdir", "voicecat"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"pkg-config: {e}"
    if run.returncode != 0:
        return None, "pkg-config: no voicecat.pc (set PKG_CONFIG_PATH=PREFIX/lib/pkgconfig)"
    candidate = os.path.join(run.stdout.strip(), "libvoicecat.so.0")
    if not os.path.exists(candidate):
        return None, f"pkg-config: {candidate} does not exist"
    return candidate, "pkg-config"


def find_library() -> Tuple[str, str]:
    """Where the library would be loaded from, without loading it: ``(path, how)``.

    ``how`` is ``"VOICECAT_LIBRARY"``, ``"bundled"``, ``"pkg-config"`` or ``"system"``.
    Raises :class:`LibraryError` listing every place tried when there is none.
    """
    env = os.environ.get("VOICECAT_LIBRARY")
    if env:
        return env, "VOICECAT_LIBRARY"
    tried = ["VOICECAT_LIBRARY: not set"]
    if os.path.exists(_BUNDLED):
        return _BUNDLED, "bundled"
    tried.append("bundled: this installation has no bundled copy (the wheel from 'make wheel' has one)")
    found, why = _pkg_config_library()
    if found:
        return found, "pkg-config"
    tried.append(why)
    system = ctypes.util.find_library("voicecat")
    if system:
        return system, "system"
    tried.append("system: ldconfig does not know libvoicecat")
    raise LibraryError("libvoicecat not found; tried " + "; ".join(tried))


def _declare(lib: ctypes.CDLL, path: str) -> None:
    missing = [name for name, _, _ in _protos if not hasattr(lib, name)]
    if missing:
        if not hasattr(lib, "vc_version_number") or not hasattr(lib, "vc_version_string"):
            # Every libvoicecat has these: this is some other library.
            raise LibraryError(f"{path} is not libvoicecat (it has no vc_version_number); point VOICECAT_LIBRARY "
                               "or load_library() at libvoicecat.so.0")
        lib.vc_version_string.restype = ctypes.c_char_p
        lib.vc_version_string.argtypes = []
        raise LibraryError(f"{path} is libvoicecat {lib.vc_version_string().decode(errors='replace')}, older than "
                           f"this binding ({'.'.join(map(str, BINDING_VERSION))}): it lacks {', '.join(missing)}")
    for name, restype, argtypes in _protos:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = list(argtypes)
    number = int(lib.vc_version_number())
    if number >> 16 != BINDING_VERSION[0]:
        raise LibraryError(f"{path} is version {lib.vc_version_string().decode()}, this binding "
                           f"{'.'.join(map(str, BINDING_VERSION))}: major versions differ")
    for name, cls in _STRUCTS.items():
        size = int(lib.vc_struct_size(name.encode()))
        if size != ctypes.sizeof(cls):
            raise LibraryError(f"{name}: {path} says {size} bytes, this binding {ctypes.sizeof(cls)}; "
                               "binding and library do not match")


def load(path: "Optional[str | os.PathLike[str]]" = None) -> ctypes.CDLL:
    """Loads the library (once per process) and returns it.

    ``path`` names the file explicitly; otherwise :func:`find_library` decides. Loading
    again with another path raises :class:`LibraryError`: a process has one libvoicecat.
    """
    global _library, _path, _how
    with _lock:
        if path is not None:
            wanted, how = os.fspath(path), "explicit"
        elif _library is not None:
            return _library
        else:
            wanted, how = find_library()
        if _library is not None:
            if os.path.realpath(wanted) != os.path.realpath(_path or ""):
                raise LibraryError(f"libvoicecat is already loaded from {_path}; cannot load {wanted} too")
            return _library
        try:
            # CDLL, not PyDLL: calls that block (connect, join, poll) release the GIL.
            lib = ctypes.CDLL(wanted)
        except OSError as e:
            raise LibraryError(f"cannot load libvoicecat from {wanted} ({how}): {e}") from e
        _declare(lib, wanted)
        _library, _path, _how = lib, wanted, how
    for hook in on_load:
        hook(lib)
    return lib


def get() -> ctypes.CDLL:
    """The loaded library, loading it on first use."""
    return _library if _library is not None else load()


def loaded_from() -> Optional[Tuple[str, str]]:
    """``(path, how)`` of the loaded library, or None before it is loaded."""
    return (_path, _how or "") if _path is not None else None
