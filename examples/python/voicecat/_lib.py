"""Loads libvoicecat once and declares every C function with its prototype.

Set VOICECAT_LIBRARY to a path to load a specific build; otherwise the library is
found like any shared library (pkg-config's libdir, then the system).
"""
import ctypes
import ctypes.util
import os
import subprocess

c_int16_p = ctypes.POINTER(ctypes.c_int16)


class vc_client_config(ctypes.Structure):
    _fields_ = [("client_name", ctypes.c_char_p), ("keepalive_ms", ctypes.c_uint32),
                ("max_remote_streams", ctypes.c_uint32), ("event_queue_size", ctypes.c_uint32),
                ("external_playback", ctypes.c_int32), ("playback_device", ctypes.c_char_p),
                ("talk_hangover_ms", ctypes.c_uint32), ("known_servers_path", ctypes.c_char_p),
                ("auto_reconnect", ctypes.c_int32)]


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
                ("channels", ctypes.c_uint32), ("max_queue_ms", ctypes.c_uint32)]


class vc_remote_stream(ctypes.Structure):
    _fields_ = [("gain", ctypes.c_float), ("muted", ctypes.c_int32), ("noise_reduction", ctypes.c_int32)]


class vc_remote_stream_info(ctypes.Structure):
    _fields_ = [("ssrc", ctypes.c_uint32), ("user_id", ctypes.c_uint32), ("stream_id", ctypes.c_uint32),
                ("kind", ctypes.c_int), ("channels", ctypes.c_uint32), ("talking", ctypes.c_int32),
                ("settings", vc_remote_stream), ("username", ctypes.c_char * 65)]


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


class vc_device_info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 128), ("description", ctypes.c_char * 256)]


class vc_send_processing(ctypes.Structure):
    _fields_ = [("noise_suppression", ctypes.c_int32), ("agc", ctypes.c_int32), ("echo_cancellation", ctypes.c_int32),
                ("agc_level", ctypes.c_float)]


class vc_event(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("code", ctypes.c_int32), ("user_id", ctypes.c_uint32),
                ("ssrc", ctypes.c_uint32), ("stream_id", ctypes.c_uint32), ("channel_id", ctypes.c_uint32),
                ("kind", ctypes.c_uint32), ("channels", ctypes.c_uint32), ("muted", ctypes.c_int32),
                ("deafened", ctypes.c_int32), ("hold", ctypes.c_int32), ("text", ctypes.c_char * 256)]


# typedef void (*vc_event_fn)(void *user, const vc_event *event);
EVENT_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(vc_event))
# typedef void (*vc_log_fn)(void *user, int level, const char *message);
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
# typedef void (*vc_pcm_sink_fn)(void *user, const int16_t *pcm, uint32_t frames, uint32_t channels);
SINK_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, c_int16_p, ctypes.c_uint32, ctypes.c_uint32)


def _find():
    path = os.environ.get("VOICECAT_LIBRARY")
    if path:
        return path
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "voicecat"], capture_output=True,
                                text=True, check=True).stdout.strip()
        candidate = os.path.join(libdir, "libvoicecat.so.0")
        if os.path.exists(candidate):
            return candidate
    except (OSError, subprocess.CalledProcessError):
        pass
    return ctypes.util.find_library("voicecat") or "libvoicecat.so.0"


# CDLL, not PyDLL: calls that block (connect, join) release the GIL.
lib = ctypes.CDLL(_find())

_P = ctypes.c_void_p  # vc_client *
_protos = [
    # uint32_t vc_version_number(void);
    ("vc_version_number", ctypes.c_uint32, []),
    # const char *vc_version_string(void);
    ("vc_version_string", ctypes.c_char_p, []),
    # const char *vc_strerror(int code);
    ("vc_strerror", ctypes.c_char_p, [ctypes.c_int]),
    # size_t vc_struct_size(const char *name);
    ("vc_struct_size", ctypes.c_size_t, [ctypes.c_char_p]),
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
    # int vc_list_remote_streams(vc_client *c, vc_remote_stream_info *out, size_t cap, size_t *count);
    ("vc_list_remote_streams", ctypes.c_int, [_P, ctypes.POINTER(vc_remote_stream_info), ctypes.c_size_t,
                                              ctypes.POINTER(ctypes.c_size_t)]),
    # int vc_get_stream_stats(vc_client *c, uint32_t ssrc, vc_stream_stats *out);
    ("vc_get_stream_stats", ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(vc_stream_stats)]),
    # int vc_get_connection_stats(vc_client *c, vc_connection_stats *out);
    ("vc_get_connection_stats", ctypes.c_int, [_P, ctypes.POINTER(vc_connection_stats)]),
    # int vc_set_external_playback(vc_client *c, int enabled);
    ("vc_set_external_playback", ctypes.c_int, [_P, ctypes.c_int]),
    # int vc_set_mixed_output_sink(vc_client *c, vc_pcm_sink_fn fn, void *user);
    ("vc_set_mixed_output_sink", ctypes.c_int, [_P, SINK_FN, ctypes.c_void_p]),
    # int vc_read_mixed_pcm(vc_client *c, int16_t *out, uint32_t frames);
    ("vc_read_mixed_pcm", ctypes.c_int, [_P, c_int16_p, ctypes.c_uint32]),
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
for _name, _restype, _argtypes in _protos:
    _fn = getattr(lib, _name)
    _fn.restype = _restype
    _fn.argtypes = _argtypes

_STRUCTS = {"vc_client_config": vc_client_config, "vc_connect_params": vc_connect_params,
            "vc_audio_config": vc_audio_config, "vc_stream_desc": vc_stream_desc,
            "vc_remote_stream": vc_remote_stream, "vc_remote_stream_info": vc_remote_stream_info,
            "vc_stream_stats": vc_stream_stats, "vc_connection_stats": vc_connection_stats, "vc_event": vc_event,
            "vc_device_info": vc_device_info, "vc_send_processing": vc_send_processing}
for _name, _cls in _STRUCTS.items():
    _size = lib.vc_struct_size(_name.encode())
    if _size != ctypes.sizeof(_cls):
        raise ImportError(f"{_name}: the library says {_size} bytes, this binding {ctypes.sizeof(_cls)}; "
                          "binding and library do not match")
