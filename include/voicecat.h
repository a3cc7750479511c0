/*
 * voicecat.h — the C API of libvoicecat, a real-time voice core.
 *
 * A host program links libvoicecat to join a voice channel on a voicecat-server,
 * publish audio streams and receive the mix of everyone else.
 *
 * Conventions (read once, they hold for every function below):
 *
 *  - Handles. `vc_client` is opaque; several may exist in one process. Every call
 *    except the global ones takes a `vc_client *` first. A NULL or destroyed
 *    handle gives VC_ERR_INVALID_ARG (handles are checked against a table of live
 *    clients, without a process-wide lock), never a crash.
 *  - Results. Every call that can fail returns `int`: VC_OK (0) or a negative
 *    VC_ERR_* code; vc_strerror() gives static text. Every call that fails on a
 *    client records why in vc_last_error() (replacing the reason of any earlier
 *    failure), argument checks included; vc_client_create, vc_set_alsa_config and
 *    vc_list_devices, which take no client, record theirs for vc_last_error(NULL).
 *    A stream that has ended (vc_stream_stop, withdrawn by the server, or ended with
 *    the session or its channel) is unknown to later calls (VC_ERR_NOT_FOUND), and
 *    vc_last_error says how it ended ("no stream 257: it ended with the session
 *    (the server closed the connection)") until a later stream that took its slot
 *    (its id then differs) has ended too (then: "no stream 257").
 *  - Config structs come from a `*_default()` function and are then edited by field
 *    name, so new fields never break old callers (see the ABI policy below).
 *  - Audio at the API is interleaved int16_t (or float, full scale ±1.0, in the
 *    *_f32 variants); `frames` counts sample frames (one sample per channel).
 *    Audio in is 48 kHz unless a stream says otherwise (vc_stream_desc.sample_rate);
 *    audio out (sinks, pulls, recordings) is 48 kHz stereo unless the host asks for
 *    another format (vc_set_output_format). The engine runs at 48 kHz inside and
 *    converts at the edges with SpeexDSP's resampler (quality:
 *    vc_client_config.resampler_quality), from buffers allocated beforehand.
 *  - Thread safety. Unless a function says otherwise it may be called from any
 *    thread, concurrently with any other function on the same client.
 *  - Callback safety. Callbacks (events, mixed output sink, log) run on threads
 *    of the library, never under a lock of the library; the per-speaker sink runs
 *    on the thread that renders (possibly a host thread inside vc_read_mixed_pcm)
 *    under the render lock, which no function it may call takes. From inside a callback
 *    (of any client: also on one client's callback calling another client) only
 *    functions marked "callback-safe: yes" may be called; the others return
 *    VC_ERR_STATE there rather than deadlock. Clearing or replacing a callback
 *    returns only after a call of it that is running has returned (so `user` may
 *    be freed right after). From inside that very callback, vc_set_event_callback
 *    returns at once; the sink setters return VC_ERR_STATE there.
 *  - Ownership. The library never keeps pointers the caller passes in, except the
 *    callback function pointers and their `user` pointers, which must stay valid
 *    until replaced or the client is destroyed. Strings it returns are static or
 *    copied into caller buffers.
 *
 * ABI policy: how the library grows without breaking programs already built.
 *
 *  libvoicecat.so.0 keeps running programs built against the header of an earlier
 *  0.x release, unchanged and without a rebuild. The rules that make it so:
 *  - Functions are only added. A function's prototype and meaning never change; a
 *    new behaviour comes as a new function (or a new field whose default keeps the
 *    old behaviour).
 *  - Enumerations, event types and result codes only gain values.
 *  - Struct fields are only appended at the end. A field is never removed, moved,
 *    resized, retyped or given another meaning.
 *  - When a release appends fields to a struct the host passes in or the library
 *    fills (config structs, vc_*_info arrays, stats), the library learns which
 *    layout a program was built with from symbol versions: every function that reads
 *    or writes that struct, its *_default() included, gets a new version
 *    (VOICECAT_0.<minor> in the library's version script), and the previous version
 *    stays, working on the previous layout (fields it lacks take their defaults;
 *    nothing is read or written past its end). The linker binds a program to the
 *    versions it was built against. Structs the library hands to a callback through
 *    a const pointer (vc_event) may grow without that: the host reads the fields it
 *    knows. tools/check_abi.py (run by `make c-test`) keeps the layouts of the last
 *    release and fails a build whose structs changed in any other way, or grew
 *    without the versioned entry points.
 *  What hosts do:
 *  - Make every config struct with its *_default() function and set fields by name.
 *    Never initialise one positionally (a rebuild against a newer header would shift
 *    values into other fields) or by zeroing, except vc_connect_params, whose
 *    defaults are all zero.
 *  - Ignore event types they do not know (vc_event_type_name() gives
 *    "VC_EVENT_UNKNOWN"), and treat any negative result as a failure, known code or
 *    not.
 *  - Size arrays for the vc_list_* functions with sizeof() of this header's structs.
 *  - Bindings that look symbols up by name at run time (dlsym, ctypes, cffi, JNA) get
 *    the newest versions: compare every struct they declare with vc_struct_size(name)
 *    and refuse a library whose sizes differ (the Python package does so when it
 *    loads the library), or ask for the version they were written for with dlvsym().
 *  - Check vc_version_number() (or look the symbol up) before using a function newer
 *    than the oldest release they support.
 */
#ifndef VOICECAT_H
#define VOICECAT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version --------------------------------------------------------------- */

#define VC_VERSION_MAJOR 0
#define VC_VERSION_MINOR 3
#define VC_VERSION_PATCH 0
/** (major << 16) | (minor << 8) | patch of this header. */
#define VC_VERSION_NUMBER ((VC_VERSION_MAJOR << 16) | (VC_VERSION_MINOR << 8) | VC_VERSION_PATCH)

/* ---- Result codes ---------------------------------------------------------- */

#define VC_OK                 0
#define VC_ERR_INVALID_ARG   -1   /**< NULL pointer, bad handle, out-of-range value */
#define VC_ERR_STATE         -2   /**< not allowed now (not connected, inside a callback, ...) */
#define VC_ERR_NOT_FOUND     -3   /**< unknown stream id, ssrc, channel or device */
#define VC_ERR_NETWORK       -4   /**< socket error, connection lost or refused */
#define VC_ERR_TIMEOUT       -5   /**< the server did not answer in time */
#define VC_ERR_PROTOCOL      -6   /**< the server sent something malformed */
#define VC_ERR_VERSION       -7   /**< the server speaks another protocol version */
#define VC_ERR_AUTH          -8   /**< wrong password, or server fingerprint mismatch */
#define VC_ERR_REJECTED      -9   /**< the server refused the request (limit, name taken, ...) */
#define VC_ERR_DEVICE       -10   /**< an audio device could not be opened or failed (or a recording's file could not be written) */
#define VC_ERR_CODEC        -11   /**< Opus rejected a configuration or frame */
#define VC_ERR_NO_MEMORY    -12   /**< allocation failed or a fixed capacity is full */
#define VC_ERR_UNSUPPORTED  -13   /**< not available in this build or configuration */
#define VC_ERR_BUFFER_TOO_SMALL -14 /**< a caller buffer cannot hold the result */

/* ---- Enumerations ---------------------------------------------------------- */

typedef enum vc_stream_kind {
    VC_STREAM_MIC = 0,          /**< a microphone; gated by VAD / push-to-talk */
    VC_STREAM_SCREEN_AUDIO = 1, /**< system / desktop audio for listening together */
    VC_STREAM_AUX_DEVICE = 2    /**< a second capture device */
} vc_stream_kind;

typedef enum vc_channel_mode { VC_MODE_MONO = 0, VC_MODE_STEREO = 1 } vc_channel_mode;

typedef enum vc_opus_application {
    VC_APP_VOIP = 0, VC_APP_AUDIO = 1, VC_APP_LOWDELAY = 2
} vc_opus_application;

/** How the MIC streams' input gate decides to transmit (seed §11). */
typedef enum vc_input_mode {
    VC_INPUT_VAD = 0,          /**< voice activation: frame RMS over a threshold, with a hang time (default) */
    VC_INPUT_PTT = 1,          /**< push-to-talk: only while vc_set_push_to_talk(c, 1) */
    VC_INPUT_CONTINUOUS = 2    /**< always transmit */
} vc_input_mode;

typedef enum vc_device_kind { VC_DEVICE_CAPTURE = 0, VC_DEVICE_PLAYBACK = 1 } vc_device_kind;

typedef enum vc_event_type {
    VC_EVENT_NONE = 0,
    VC_EVENT_CONNECTED = 1,            /**< session accepted; text = server name */
    VC_EVENT_DISCONNECTED = 2,         /**< code = VC_ERR_* reason (VC_OK when asked for); text = detail;
                                            the session's last event: every received stream's
                                            TALK_STOP (if talking) and REMOTE_STREAM_REMOVED come before it */
    VC_EVENT_CHANNEL_JOINED = 3,       /**< channel_id; text = channel name */
    VC_EVENT_USER_JOINED = 4,          /**< user_id; text = username */
    VC_EVENT_USER_LEFT = 5,            /**< user_id */
    VC_EVENT_REMOTE_STREAM_ADDED = 6,  /**< user_id, stream_id, ssrc, kind (vc_stream_kind), channels,
                                            text = username */
    VC_EVENT_REMOTE_STREAM_REMOVED = 7,/**< user_id, stream_id, ssrc, kind, text = username (also for one of
                                            this client's own streams the server withdrew) */
    VC_EVENT_TALK_START = 8,           /**< ssrc, user_id, kind, text = username: the first frame of a
                                            talkspurt was played (while nothing renders the mix: frames arrive).
                                            Raised as the block holding that frame is rendered: a sink or pull
                                            may get the block before the host reads the event, so a host that
                                            records a speaker from TALK_START on keeps a block or two from
                                            before it (the onset is in them) */
    VC_EVENT_TALK_STOP = 9,            /**< ssrc, user_id, kind, text = username: the talkspurt's last frame
                                            was played talk_hangover_ms ago (or no frame arrived for that long) */
    VC_EVENT_VOICE_DISCONNECTED = 10,  /**< media path lost (no keepalive echo); rebinding. code =
                                            VC_ERR_TIMEOUT, text = for how long no echo came. A change of
                                            this host's address (a NAT rebinding, a new network) is found
                                            the same way: the server drops media from an address it did not
                                            bind, so up to 2.5 s of audio is lost each way before it */
    VC_EVENT_VOICE_RECONNECTED = 11,   /**< media path back with fresh keys; text = how long after
                                            VC_EVENT_VOICE_DISCONNECTED (before it, no keepalive echo came for
                                            2.5 s: the path to the server and back was broken for up to that
                                            long, by the last keepalive's period less, as voice from the
                                            server does not prove the way back) */
    VC_EVENT_SERVER_MUTE_STATE = 12,   /**< user_id, muted, deafened (authoritative) */
    VC_EVENT_STREAM_STATE_UPDATE = 13, /**< ssrc, user_id, stream_id, kind, muted, hold, text = username:
                                            a remote publisher's own state of the stream (vc_set_stream_state) */
    VC_EVENT_ERROR = 14,               /**< code, text: an asynchronous error (VC_ERR_DEVICE: a device failed;
                                            kind = vc_device_kind, stream_id for a capture; it is reopened
                                            on a backoff. VC_ERR_PROTOCOL: a message from the server broke
                                            the rules and was refused, text names it; the session goes on;
                                            at most 20 at once, then 5 a second, the rest counted in the
                                            next one. After VC_EVENT_RECONNECTED: what could not be
                                            restored: the channel, with the server's refusal as code, e.g.
                                            VC_ERR_NOT_FOUND; a stream, VC_ERR_REJECTED and stream_id; those
                                            streams are stopped) */
    VC_EVENT_DEVICE_RESTORED = 15,     /**< a failed device is back: kind = vc_device_kind, stream_id for a
                                            capture, text = device name */
    VC_EVENT_RECONNECTING = 16,        /**< auto_reconnect: the control connection was lost (code = VC_ERR_*
                                            reason, text = detail); reconnecting with backoff. The session's
                                            remote streams are removed; local streams keep their ids */
    VC_EVENT_RECONNECTED = 17,         /**< auto_reconnect: the session is back: channel re-joined, local
                                            streams re-announced under the same stream ids (new ssrcs);
                                            user_id = the new session's user id, channel_id = the channel
                                            re-joined (0: none: the session was in none, or its channel could
                                            not be joined again: a VC_EVENT_ERROR after it says why; either way
                                            the local streams are stopped), text = server name. Delivered
                                            before every event of the new session (its CHANNEL_JOINED, the
                                            streams and users it hears of). The user and channel lists are the
                                            new session's (replaced at once, no USER_* events for the change) */
    VC_EVENT_GATE_OPENED = 18,         /**< local: a MIC stream's input gate opened (stream_id, ssrc, kind):
                                            its next frame goes out with the marker, starting a talkspurt */
    VC_EVENT_GATE_CLOSED = 19,         /**< local: a MIC stream's input gate closed (stream_id, ssrc, kind):
                                            the frame flagged last went out (the VAD's hang time ran out, the
                                            push-to-talk key was released, or the fed audio ran dry, was
                                            flushed or the stream stopped; a capture device's stream only
                                            when its device delivered nothing for 100 ms past the period it
                                            owed (about 120 ms after the last read): a read that comes
                                            late finds the audio in the device's buffer, four 20 ms
                                            periods as asked of ALSA; or when its device is switched,
                                            suspended or reopened); also when the stream ends with no
                                            frame sent (the session moved to another channel or ended) and just
                                            before VC_EVENT_RECONNECTING (nothing is sent in the gap; the gate opens
                                            again with the first frame after VC_EVENT_RECONNECTED). On a
                                            channel with DTX the encoder may also pause sending while the gate
                                            is open. */
    VC_EVENT_USER_CONNECTED = 20,      /**< user_id, channel_id (0 = none), muted, deafened (server mute),
                                            text = username: a user logged in to the server (vc_list_users) */
    VC_EVENT_USER_UPDATED = 21,        /**< user_id, channel_id, muted, deafened, text = username: a user's
                                            entry in vc_list_users changed; code = what changed, VC_USER_CHANGED_*
                                            bits (the channel, the server mute state, the published streams or
                                            their state) */
    VC_EVENT_USER_DISCONNECTED = 22,   /**< user_id, channel_id (the last one), text = username: a user left
                                            the server (or was kicked) */
    VC_EVENT_CHANNELS_CHANGED = 23,    /**< the server's channel list changed (the server reloaded its
                                            configuration): vc_list_channels has the new one */
    VC_EVENT_PROTECTION_CHANGED = 24,  /**< local: a published stream's loss protection changed with its
                                            listeners' loss (stream_id, ssrc, kind); text = what it is now and
                                            why, e.g. "FEC on, expected loss 3 % (listeners lose 2.4 %,
                                            2.0 % isolated; 2 reports)". The values: vc_get_send_stats */
    VC_EVENT_EVENTS_DROPPED = 25       /**< vc_poll_event only: the queue was full (event_queue_size) and
                                            its oldest events were dropped; code = how many since the last
                                            such event, text says so. It comes where they were, before the
                                            oldest event kept. What they told is still there to read (e.g.
                                            vc_list_users, vc_list_remote_streams, the stats); the event
                                            callback gets every event and never this one */
} vc_event_type;

/** Bits of the code of VC_EVENT_USER_UPDATED. */
#define VC_USER_CHANGED_CHANNEL     1  /**< moved to another channel (or to none) */
#define VC_USER_CHANGED_SERVER_MUTE 2  /**< server mute or deafen */
#define VC_USER_CHANGED_STREAMS     4  /**< published a stream, stopped one, or changed one's mute / hold */

/** The port a server listens on when none is named (0 means this port, to client and server alike). */
#define VC_DEFAULT_PORT 47800

/* ---- Structures ------------------------------------------------------------ */

/** Client settings. Get defaults from vc_client_config_default(). */
typedef struct vc_client_config {
    const char *client_name;       /**< sent to the server; copied; NULL = "libvoicecat"; at most 256
                                        bytes of UTF-8 without control characters */
    uint32_t keepalive_ms;         /**< TCP ping period and idle UDP keepalive period; default 5000, at
                                        least 50 (VC_ERR_INVALID_ARG). Keep it well under the server's idle
                                        limit (voicecat-server's reap_seconds, 30 s by default): a session
                                        that sends nothing for that long is dropped. While
                                        streams are active (local or remote) the UDP keepalive runs every
                                        0.5 s and the media path is declared lost 2.5 s after its last
                                        echo (VC_EVENT_VOICE_DISCONNECTED); idle, after 3.5 periods. The
                                        control connection is declared dead when nothing came on it for
                                        max(3 x keepalive_ms, 3 s) (a Ping is answered at once). */
    uint32_t max_remote_streams;   /**< receive slots preallocated (1..1024); default 32. A slot no
                                        stream has used costs about 60 KB of resident memory; one a
                                        stream played in, at most about 600 KB (its packet buffers).
                                        A remote stream announced while every slot is in use is not
                                        played: VC_EVENT_ERROR (VC_ERR_NO_MEMORY, its ssrc) says so,
                                        and when a slot frees the oldest such stream still in the
                                        channel is played from then on (VC_EVENT_REMOTE_STREAM_ADDED,
                                        then VC_EVENT_STREAM_STATE_UPDATE with the last mute / hold
                                        state the server told for it while it waited, if any; up to
                                        256 streams wait, later ones are not played) */
    uint32_t event_queue_size;     /**< events kept for vc_poll_event (1..65536); default 256 (oldest
                                        dropped past it: VC_EVENT_EVENTS_DROPPED then says how many) */
    int32_t external_playback;     /**< 1: open no playback device (see vc_set_external_playback); default 0 */
    const char *playback_device;   /**< ALSA PCM for playback; copied; NULL = "default" ("" is no name:
                                        VC_ERR_INVALID_ARG) */
    uint32_t talk_hangover_ms;     /**< VC_EVENT_TALK_STOP comes this long after the last frame of a talkspurt
                                        was played (0..5000); default 300 */
    const char *known_servers_path;/**< trust on first use: the known-servers file, `host:port fingerprint`
                                        a line; copied. NULL = the per-user default
                                        ($XDG_CONFIG_HOME/voicecat/known_servers, else
                                        $HOME/.config/voicecat/known_servers); "" = no store (then a connect
                                        needs server_fingerprint or allow_unverified). The first connect to
                                        a host:port records the fingerprint the server proved; a later one
                                        whose server proves another fails with VC_ERR_AUTH (vc_last_error
                                        shows both) and nothing is sent to it. Not consulted when a
                                        fingerprint is pinned. */
    int32_t auto_reconnect;        /**< 1: after the control connection is lost (server restart, ping
                                        timeout), reconnect with backoff (0.25 s doubling to 5 s, to the
                                        same verified identity), re-join the channel and re-announce the
                                        local streams (same stream ids, new ssrcs): VC_EVENT_RECONNECTING,
                                        then VC_EVENT_RECONNECTED. During the gap vc_stream_feed_pcm
                                        accepts audio as usual and each frame that comes due is dropped
                                        (not held for later; no error is raised, so no error storm;
                                        vc_stream_drain then returns VC_ERR_NETWORK saying how much, and
                                        vc_send_stats.frames_dropped counts them);
                                        vc_set_stream_state is kept and published once reconnected
                                        (as is a state set before the loss); join, stream start,
                                        vc_list_users, vc_list_channels and the admin calls return
                                        VC_ERR_STATE ("reconnecting to the server"). It stops (with
                                        VC_EVENT_DISCONNECTED) on a refusal that would not change by
                                        retrying: wrong password, changed fingerprint, version. Other
                                        refusals are retried. A server that has not yet noticed the old
                                        connection died (it went silent, not closed) still holds the
                                        old session: each attempt names it (the session's resume token,
                                        known only to this client), and the server ends it and lets the
                                        attempt in (a server without resume tokens refuses the same
                                        username until it reaps the old session: its reap_seconds, 30 s
                                        by default). vc_connect to the same server as the same username
                                        names the client's last session too. Each failed attempt is logged (vc_set_log_callback,
                                        level 1) with its reason, e.g. "reconnect attempt 3 failed: the
                                        server did not answer the handshake in time". Default 0:
                                        a lost connection ends the session (VC_EVENT_DISCONNECTED). */
    int32_t resampler_quality;     /**< SpeexDSP resampler quality 0..10 for every sample-rate conversion
                                        of this client (fed or captured audio at another rate, the output
                                        format, devices that do not run at 48 kHz); default 4. Higher is
                                        cleaner and costs more CPU per converted block. */
    uint32_t loss_report_ms;       /**< how often this client reports to the server what it loses of each
                                        stream it receives (docs/protocol.md, loss feedback), so their
                                        publishers can size their FEC; 0 = never (this listener's loss
                                        then does not count). 100..60000; default 1000 */
} vc_client_config;

/** Where and how to connect. */
typedef struct vc_connect_params {
    const char *host;               /**< name or address of the server */
    uint16_t port;                  /**< 0 = VC_DEFAULT_PORT (47800), as for voicecat-server */
    const char *username;           /**< 1..64 bytes of UTF-8 without control characters, unique on the
                                         server (VC_ERR_INVALID_ARG otherwise) */
    const char *password;           /**< server password, NULL = none; at most 1024 bytes */
    const char *server_fingerprint; /**< 64 hex digits to pin, NULL = trust on first use (the known-servers
                                         file, vc_client_config.known_servers_path) */
    uint32_t timeout_ms;            /**< for the whole connect; 0 = 5000 */
    int32_t allow_unverified;       /**< 1: connect even with neither a pinned fingerprint nor a known-servers
                                         file (the server's identity is then not checked and the password
                                         goes to whoever answers). Default 0: such a connect fails with
                                         VC_ERR_AUTH before anything is sent */
} vc_connect_params;

/** A channel's Opus configuration (seed §3). */
typedef struct vc_audio_config {
    uint32_t codec;                /**< 0 = Opus */
    vc_channel_mode mode;
    uint32_t sample_rate;          /**< caps the encoded bandwidth; PCM is always 48 kHz */
    uint32_t bitrate_bps;
    uint32_t frame_us;             /**< 2500, 5000, 10000, 20000, 40000 or 60000 */
    vc_opus_application application;
    int32_t fec;                   /**< in-band FEC allowed: each published stream starts with it and then
                                        follows its listeners' loss (off on a clean path); 0 = never */
    uint32_t expected_packet_loss; /**< percent: where each stream's OPUS_SET_PACKET_LOSS_PERC starts and the
                                        most it is raised to with its listeners' loss (vc_send_stats) */
    int32_t dtx;
    uint32_t complexity;           /**< 0..10 */
    int32_t dred;                  /**< used when the loaded libopus has DRED */
} vc_audio_config;

/** A stream to publish. Get defaults from vc_stream_desc_default(). */
typedef struct vc_stream_desc {
    vc_stream_kind kind;
    int32_t external_feed;         /**< 1: the host feeds PCM with vc_stream_feed_pcm; 0: a capture
                                        device; other values: VC_ERR_INVALID_ARG */
    const char *device;            /**< capture device when external_feed = 0; NULL = "default" ("" is
                                        no name: VC_ERR_INVALID_ARG); not read when external_feed = 1 */
    uint32_t channels;             /**< 1 or 2: the PCM the host feeds or the device gives */
    uint32_t max_queue_ms;         /**< external feed: the most audio the stream queues ahead of sending
                                        (0..600000); 0 = the default, 10000 (10 s) */
    uint32_t sample_rate;          /**< the rate of the PCM: external feed, what vc_stream_feed_pcm(_f32)
                                        gives; a device, the rate asked of it (a device that runs at
                                        another rate is converted from that one). 0 = 48000, else
                                        8000..192000. Anything but 48000 is resampled to 48 kHz before
                                        reframing (adds the resampler's few ms of delay). */
} vc_stream_desc;

/** Talker-side processing of a MIC stream (SpeexDSP). Get defaults from vc_send_processing_default(). */
typedef struct vc_send_processing {
    int32_t noise_suppression;     /**< stationary-noise suppression; default 0 */
    int32_t agc;                   /**< automatic gain control; default 0 */
    int32_t echo_cancellation;     /**< acoustic echo cancellation against the played mix; default 0 */
    float agc_level;               /**< AGC target: speech RMS as a fraction of full scale; default 0.125 (-18 dBFS) */
} vc_send_processing;

/** The listener's local settings for one remote stream (no protocol traffic). */
typedef struct vc_remote_stream {
    float gain;                    /**< linear, 0..4; default 1.0 */
    int32_t muted;                 /**< nonzero: muted; default 0 (read back as 0 or 1) */
    int32_t noise_reduction;       /**< nonzero: the listener's noise reduction on; default 0 (read
                                        back as 0 or 1) */
} vc_remote_stream;

/** A remote stream the client currently receives. */
typedef struct vc_remote_stream_info {
    uint32_t ssrc;
    uint32_t user_id;
    uint32_t stream_id;
    vc_stream_kind kind;
    uint32_t channels;             /**< of the channel's AudioConfig */
    int32_t talking;
    vc_remote_stream settings;
    char username[65];
    float level_rms_dbfs;          /**< the stream's decoded audio (after the listener's noise reduction,
                                        before gain and mute) over the last block rendered: RMS in dBFS
                                        (a full-scale sine reads -3.01); -120 for silence, and while
                                        nothing renders the mix (then nothing is decoded) */
    float level_peak_dbfs;         /**< the same block's peak sample in dBFS (a full-scale sine: 0) */
} vc_remote_stream_info;

/** Receive statistics of one remote stream. */
typedef struct vc_stream_stats {
    uint64_t packets_received;
    uint64_t packets_lost;         /**< seq gaps never filled */
    uint64_t duplicates;           /**< replayed or repeated seqs, dropped */
    uint64_t late;                 /**< dropped unplayed: arrived after their playout time, or dropped to
                                        shed excess delay (at a pause or a quiet frame when possible) */
    uint64_t underruns;            /**< the buffer ran dry mid-talkspurt */
    uint64_t fec_recovered;        /**< lost frames rebuilt from in-band FEC */
    uint64_t plc_frames;           /**< frames concealed by PLC */
    uint64_t dred_recovered;       /**< lost frames rebuilt from DRED */
    uint32_t target_depth_ms;
    uint32_t current_depth_ms;
    int32_t talking;
} vc_stream_stats;

/** Connection statistics. */
typedef struct vc_connection_stats {
    uint32_t media_rtt_ms;         /**< from the last keepalive echo, whole ms (under 1 ms reads 1);
                                        0 = none yet */
    uint32_t control_rtt_ms;       /**< from the last Ping/Pong, whole ms (under 1 ms reads 1);
                                        0 = none yet */
    uint64_t bytes_in, bytes_out;  /**< UDP payload bytes: in, every media datagram received with a valid
                                        header (voice, keepalive echoes, binding answers); out, the voice
                                        frames sent (keepalives: keepalives_sent) */
    uint64_t packets_in, packets_out; /**< the same datagrams, counted */
    uint64_t auth_failures;        /**< media datagrams that failed authentication */
    int32_t voice_connected;       /**< 1 while the media path is bound and answering */
    uint64_t keepalives_sent;      /**< media-path keepalives sent this session (every 0.5 s while streams
                                        are active, else every keepalive_ms) */
    uint64_t keepalives_lost;      /**< of those, the ones whose echo did not come within 2 s: the media
                                        path's loss is keepalives_lost / keepalives_sent */
} vc_connection_stats;

/** A user on the server (vc_list_users). */
typedef struct vc_user_info {
    uint32_t user_id;
    uint32_t channel_id;           /**< the channel the user is in; 0 = none */
    int32_t server_muted;          /**< server mute: the server drops the user's audio */
    int32_t server_deafened;       /**< server deafen: the server sends the user no audio */
    uint32_t stream_count;         /**< streams the user publishes (vc_list_user_streams lists them) */
    uint32_t stream_kinds;         /**< bit (1 << kind) set for each vc_stream_kind among them */
    int32_t is_self;               /**< 1 for this client's own session */
    char username[65];
} vc_user_info;

/** A stream a user publishes (vc_list_user_streams), whichever channel it is in. */
typedef struct vc_user_stream {
    uint32_t user_id;
    uint32_t stream_id;            /**< the publisher's stream id */
    uint32_t ssrc;                 /**< the stream's ssrc (vc_remote_stream_info's, where it is received) */
    vc_stream_kind kind;
    int32_t muted;                 /**< the publisher's own state of it (vc_set_stream_state) */
    int32_t hold;
} vc_user_stream;

/** A channel on the server (vc_list_channels). */
typedef struct vc_channel_info {
    uint32_t channel_id;
    uint32_t member_count;         /**< users in it */
    int32_t is_current;            /**< 1 for the channel this client is in */
    vc_audio_config audio;         /**< its AudioConfig: what streams published there are encoded with */
    char name[65];
} vc_channel_info;
/**
 * Send statistics of one published stream, and its loss protection. A stream's
 * in-band FEC and the expected packet loss its encoder is told (OPUS_SET_INBAND_FEC,
 * OPUS_SET_PACKET_LOSS_PERC) start at the channel's `fec` / `expected_packet_loss`
 * and then follow the loss its listeners report, which the server sums up for the
 * publisher (the report at a high quantile of the listeners): FEC off on a clean
 * path, on when isolated losses are seen, with an expected loss of a third of the
 * measured loss (at least 1 %: Opus then spends fewer bits on the FEC copy and the
 * frames that arrive keep more of their quality; bench-quality in
 * docs/benchmarks.md), never more
 * than the channel's setting. More protection is taken at once, less only after
 * three reports in a row ask for it (about 3 s).
 */
typedef struct vc_send_stats {
    uint32_t ssrc;                 /**< the stream's current ssrc */
    uint64_t packets_sent;         /**< frames sent (empty DTX frames are not sent) */
    uint64_t bytes_sent;           /**< their datagram bytes (header and tag included) */
    uint64_t fec_packets;          /**< of the frames sent, those that carried in-band FEC (header flag) */
    int32_t fec;                   /**< 1 while the encoder's in-band FEC is on */
    uint32_t packet_loss_perc;     /**< the expected loss the encoder is told, percent */
    int32_t channel_fec;           /**< the channel's fec: the ceiling (FEC never on when 0) and start */
    uint32_t channel_expected_loss;/**< the channel's expected_packet_loss: the ceiling and start, percent */
    uint64_t feedback_received;    /**< loss feedback messages the server sent for this stream */
    uint64_t protection_changes;   /**< times the protection changed (VC_EVENT_PROTECTION_CHANGED) */
    uint32_t listeners;            /**< listener reports the last feedback acted on summed up (0: none yet) */
    uint32_t reported_expected;    /**< the last feedback acted on: frames expected in its window, ... */
    uint32_t reported_lost;        /**< ... lost before any recovery, ... */
    uint32_t reported_isolated;    /**< ... and of those, lost alone (what in-band FEC rebuilds whole) */
    uint64_t frames_dropped;       /**< frames that came due while nothing could be sent (an auto_reconnect
                                        gap) and were dropped: a host feeding in real time learns here how
                                        much of its audio nobody heard (vc_stream_drain reports only the
                                        audio fed since the queue was last empty) */
    uint64_t frames_sent_path_lost;/**< frames sent while the media path was lost (after
                                        VC_EVENT_VOICE_DISCONNECTED, until VC_EVENT_VOICE_RECONNECTED or
                                        an auto_reconnect's new session): sent as usual, since the path
                                        may still work one way, but most likely heard by nobody (counted
                                        in packets_sent too). A lower bound: the path was silent for 2.5 s
                                        (while streams are active) before the event said so */
    uint64_t device_overruns;      /**< a device stream: times its capture device overran (ALSA: it
                                        captured more than its buffer holds before it was read, and that
                                        audio was lost before it was sent: a gap listeners hear that no
                                        network caused; the stream goes on), over every device the stream
                                        captured from; 0 for an external feed */
    uint64_t device_failures;      /**< a device stream: times its capture device failed or stopped
                                        delivering (each a VC_EVENT_ERROR; it is reopened on a backoff) */
} vc_send_stats;

/**
 * Statistics of the client's playback device (vc_get_playback_stats): what it lost
 * and what it holds. The counts are over every playback device the client has
 * played on, for the client's life (0 for one that never played on a device).
 */
typedef struct vc_playback_stats {
    uint64_t device_underruns;     /**< times the playback device ran dry and was restarted (ALSA: an
                                        underrun, recovered; a gap the listener heard that no network
                                        caused: the client was not scheduled in time, or the card's
                                        position jumped) */
    uint64_t device_failures;      /**< times it failed, could not be opened at vc_connect or
                                        vc_audio_restart, or stopped playing (each a VC_EVENT_ERROR with
                                        VC_ERR_DEVICE; it is retried on a backoff) */
    uint32_t device_buffered_ms;   /**< what the open sound card held just after the last block was
                                        written to it (written and not yet played: how long the newest
                                        audio waits in it, beyond the card's own output latency): about
                                        45 ms with 5 ms ALSA periods, more on a card whose periods are
                                        longer (see vc_set_external_playback); 0 while none is open, or
                                        for a PCM that does not play in real time (a file or null
                                        plugin) */
} vc_playback_stats;

/** An audio device (an ALSA PCM name usable as vc_stream_desc.device or playback_device). */
typedef struct vc_device_info {
    char name[128];
    char description[256];
    int32_t is_monitor;            /**< capture only: 1 when the device records what the system plays (a
                                        PulseAudio / PipeWire monitor source, as ALSA lists it, or a PCM
                                        named "...monitor..."): usable for VC_STREAM_SCREEN_AUDIO */
} vc_device_info;

/** One event. Text fields are NUL-terminated copies. */
typedef struct vc_event {
    vc_event_type type;
    int32_t code;
    uint32_t user_id;
    uint32_t ssrc;
    uint32_t stream_id;
    uint32_t channel_id;
    uint32_t kind;
    uint32_t channels;
    int32_t muted;
    int32_t deafened;
    int32_t hold;
    char text[256];
} vc_event;

typedef struct vc_client vc_client;

/** Event callback: runs on the client's network thread, one event at a time, in
 *  the order the events happened. Callback-safe calls only. */
typedef void (*vc_event_fn)(void *user, const vc_event *event);
/** Log callback: level 0 error, 1 warning, 2 info, 3 debug; `message` valid during
 *  the call. Runs on whichever thread logs (a library thread, or a host thread
 *  inside a failing call), possibly on several at once. */
typedef void (*vc_log_fn)(void *user, int level, const char *message);
/** Mixed output sink: the FINAL mix in the output format (48 kHz stereo unless set with
 *  vc_set_output_format), `frames` sample frames of `channels` interleaved channels. */
typedef void (*vc_pcm_sink_fn)(void *user, const int16_t *pcm, uint32_t frames, uint32_t channels);
/** Per-speaker sink: one block of one remote stream (`ssrc`, published by `user_id`, of
 *  `kind`): its decoded audio after the listener's noise reduction, before gain, mute
 *  and mixing, in the output format: `frames` sample frames of `channels` interleaved
 *  channels (a mono stream in a stereo format has L = R). `pcm` is valid during the call. */
typedef void (*vc_remote_stream_sink_fn)(void *user, uint32_t ssrc, uint32_t user_id, vc_stream_kind kind,
                                         const int16_t *pcm, uint32_t frames, uint32_t channels);

#ifndef VC_TYPES_ONLY

/* ---- Global ---------------------------------------------------------------- */

/** Version of the loaded library, as VC_VERSION_NUMBER. Thread-safe; callback-safe: yes. */
uint32_t vc_version_number(void);
/** Version string "major.minor.patch" (static). Thread-safe; callback-safe: yes. */
const char *vc_version_string(void);
/** Static text for a result code; unknown codes give "unknown error". Callback-safe: yes. */
const char *vc_strerror(int code);
/**
 * The name of an event type as this header spells it, e.g. "VC_EVENT_TALK_START"
 * (static text); a value this library does not know gives "VC_EVENT_UNKNOWN".
 * Thread-safe; callback-safe: yes.
 */
const char *vc_event_type_name(vc_event_type type);
/**
 * sizeof() of a public struct as the library was built, e.g. "vc_stream_stats", so
 * FFI callers can check their layouts. Returns 0 for an unknown name or NULL.
 * Callback-safe: yes.
 */
size_t vc_struct_size(const char *name);
/**
 * Routes the library's log lines to `fn` (NULL = no logging, the default). Global
 * for the process. `fn` is called outside any lock of the library (but for a failing
 * call made inside a per-speaker sink, which logs under that client's render lock),
 * from any thread that logs, never from the audio path in steady state. A line logged while `fn`
 * runs on the same thread (a failing call made from inside it) is dropped rather
 * than passed to `fn` again. `fn` is a callback of every client: inside it the
 * functions that are not callback-safe return VC_ERR_STATE and vc_client_destroy is
 * ignored, whichever thread it runs on. Replacing or clearing returns once every call of the
 * previous `fn` that had started has returned; called from inside `fn` it returns
 * at once. Thread-safe; callback-safe: yes.
 */
void vc_set_log_callback(vc_log_fn fn, void *user);

/* ---- Lifecycle and session ------------------------------------------------- */

/**
 * Adds PCM definitions in ALSA configuration syntax for this process, for example
 * file-backed PCMs or plugin chains:
 *   pcm.mic { type file slave.pcm { type null } file "/dev/null" infile "in.raw" format "raw" }
 * Names defined here are opened from this configuration, all others from ALSA's
 * own. Replaces what an earlier call set; NULL clears. Returns VC_ERR_INVALID_ARG
 * when the text does not parse (the previous configuration stays; vc_last_error(NULL,
 * ...) gives ALSA's reason). Affects devices
 * opened afterwards. Thread-safe; callback-safe: yes.
 */
int vc_set_alsa_config(const char *config_text);

/**
 * Lists capture or playback devices: ALSA's name hints plus the PCMs defined with
 * vc_set_alsa_config. A defined PCM is listed for both directions, with the
 * description "defined by vc_set_alsa_config", unless its definition has a hint block
 * as ALSA's own configuration does: hint.ioid "Input" lists it for capture only,
 * "Output" for playback only, and hint.description is its description (and marks a
 * monitor source when it says "monitor"), e.g.
 *   pcm.desk { type pulse device "out.monitor" hint { ioid "Input" description "Desktop monitor" } }
 * Fills up to `cap` entries (out may be NULL when cap is 0) and
 * sets *count to the total. Capture devices that record what the system plays
 * (monitor sources) have is_monitor = 1: name one of them as the device of a
 * VC_STREAM_SCREEN_AUDIO stream to share the desktop's sound. Returns
 * VC_ERR_INVALID_ARG for count NULL, out NULL with cap above 0, or an unknown kind
 * (vc_last_error(NULL, ...) says which). Thread-safe; callback-safe: yes.
 */
int vc_list_devices(vc_device_kind kind, vc_device_info *out, size_t cap, size_t *count);

/** Default client settings. Callback-safe: yes. */
vc_client_config vc_client_config_default(void);

/** Default connect parameters: everything NULL or 0 (port 0 = 47800, timeout 0 = 5000 ms);
 *  set host and username. Callback-safe: yes. */
vc_connect_params vc_connect_params_default(void);

/** Default stream description: a MIC fed by the host (external_feed 1), mono, default
 *  device and queue. Callback-safe: yes. */
vc_stream_desc vc_stream_desc_default(void);

/**
 * Creates a client. `cfg` may be NULL for defaults. On success *out is the new
 * handle. Returns VC_ERR_INVALID_ARG (out NULL, bad config), VC_ERR_NO_MEMORY,
 * VC_ERR_CODEC; vc_last_error(NULL, ...) then says which field was wrong and why
 * ("vc_client_create: event_queue_size must be 1..65536 (got 0)"). Callback-safe: yes.
 */
int vc_client_create(const vc_client_config *cfg, vc_client **out);

/**
 * Disconnects (if connected), stops every thread of the client and frees it.
 * NULL is a no-op. May be called while other threads are inside calls on the same
 * client: a connect in progress is cancelled, blocking calls return promptly (join
 * and stream start VC_ERR_STATE; vc_poll_event with the VC_EVENT_DISCONNECTED the
 * destroy raised if the client was connected, else 0 events; vc_stream_drain
 * VC_ERR_NOT_FOUND: its stream stopped), and destroy waits for every call in
 * flight before it frees the client. Blocks until the client's
 * threads have finished. The handle is invalid afterwards (later calls with it
 * return VC_ERR_INVALID_ARG). Of the events the teardown raises only that
 * DISCONNECTED is queued (no GATE_CLOSED, TALK_STOP or REMOTE_STREAM_REMOVED for
 * what it ends), and the event callback is cleared first: it is not called for
 * it. Must not be called from inside a callback of the
 * same client, nor from inside any client's per-speaker sink (vc_remote_stream_sink_fn:
 * that thread holds a render lock the destroyed client's event callback may be waiting
 * for). It is then ignored, an error is logged (dropped inside the log callback) and
 * vc_last_error(c, ...) says so. From another client's event callback or mixed sink it
 * works as from any thread (it waits for this client's threads), but two clients must
 * not destroy each other from their callbacks at the same time: each destroy would
 * wait for the other's thread (a host that tears down both legs of a bridge does it
 * from a thread of its own).
 */
void vc_client_destroy(vc_client *c);

/**
 * Connects to a server: TCP, handshake, Hello, then binds the UDP media path.
 * Blocks until the session is accepted or fails, at most timeout_ms.
 * Returns VC_OK, VC_ERR_INVALID_ARG, VC_ERR_STATE (already connected),
 * VC_ERR_NETWORK (also "server: the server is shutting down"), VC_ERR_TIMEOUT (a
 * server holds its answer to an address that sent wrong passwords, up to 16 s by
 * default: a client behind it with the right one waits too, and vc_last_error says
 * so), VC_ERR_VERSION, VC_ERR_AUTH (wrong password;
 * fingerprint mismatch with the pin or with the known-servers file — then nothing
 * is sent after the handshake and vc_last_error names both fingerprints; or
 * neither a pin, a known-servers file nor allow_unverified — then nothing is sent
 * at all), VC_ERR_REJECTED (username taken, server full), VC_ERR_PROTOCOL (the
 * server's HelloResult broke the rules). VC_ERR_INVALID_ARG for a NULL or empty host,
 * for a username that is not 1..64 bytes of UTF-8 without control characters and for
 * a password over 1024 bytes (longer than any server's).
 * The password is sent only
 * after the server's identity was checked.
 * The fingerprint seen is available from vc_get_server_fingerprint() even when
 * the connect fails with VC_ERR_AUTH. A vc_disconnect() or vc_client_destroy()
 * from another thread cancels a connect in progress (VC_ERR_STATE). VC_EVENT_CONNECTED
 * is delivered (by the network thread) before any other event of the session.
 * Callback-safe: no.
 */
int vc_connect(vc_client *c, const vc_connect_params *p);

/**
 * Leaves the server: stops every stream, closes the sockets, removes every
 * received stream (VC_EVENT_TALK_STOP for one talking, VC_EVENT_REMOTE_STREAM_REMOVED),
 * raises VC_EVENT_DISCONNECTED (code VC_OK) as the session's last event. A connect in
 * progress on another thread is cancelled instead. Returns VC_ERR_STATE when
 * neither connected nor connecting. Callback-safe: no.
 */
int vc_disconnect(vc_client *c);

/**
 * Copies the server's fingerprint (64 lowercase hex digits and a NUL) into buf.
 * len must be at least 65. Returns VC_ERR_STATE before any handshake,
 * VC_ERR_BUFFER_TOO_SMALL. Callback-safe: yes.
 */
int vc_get_server_fingerprint(vc_client *c, char *buf, size_t len);

/**
 * Joins a channel by name and blocks until the server answers. Streams published
 * in another channel are withdrawn by the server and must be started again; the
 * previous channel's remote streams are removed (VC_EVENT_REMOTE_STREAM_REMOVED),
 * then VC_EVENT_CHANNEL_JOINED is raised, then the new channel's streams are
 * added (VC_EVENT_REMOTE_STREAM_ADDED). Joining the channel the session is in
 * already keeps this client's streams (they go on sending); its remote streams are
 * removed and added again as above.
 * Returns VC_ERR_NOT_FOUND (no such channel), VC_ERR_STATE (not connected, or
 * reconnecting), VC_ERR_TIMEOUT (no answer in 5 s; the server may still apply the join later: then
 * VC_EVENT_CHANNEL_JOINED follows and vc_get_channel_audio names that channel),
 * VC_ERR_NETWORK (the connection ended before the answer came),
 * VC_ERR_INVALID_ARG (a name that is not 1..64 bytes of UTF-8 without control
 * characters), VC_ERR_PROTOCOL (the server's answer broke the rules: the client is
 * then in no channel). Callback-safe: no.
 */
int vc_join_channel(vc_client *c, const char *name);

/** The joined channel's AudioConfig. VC_ERR_STATE when in no channel. Callback-safe: yes. */
int vc_get_channel_audio(vc_client *c, vc_audio_config *out);

/* ---- Publishing streams (send path) ----------------------------------------- */

/**
 * Announces a stream in the joined channel and waits for its ssrc. The stream is
 * encoded with the channel's AudioConfig (mode, bitrate, frame size, ...).
 * external_feed = 1: the host feeds PCM with vc_stream_feed_pcm.
 * external_feed = 0: a capture thread reads `device` (NULL = "default") in 20 ms
 * periods with `channels` channels (or the other of 1 and 2 when the device offers
 * only that: downmixed, or read as L = R), at `sample_rate` or the rate the device offers
 * instead (resampled to 48 kHz); the send path reframes to the
 * channel's frame size and converts to its mode (mono upmixed L = R). For
 * SCREEN_AUDIO name a monitor or loopback capture device (for example a PulseAudio
 * or PipeWire monitor through ALSA's pulse plugin). MIC streams pass the input gate
 * (vc_set_input_mode); SCREEN_AUDIO and AUX_DEVICE never do.
 * On success *out_stream_id names it in later calls. Returns VC_ERR_STATE (no
 * channel; or the session moved to another channel, a vc_join_channel on another
 * thread, after the server announced the stream in the one it left: the move
 * withdrew it, start it again), VC_ERR_INVALID_ARG (channels not 1 or 2, unknown kind),
 * VC_ERR_REJECTED (stream limit), VC_ERR_DEVICE (the capture device cannot be
 * opened; the text from vc_last_error gives ALSA's reason), VC_ERR_CODEC,
 * VC_ERR_INVALID_ARG (sample_rate not 0 and outside 8000..192000),
 * VC_ERR_TIMEOUT (the server did not answer in 5 s: a stream it announces later
 * is withdrawn), VC_ERR_NETWORK (the connection ended before the answer came).
 * Callback-safe: no.
 */
int vc_stream_start(vc_client *c, const vc_stream_desc *d, uint32_t *out_stream_id);

/**
 * Stops a stream: audio still queued is dropped (call vc_stream_drain first to have
 * it sent), a talkspurt still open ends with a frame carrying the last-frame flag
 * (a stream that has gone quiet sends nothing more), then the server is told.
 * Returns VC_ERR_NOT_FOUND for an unknown id. Callback-safe: no.
 */
int vc_stream_stop(vc_client *c, uint32_t stream_id);

/**
 * Feeds PCM to an external-feed stream: `frames` sample frames of `channels` (1 or
 * 2) interleaved int16 at the stream's sample_rate (vc_stream_desc; 48 kHz by
 * default), any amount, at any time (`frames` 0 feeds nothing, with `pcm` NULL or
 * not: the stream and `channels` are still checked). PCM at another rate is first resampled to
 * 48 kHz (in preallocated blocks; the resampler carries its state from call to
 * call, so blocks of any size join seamlessly). The PCM is reframed to
 * the channel's frame size, converted to the channel's mode (mono upmixed L = R,
 * stereo averaged for mono) and queued; frames are Opus-encoded, sealed and sent
 * in talkspurts paced at real time: frame k of a talkspurt goes out at the later of
 * the moment it is complete and the talkspurt's start + k frames. So a host feeding
 * in real time gets no added delay but the start hold below (frames due now are sent
 * on the calling thread)
 * and a host feeding a whole file at once is heard at real time (the client's
 * sender thread sends the rest). Blocks need not be whole frames (10 ms or 30 ms
 * blocks on 20 ms frames are one talkspurt), and a block may be fed in pieces (calls
 * within 1 ms of each other). Blocks that are not whole frames and do not divide a
 * frame complete frames unevenly (a 30 ms block brings one 20 ms frame or two; a
 * 512-sample block completes one every second block, now and then the next one);
 * so that every frame still leaves in its slot, a talkspurt's first frame is held,
 * from the call that completes it, by the worst of that unevenness, reckoned from
 * that block's length: less than a frame at 48 kHz (10 ms for 30 ms blocks on 20 ms
 * frames, 8 ms for 512-sample blocks; none for blocks of whole frames, blocks that
 * divide a frame, or blocks longer than 100 ms; at another sample_rate the same,
 * reckoned in 48 kHz audio: the resampler's 1-2 ms of delay comes first, so a block
 * of 20 ms at 22.05 kHz gives a whole 20 ms frame from the first one). The hold is the
 * delay listeners' jitter buffers would otherwise have to learn; the talkspurt's
 * timestamps start with it, and a stream stopped within it drops the held audio with
 * the rest of the queue. A host slower than real time (a loop that sleeps a
 * block's length after each feed runs a few per cent slow) falls behind: each time
 * its feeding has stayed a whole frame further behind real time than it was at its
 * best earlier in the talkspurt, measured to the sample, for 25 to 50 frames (0.5-1 s
 * of 20 ms frames), a frame's time is skipped (listeners conceal one frame there; at
 * most one in five frames) instead of every later frame reaching listeners later,
 * which they would take for network jitter and answer with ever more delay (10 ms
 * blocks 5 % slow on loopback: their target stays near 80 ms; without skips it grew
 * to 150 ms in 6 s, and to 200-320 ms over 12 s in a trial). A host's next block is
 * expected when the audio of its last block has passed (or a frame after the last
 * frame sent, if later); when the queue is still dry a slack after that (5 ms for a
 * host that feeds steadily, up to 40 ms for one whose blocks come late, learned
 * against its own last block; no slack when the last block brought more than a
 * second, such as a whole file, unless this host was seen to feed such blocks in
 * real time), the talkspurt ends: the partial frame is padded and sent with the
 * last-frame flag; the next audio starts a new talkspurt (marker) whose timestamps
 * advance by the wall-clock time that passed (for a block that came within 40 ms
 * after the talkspurt was ended waiting for it: right after that talkspurt), so
 * listeners hear a pause. That last frame comes the slack later than the others;
 * a listener learns how much from the stream's recent talkspurt ends and, from its
 * second talkspurt on, starts its talkspurts with up to 20 ms of it (or a frame, if
 * longer) covered (a few ms more delay for a steady host), so one whose output cannot
 * wait for it (a playback device, a host pulling the mix) does not conceal it; a last
 * frame later than that costs the periods it is late, then the talkspurt ends. Never
 * blocks (a full
 * socket buffer drops the frame) and does not allocate; it does the work of what it
 * is given on the calling thread (copying it into the queue, and a stream at another
 * rate than 48 kHz resamples it there: measured on a 2-core VM, 0.1 ms of CPU per
 * second of 48 kHz audio, 2.5 ms at 44.1 kHz mono, 3.6 ms at 192 kHz stereo, so a
 * call with many minutes of resampled audio takes a second or more). While the server mutes this
 * user nothing is sent. Returns VC_ERR_NOT_FOUND (unknown stream),
 * VC_ERR_INVALID_ARG, VC_ERR_STATE (not an external-feed stream), VC_ERR_NO_MEMORY
 * when the queue cannot take the whole block (max_queue_ms; nothing of this call
 * is queued and nothing queued is lost: retry after vc_stream_queued_ms falls, which
 * never exceeds max_queue_ms (or two frames, if more); a resampled stream's check
 * counts the resampler's upper bound of its output, 2 samples more per 960 input
 * frames, so a block may be refused that much early: about 2 ms per second of
 * audio at 44.1 kHz, 8 ms at 192 kHz).
 * Thread safety: calls for one stream must not overlap (one feeding thread per
 * stream). Callback-safe: yes.
 */
int vc_stream_feed_pcm(vc_client *c, uint32_t stream_id, const int16_t *pcm, uint32_t frames, uint32_t channels);

/**
 * vc_stream_feed_pcm for float PCM: `frames` sample frames of `channels` interleaved
 * floats, full scale ±1.0 (values beyond are clipped, NaN is silence), at the
 * stream's sample_rate. Converted to int16 a block at a time into a buffer of the
 * stream (no allocation), then exactly as vc_stream_feed_pcm (same returns, same
 * queue, same pacing; the two may be mixed on one stream). Thread safety: as
 * vc_stream_feed_pcm. Callback-safe: yes.
 */
int vc_stream_feed_pcm_f32(vc_client *c, uint32_t stream_id, const float *pcm, uint32_t frames, uint32_t channels);

/**
 * The input level of a published stream: the last frame (the channel's frame size,
 * 20 ms by default) after send processing (NS / AGC / AEC), before the input gate, as
 * it went through the send path (paced at real time, so audio fed ahead is measured
 * when it is sent). *rms_dbfs is its RMS, *peak_dbfs its largest sample, in dBFS
 * (full scale 32768; a full-scale sine reads -3.01 and 0). -120 for silence and when
 * no frame went through in the last 250 ms. Works for every kind (the gate applies
 * to MIC streams only). Either pointer may be NULL, not both. Returns
 * VC_ERR_NOT_FOUND (unknown stream), VC_ERR_INVALID_ARG. Callback-safe: yes.
 */
int vc_get_input_level(vc_client *c, uint32_t stream_id, float *rms_dbfs, float *peak_dbfs);

/**
 * How much audio fed to a stream is waiting to be sent, in ms (queued frames plus
 * the partial one), into *out_ms. Returns VC_ERR_NOT_FOUND, VC_ERR_INVALID_ARG.
 * Callback-safe: yes.
 */
int vc_stream_queued_ms(vc_client *c, uint32_t stream_id, uint32_t *out_ms);

/**
 * Waits until everything fed to the stream has been sent (the last partial frame
 * included, which goes out when the talkspurt ends), at most timeout_ms (negative
 * = no limit). Returns VC_OK, VC_ERR_TIMEOUT (audio still queued),
 * VC_ERR_NETWORK (the queue is empty, but some of the audio fed since it was last
 * empty came due while the connection was down, in an automatic reconnect's gap,
 * and was dropped, not sent, or was sent while the media path was lost, between
 * VC_EVENT_VOICE_DISCONNECTED and VC_EVENT_VOICE_RECONNECTED, and most likely
 * reached nobody: vc_last_error says how many ms of each; the same answer
 * until more audio is fed to the empty queue; a host feeding in real time, whose
 * queue is rarely empty for long, reads every such frame in
 * vc_send_stats.frames_dropped and frames_sent_path_lost; or the session was lost, not ended by the host,
 * while audio was still queued, or after a reconnect's gap had dropped some or some
 * was sent while the media path was lost: the stream ended with it, and
 * vc_last_error says why and how many ms were not sent (those still queued and those
 * the gap dropped) and how many were sent while the media path was lost; it returns once VC_EVENT_DISCONNECTED is in the
 * queue vc_poll_event reads (before the event callback has seen it), and a later
 * drain naming that stream gets the same answer while the client remembers how it
 * ended (as vc_last_error's "it ended with the session" for other calls: until a
 * later stream that took its slot ends); VC_ERR_TIMEOUT if the timeout ends first),
 * VC_ERR_NOT_FOUND (unknown stream, or stopped while waiting, or its session ended
 * by vc_disconnect or vc_client_destroy), VC_ERR_STATE from inside a callback.
 * Callback-safe: no.
 */
int vc_stream_drain(vc_client *c, uint32_t stream_id, int timeout_ms);

/**
 * Drops the audio queued on a stream (barge-in) and ends its talkspurt: the partial
 * frame, if any, goes out padded with the last-frame flag. Returns VC_ERR_NOT_FOUND.
 * Callback-safe: yes.
 */
int vc_stream_flush(vc_client *c, uint32_t stream_id);

/**
 * Reopens a device stream's capture with 1 or 2 channels (stereo capture encodes
 * real stereo on a stereo channel; a mono capture on a stereo channel is upmixed
 * L = R; a device that offers only the other count is converted: downmixed, or read
 * as L = R). The talkspurt under way ends; the reopened device's audio starts a new
 * one. For an external-feed stream it only records the value (vc_stream_feed_pcm
 * names its channel count on every call). Returns VC_ERR_NOT_FOUND, VC_ERR_INVALID_ARG,
 * VC_ERR_DEVICE (the previous capture is kept: reopened, or, when it cannot be at
 * once, a failure as a device lost while capturing, VC_EVENT_ERROR and a count in
 * vc_send_stats device_failures unless it was away already, retried on a backoff,
 * VC_EVENT_DEVICE_RESTORED when it opens). A device that was
 * away and opens now raises VC_EVENT_DEVICE_RESTORED. Callback-safe: no.
 */
int vc_set_capture_channels(vc_client *c, uint32_t stream_id, uint32_t channels);

/** Default send processing (everything off, AGC target 0.125). Callback-safe: yes. */
vc_send_processing vc_send_processing_default(void);

/**
 * Sets the talker-side processing of a MIC stream: SpeexDSP noise suppression, AGC
 * and acoustic echo cancellation (an MDF echo canceller plus the preprocessor's
 * residual-echo suppressor). The echo canceller's far-end reference is the mix this
 * client actually plays (on the playback device, through the sink, or pulled with
 * vc_read_mixed_pcm), taken in the order it was produced: the capture side consumes
 * one 10 ms block of it per 10 ms of microphone signal, so the echo delay the
 * canceller sees is the device or host buffering between the two, which its 250 ms
 * tail covers. Processing runs before the input gate; the VAD stays the energy
 * detector of vc_set_vad, applied to the processed signal (it does not use
 * SpeexDSP's speech probability). The state is built on the calling thread.
 * Returns VC_ERR_NOT_FOUND, VC_ERR_INVALID_ARG (not a MIC stream, agc_level outside
 * (0, 1]), VC_ERR_UNSUPPORTED (the channel is stereo). Callback-safe: no.
 */
int vc_set_send_processing(vc_client *c, uint32_t stream_id, const vc_send_processing *p);

/** Reads a stream's send processing back. Callback-safe: yes. */
int vc_get_send_processing(vc_client *c, uint32_t stream_id, vc_send_processing *out);

/**
 * Selects how MIC streams are gated: VC_INPUT_VAD (default), VC_INPUT_PTT or
 * VC_INPUT_CONTINUOUS. Opening the gate starts a talkspurt (marker flag); closing
 * it sends one last frame flagged last-frame-before-stop, then nothing. Gated
 * frames are neither encoded nor sent. SCREEN_AUDIO and AUX_DEVICE are never
 * gated. The VAD is a frame-energy (RMS) detector. Callback-safe: yes.
 */
int vc_set_input_mode(vc_client *c, vc_input_mode mode);

/**
 * Voice-activation settings: `threshold` is the frame RMS as a fraction of int16
 * full scale (0..1, default 0.025); the gate stays open `hang_ms` (0..10000,
 * default 300) after the last frame above it. Callback-safe: yes.
 */
int vc_set_vad(vc_client *c, float threshold, uint32_t hang_ms);

/**
 * Push-to-talk key state (used in VC_INPUT_PTT mode): `active` nonzero = pressed, 0 =
 * released (any nonzero value counts as pressed, as a C truth value).
 * Callback-safe: yes.
 */
int vc_set_push_to_talk(vc_client *c, int active);

/* ---- Users, channels and administration -------------------------------------- */

/**
 * Lists every user on the server, by user id, this client included (is_self): fills
 * up to `cap` entries of `out` (may be NULL when cap is 0) and sets *count to the
 * total. The list is the server's roster, received at connect and kept up to date
 * by the server's presence updates (VC_EVENT_USER_CONNECTED / _UPDATED /
 * _DISCONNECTED): the server tells a client the change its own request caused before
 * the reply, so after vc_join_channel, vc_stream_start or an admin call returns the
 * list shows its effect; others' changes arrive within about 0.1 s. Returns
 * VC_ERR_STATE when not connected (or reconnecting), VC_ERR_UNSUPPORTED when the
 * server sends no roster. Callback-safe: yes.
 */
int vc_list_users(vc_client *c, vc_user_info *out, size_t cap, size_t *count);

/**
 * Lists the streams published by `user_id` (0 = by every user, ordered by user id),
 * in any channel, as vc_list_users; same rules for out, cap and *count. A user id
 * not in the list gives VC_ERR_NOT_FOUND. Callback-safe: yes.
 */
int vc_list_user_streams(vc_client *c, uint32_t user_id, vc_user_stream *out, size_t cap, size_t *count);

/**
 * Lists the server's channels in the server's order with their AudioConfig and how
 * many users are in each (from the roster); same rules for out, cap and *count. The
 * list is the one the server gave at connect, changed when the server reloads its
 * configuration (VC_EVENT_CHANNELS_CHANGED). A user may be in a channel a reload
 * retired (no longer listed) until it leaves. Returns VC_ERR_STATE when not
 * connected. Callback-safe: yes.
 */
int vc_list_channels(vc_client *c, vc_channel_info *out, size_t cap, size_t *count);

/**
 * Publishes the state of one of this client's streams: `muted`, `hold` (0 or 1). The
 * server keeps it and tells the channel (VC_EVENT_STREAM_STATE_UPDATE to each
 * listener, and to those who join later) and the roster (vc_list_user_streams,
 * VC_EVENT_USER_UPDATED). It is information for the others' user interfaces only:
 * the stream's audio is not touched (stop feeding it, or use push-to-talk, to stop
 * sending). After an automatic reconnect it is published again; one set during the
 * reconnect's gap, or whose send the lost connection cut short, is kept (VC_OK) and
 * published once reconnected. Does not wait for
 * the server's answer (only, at most 2 s, for the connection to take the message).
 * Returns VC_ERR_NOT_FOUND (unknown stream), VC_ERR_INVALID_ARG (not 0 or 1),
 * VC_ERR_STATE (not connected), VC_ERR_NETWORK (without auto_reconnect: the server
 * took no control message for 2 s, or the connection failed; the session is then
 * lost as when the server goes away, VC_EVENT_DISCONNECTED, and calls that need the
 * server fail at once until then). Callback-safe: yes.
 */
int vc_set_stream_state(vc_client *c, uint32_t stream_id, int muted, int hold);

/**
 * Server-mutes (the server drops the user's audio) and / or deafens (it sends the
 * user none) any user, with the server's admin password (its `admin_password`), and
 * waits until the server has done it: the user's channel gets
 * VC_EVENT_SERVER_MUTE_STATE, every client VC_EVENT_USER_UPDATED, and the lists show
 * it when this returns. 0, 0 lifts both. Returns VC_ERR_AUTH for a wrong admin
 * password (the server then answers this client's next admin requests only after a
 * growing delay, and closes the session after max_auth_failures wrong ones), and for
 * an empty one or a server without one (refused, not taken for a guess: it adds no
 * delay and closes nothing), VC_ERR_NOT_FOUND (no such user), VC_ERR_STATE (not
 * connected), VC_ERR_TIMEOUT, VC_ERR_NETWORK (the connection ended before the
 * answer came), VC_ERR_INVALID_ARG (admin_password NULL or over 1024 bytes, muted or deafened not 0
 * or 1). Callback-safe: no.
 */
int vc_admin_set_server_mute(vc_client *c, uint32_t user_id, int muted, int deafened, const char *admin_password);

/**
 * Removes a user from the server with the admin password, and waits until the
 * server has done it. The user's session ends with VC_EVENT_DISCONNECTED (code
 * VC_ERR_REJECTED, text "server: kicked by <admin>: <reason>", and no automatic
 * reconnect); the others see it leave (VC_EVENT_USER_LEFT in its channel,
 * VC_EVENT_USER_DISCONNECTED everywhere). `reason` may be NULL or up to 256 bytes.
 * Returns as vc_admin_set_server_mute, and VC_ERR_REJECTED for this client's own
 * user id. Callback-safe: no.
 */
int vc_admin_kick(vc_client *c, uint32_t user_id, const char *reason, const char *admin_password);

/* ---- Receiving (per remote stream, local to this listener) ------------------- */

/**
 * Sets this listener's gain (0..4), mute and noise reduction for a remote stream.
 * No protocol traffic, no effect on other listeners. A gain or mute that changes
 * while the stream plays moves there in a straight line over the next block rendered
 * (20 ms, or 10 ms blocks, or the frames of the host's next pull: a pull of a few
 * frames ramps that fast). The mix of all streams is limited, not clipped: where it
 * would pass -0.9 dBFS, the whole mix is turned down ahead of the peak (by at most
 * 1/96 of full gain per frame, looking ahead within the block being rendered: a
 * pull of a few frames sees little ahead) and brought back by at most 1/4800 per
 * frame (from half gain in 50 ms), so loud overlapping talkers or a large gain are
 * heard quieter, not distorted; below that the mix is the plain sum. noise_reduction (nonzero) creates a
 * SpeexDSP denoiser for this stream on the calling thread (it then runs after
 * decoding and before gain and mixing); 0 releases it; it is released too when the
 * stream goes away. The denoiser works on 10 ms windows (a frame's, for frames of
 * 2.5 and 5 ms) and delays the stream by that much while it runs. Switched while the
 * stream plays, the stream moves by that delay gradually: switched on, it is played
 * 2 % slower (its pitch that much lower) until it has moved (500 ms for 10 ms) while
 * the denoiser runs unheard, then the denoiser's output, now on the same timeline, is
 * cross-faded in over one codec frame; switched off, the reverse (cross-faded out, then
 * 2 % faster). Nothing is dropped, repeated or cancelled (a cross-fade between the
 * stream and itself 10 ms apart would cancel a 450 Hz tone). Switched while the stream
 * is silent (before it talks, in a pause without comfort noise) it moves at once: the
 * denoiser is heard from its second frame. Other streams are untouched. Returns VC_ERR_NOT_FOUND for an
 * ssrc not being received, VC_ERR_INVALID_ARG for a gain outside 0..4 or NaN.
 * Callback-safe: yes.
 */
int vc_set_remote_stream(vc_client *c, uint32_t ssrc, const vc_remote_stream *s);

/** Reads the settings back (defaults: gain 1.0, unmuted, NR off). Callback-safe: yes. */
int vc_get_remote_stream(vc_client *c, uint32_t ssrc, vc_remote_stream *out);

/**
 * Bounds the jitter buffer of the remote stream `ssrc`, or with ssrc 0 of every
 * stream received now and later (replacing the bounds set on single streams): its
 * target depth (vc_stream_stats.target_depth_ms, the frame being played plus the
 * cushion the buffer adapts to the network's jitter) stays within [min_ms, max_ms],
 * in whole frames (min rounded up, max down, never below one frame) and within what
 * the buffer holds (one frame plus 500 ms). The buffered audio stays within it too:
 * when it exceeds max_ms (or, with no max, 500 ms) by more than two frames, as when a
 * server or path that stopped delivers what it held at once, what is beyond the
 * target is dropped at once (counted as late) rather than played seconds behind. A
 * low max_ms favours delay over late frames; a min_ms keeps a cushion for a network
 * known to be bursty. 0 means no
 * bound (0, 0 lifts both). A stream added later gets the ssrc-0 bounds. Returns
 * VC_ERR_NOT_FOUND (ssrc not received), VC_ERR_INVALID_ARG (min_ms above a non-zero
 * max_ms, either above 10000). Callback-safe: yes.
 */
int vc_set_jitter_bounds(vc_client *c, uint32_t ssrc, uint32_t min_ms, uint32_t max_ms);

/**
 * Lists the remote streams being received: fills up to `cap` entries of `out` (may
 * be NULL when cap is 0) and sets *count to the total number. Callback-safe: yes.
 */
int vc_list_remote_streams(vc_client *c, vc_remote_stream_info *out, size_t cap, size_t *count);

/** Receive statistics of one remote stream. VC_ERR_NOT_FOUND for an unknown ssrc. Callback-safe: yes. */
int vc_get_stream_stats(vc_client *c, uint32_t ssrc, vc_stream_stats *out);

/** Connection statistics. Callback-safe: yes. */
int vc_get_connection_stats(vc_client *c, vc_connection_stats *out);

/**
 * Send statistics and loss protection of the published stream `stream_id` (see
 * vc_send_stats). Returns VC_ERR_NOT_FOUND for a stream id that is not published,
 * VC_ERR_INVALID_ARG for a NULL `out` or handle. Callback-safe: yes.
 */
int vc_get_send_stats(vc_client *c, uint32_t stream_id, vc_send_stats *out);

/**
 * Statistics of the playback device (see vc_playback_stats): whether audio was lost
 * on this machine rather than on the network. Returns VC_ERR_INVALID_ARG for a NULL
 * `out` or handle. Callback-safe: yes.
 */
int vc_get_playback_stats(vc_client *c, vc_playback_stats *out);

/* ---- Output ------------------------------------------------------------------ */

/**
 * Chooses who takes the final mix. Exactly one thread of the client renders it at
 * any time, so every remote stream is played once, in real time:
 *  - device: external playback 0 (the default, vc_client_config.external_playback),
 *    connected and not suspended. A playback thread renders the mix, hands each
 *    block to the sinks and recordings (taps) and plays it on the configured device
 *    (opened at vc_connect; a failure there is reported as a VC_EVENT_ERROR with
 *    VC_ERR_DEVICE and the session continues). A sound card's own clock paces the
 *    blocks: it holds about 25 ms when the next block is rendered (a block and one
 *    ALSA period; more when its periods are longer than 5 ms): 25-45 ms in the card,
 *    added to the card's own output latency. The card's clock is moved by what it is
 *    written, so that frames do not wait up to a block more at its phase: between
 *    talkspurts (nothing playing: digital silence, or comfort noise below -40 dBFS
 *    with nothing else sounding, its last millisecond cross-faded into the block's
 *    last) a block is cut short when a talker's
 *    first frame will have its jitter cushion before the next block
 *    (the talkspurt then starts with its cushion, not up to 20 ms later); while streams
 *    play and every frame played has time to spare (a path that got faster, a talker
 *    whose clock runs ahead of the card's), a block is played up to 2 % faster
 *    (resampled: 0.4 ms less of a 20 ms block, a third of a semitone higher for that
 *    block), at most once every 10 blocks. Streams of 20 ms frames ask for these moves;
 *    one of other frames whose start falls at a cut may wait a block more. The echo
 *    canceller's reference is what the card plays. The taps (sinks, recordings) get
 *    each block whole, as mixed, at the card's pace, so over a call they get the
 *    moves' total more audio than the card played (at most 20 ms per talkspurt start,
 *    0.2 % while streams play). A device that fails, or a card that plays nothing of what it holds for
 *    1 s (nothing renders in that second), is reopened on a backoff: VC_EVENT_ERROR
 *    when it fails, VC_EVENT_DEVICE_RESTORED when it is back; meanwhile the taps
 *    still get their blocks every 20 ms. A device that offers no 48 kHz is played at its rate through
 *    a resampler.
 *  - sink: external playback 1 and a mixed sink set: a mixer thread of the client
 *    renders every 20 ms (or 10: vc_set_mixed_output_block_ms) and calls the sinks (at a phase that follows the talkers'
 *    frames: see vc_set_mixed_output_sink).
 *  - background: otherwise, when a per-speaker sink is set or a recording runs
 *    (vc_set_remote_stream_sink, vc_start_recording): a thread of the client
 *    renders every 20 ms for them; vc_read_mixed_pcm() is served too, and while the
 *    host pulls, its pulls render instead of that thread.
 *  - pull: every other case (external playback 1 without a sink; or external 0
 *    while not connected or suspended): nothing renders by itself and
 *    vc_read_mixed_pcm() renders on the caller's thread.
 * `enabled` nonzero (1) here: no playback device is opened. 0 while connected opens the device now and
 * returns VC_ERR_DEVICE with the device's reason if it cannot (the previous mode
 * stays). So does 0 when the device already plays the mix but is away (it failed,
 * or could not be opened at vc_connect): it is tried at once, with
 * VC_EVENT_DEVICE_RESTORED when it opens; when it cannot, VC_ERR_DEVICE, and it is
 * still retried on its backoff. Callback-safe: no.
 */
int vc_set_external_playback(vc_client *c, int enabled);

/**
 * Sets (fn non-NULL) or clears (NULL) the sink that receives the FINAL stereo mix,
 * 20 ms of audio per call in the output format (960 frames and channels = 2 unless
 * vc_set_mixed_output_block_ms chose 10 ms blocks for sink mode, or
 * vc_set_output_format says otherwise; at rates that are not a multiple of 50 Hz,
 * 100 Hz for 10 ms blocks, the count varies by a frame from block to block; at a
 * multiple it is exact from the first block on: 320 frames at 16 kHz; at any rate
 * but 48 kHz the resampler delays the audio by 1-2 ms, 4 ms at 8 kHz with the
 * default quality), from one thread at a time, once per
 * 20 ms of audio (see vc_set_external_playback for the modes): in sink mode the
 * client's mixer thread calls it; in device mode the playback thread hands it the
 * blocks it plays (a tap); in pull mode it is not called. In sink mode nothing else
 * sets the clock, so the mixer thread moves its blocks towards the moment the
 * talkers' frames (as long as the block; other frame sizes keep the phase where it is) have
 * arrived with their jitter cushion, rather than up to 20 ms later at a fixed phase:
 * a block may come up to 10 ms early or late (20 ms either way in a block in which
 * no stream plays a frame, as between talkspurts: VC_EVENT_TALK_STOP comes a
 * hangover later),
 * seldom more often than every 3 blocks (60 ms), while the thread stays within 20 ms behind and
 * 40 ms ahead of a steady 20 ms schedule (it runs in real time over any longer span;
 * the audio itself has no gap or jump). A host that plays the mix on an audio device
 * of its own gains nothing from that (its queue just holds more): it should pull the
 * mix from the device's callback (vc_read_mixed_pcm), so its device is the clock.
 * The sink runs on an audio thread: it must not block. A sink that blocks for longer
 * than two blocks delays the thread past what it catches up on (two blocks back to
 * back): the rest is skipped. A stall of more than about 100 ms then costs each
 * talking stream the audio that was due during it (counted as late frames) and the
 * mix goes on in real time with the cushions it had; a shorter one leaves that much
 * more audio buffered, shed at the stream's next pause or quiet frame. The same holds
 * for a host whose pulls (vc_read_mixed_pcm) stop for more than about 100 ms plus the
 * size of its pulls. Audio that came while nothing rendered the mix (before a host's
 * first pull, while the audio was suspended, a stall in a pause) is not played when
 * the rendering starts: a talkspurt that had its time then is dropped (counted as
 * late frames; its TALK_START and TALK_STOP are not raised again), and one still
 * going on starts from its recent frames with its usual cushion. A sink set or put in place of another while the mix plays
 * gets its first 5 ms faded in (no click from starting mid-waveform); the same sink
 * across a vc_set_mixed_output_block_ms is not faded again. Setting, replacing or
 * clearing returns only after a running call of the previous sink has returned.
 * Returns VC_ERR_STATE from inside any callback (of any client; the sink cannot wait
 * for itself). Callback-safe: no.
 */
int vc_set_mixed_output_sink(vc_client *c, vc_pcm_sink_fn fn, void *user);

/**
 * The length of the blocks the mixer thread renders in sink mode: `ms` 20 (the
 * default) or 10. With 10, every call of the mixed sink (and of the per-speaker sink
 * and each recording's write, which that thread feeds too) carries 10 ms of audio
 * (480 frames at 48 kHz), once per 10 ms, and everything vc_set_mixed_output_sink
 * says of 20 ms holds for 10: blocks up to 5 ms early or late (10 ms either way while
 * nobody talks), seldom more often than every 30 ms, the thread within 10 ms behind
 * and 20 ms ahead of a steady 10 ms schedule. It is for channels of 10 ms frames (vc_audio_config.frame_us 10000): a
 * 20 ms block decides both of its frames at its start, so the second waits up to
 * 10 ms longer than it must, and the block's phase cannot follow such frames; a
 * 10 ms block plays each frame as soon as it has its cushion, like a 20 ms block does
 * 20 ms frames. Frames longer than the block are played across blocks (the phase then
 * stays where it is). The device, background and pull modes keep their blocks (20 ms;
 * a pull renders what it is asked for). Takes effect now: a mixer thread that runs
 * with another block is restarted with it and keeps its schedule and phase (the
 * next block comes when the previous one's successor was due; a 20 ms block after
 * 10 ms ones, when the second 10 ms block it covers would have). Best set before the sink (or
 * while nobody talks): a stream that talks through a change from 10 to 20 ms may
 * be heard up to 10 ms later until its next pause (one that talks through many such
 * changes without a pause loses a frame now and then, counted late, as its buffer
 * sheds the delay they add). Returns VC_ERR_INVALID_ARG for any other `ms`,
 * VC_ERR_STATE from inside any callback (of any client). Callback-safe: no.
 */
int vc_set_mixed_output_block_ms(vc_client *c, uint32_t ms);

/**
 * Pull mode, for hosts that own an audio callback: decodes and mixes exactly
 * `frames` frames of the output format now into `out` (frames × channels int16;
 * 48 kHz stereo unless vc_set_output_format says otherwise). Silence when nothing
 * plays; `frames` 0 renders nothing, and any count is served (a large one renders
 * block after block on the calling thread). Call it at the rate the audio is consumed: each call advances the playout
 * clock of every remote stream by what it rendered (at another output rate, the
 * frames a conversion gave beyond `frames` are kept for the next call, so over
 * time the clock follows what was pulled). A call that renders several 20 ms blocks
 * takes their audio at once, so every remote stream then keeps that much in hand
 * (target_depth_ms includes it, up to what a stream's buffer holds: 60 frames, 1.2 s of
 * 20 ms frames, 600 ms of 10 ms; a larger call conceals what does not fit; held 2 s after the last call that
 * large), from the first talkspurt on (a talkspurt that began before the largest
 * pull was first seen may underrun at it, once for each period of that cushion it
 * lacked: each underrun adds one; its next talkspurt starts with all of it in
 * hand): the size of the pulls adds to the
 * delay, and pulls of 10–20 ms give the least. Pulls shorter than a stream's frame
 * start a talkspurt that follows digital silence within a pull of the cushion it
 * needs (the rest of the silent frame before it is dropped; not after comfort noise,
 * which a DTX channel's pauses play, nor a stream's first talkspurt); pulls of whole
 * frames start it at the next frame, up to a frame later. A per-speaker sink set on the client is
 * called on this thread, inside this call, for the blocks it renders. Does not
 * allocate. Served in pull mode and in the background mode of a per-speaker sink or
 * recording (vc_set_external_playback; the client's own thread then pauses while
 * the host pulls); returns VC_ERR_STATE while a thread of the client renders the
 * mix for a mixed sink or a device, and from inside a per-speaker sink (of any client:
 * the sink holds its client's render lock, and two pulls each from the other client's
 * sink would wait for each other).
 * Thread safety: concurrent calls on one client are served one after the other; a
 * vc_set_output_format from another thread takes effect before or after a whole
 * call, whose `frames` × channels are of the format in force when it is served (a
 * host that changes the channel count from another thread while it pulls must size
 * `out` for the larger, or not race the two).
 * Callback-safe: yes (except from a per-speaker sink of any client and the log
 * callback, where it returns VC_ERR_STATE: the log callback may run on a thread that
 * holds the render lock).
 */
int vc_read_mixed_pcm(vc_client *c, int16_t *out, uint32_t frames);

/**
 * vc_read_mixed_pcm as float (full scale ±1.0): the same mix, clock and rules, for
 * hosts whose audio callback is float (JACK, PortAudio paFloat32, Web Audio, numpy);
 * it saves them a conversion loop and a buffer in their callback. The mix itself
 * comes from the same int16 render, so it adds no resolution. Callback-safe: as
 * vc_read_mixed_pcm.
 */
int vc_read_mixed_pcm_f32(vc_client *c, float *out, uint32_t frames);

/**
 * The format of every PCM the client hands out: the mixed sink, vc_read_mixed_pcm(_f32),
 * the per-speaker sink and recordings started afterwards. `sample_rate` 8000..192000,
 * `channels` 1 (stereo averaged; a mono stream as it is) or 2 (mono streams L = R).
 * Default 48000 Hz, 2 channels. The client still renders at 48 kHz and converts
 * each block (SpeexDSP resampler, vc_client_config.resampler_quality), in buffers
 * built here on the calling thread and swapped in between two blocks (nothing is
 * restarted; a talker heard through the change goes on without a gap or a click: the
 * new resampler starts from the last block's audio, and the first block after the
 * change starts where the old output left off and moves into the new one's timeline,
 * which differs by the difference of the resamplers' delays (1-2 ms at most rates, 4 ms
 * at 8 kHz), within that block: over 10-16 ms played up to a quarter faster or slower
 * (the client renders a whole 20 ms block for the first pull after the change, however
 * short, and keeps the rest for the next pulls; every block keeps its length). The playback device is not affected (it is fed at the rate it runs at). Float output exists for pulls only
 * (vc_read_mixed_pcm_f32, where float audio callbacks are common); the sinks stay
 * int16 (the mix is limited to 16 bits, a speaker's block rounded and clipped to
 * them), so a callback converts in a loop of its own at no loss, and one sink type
 * per kind keeps the API small.
 * Returns VC_ERR_INVALID_ARG (rate or channels out of range), VC_ERR_STATE (a
 * recording is running: its file has the format of its start; or from inside a
 * callback). Callback-safe: no.
 */
int vc_set_output_format(vc_client *c, uint32_t sample_rate, uint32_t channels);

/**
 * Sets (fn non-NULL) or clears (NULL) the per-speaker sink: for every rendered block
 * (20 ms, the block vc_set_mixed_output_block_ms chose in sink mode, or the size a
 * pull renders), one call per remote stream with its ssrc,
 * user id, kind and its decoded PCM after this listener's noise reduction, before
 * gain, mute and mixing (a stream muted with vc_set_remote_stream still comes here),
 * in the output format. It runs on the thread that renders the mix (the device's
 * playback thread, the mixed sink's thread, or a vc_read_mixed_pcm caller), one
 * thread at a time and in real time (the mixed sink's thread within the lead
 * vc_set_mixed_output_sink describes), after the mix of that block is
 * made; a stream that is silent (between talkspurts, or concealed) still delivers
 * its blocks, so each stream's PCM keeps its own timeline. A sink set, or put in
 * place of another, while streams play gets their first 5 ms faded in (no click from
 * starting mid-waveform); a recording that runs meanwhile is not faded by it.
 * Modes (vc_set_external_playback), with a per-speaker sink set:
 *   external 0, connected, not suspended  the playback thread renders: device, taps
 *   external 1, a mixed sink set          the mixer thread renders for both sinks
 *   any other case                        "background": a thread of the client renders
 *                                         every 20 ms for the per-speaker sink (and
 *                                         recordings); vc_read_mixed_pcm is served, and
 *                                         while the host pulls, its pulls render instead
 *                                         (the thread stays away while the audio the
 *                                         host's pulls took reaches within 40 ms of now,
 *                                         or half its last pull plus 20 ms: one 20 ms
 *                                         pull after a pause keeps it away for 60 ms)
 * So it works with and without a consumer of the mix. The sink must not block; it
 * runs under the client's render lock, which none of the callback-safe functions
 * take or wait for (vc_read_mixed_pcm and vc_set_event_callback return VC_ERR_STATE
 * there), and the callback-unsafe ones return VC_ERR_STATE there, on whatever thread
 * it runs; vc_client_destroy is ignored there, for any client. Setting, replacing or
 * clearing returns only after a running call of the previous sink has returned.
 * Returns VC_ERR_STATE from inside any callback (of any client). Callback-safe: no.
 */
int vc_set_remote_stream_sink(vc_client *c, vc_remote_stream_sink_fn fn, void *user);

/**
 * Starts recording to a WAV file (16-bit PCM, in the output format of now): the final
 * mix when `ssrc` is 0, else the remote stream `ssrc` as the per-speaker sink gets it
 * (decoded, before gain, mute and mixing). The render thread copies each block into a
 * lock-free ring; a writer thread of the recording writes the file (every 20 ms; the
 * header's sizes are rewritten every second and at the end, so a crash leaves a
 * readable file). The render thread never waits for the disk: when the writer falls
 * more than 2 s behind, blocks are dropped (and logged at the end). When a write
 * fails (a full disk), or the file reaches the WAV format's limit of 4 GiB of audio
 * (6 h 12 min of 48 kHz stereo), nothing more is written (the file stays a readable
 * WAV of what was), VC_EVENT_ERROR is raised at once (code VC_ERR_DEVICE, ssrc = the
 * source, text = the path and the reason), and vc_stop_recording returns VC_ERR_DEVICE
 * saying how much the file holds. While a recording
 * runs, the client renders by itself if nothing else does (see
 * vc_set_remote_stream_sink, "background"). A recording is named by its source: at
 * most one per ssrc (0 = the mix), at most 8 at once. A speaker's recording gets
 * nothing more once its stream is removed; stop it to close the file. An existing
 * file is replaced when the recording starts; a refused start leaves it untouched.
 * Returns VC_ERR_INVALID_ARG (path NULL, or the file cannot be created:
 * vc_last_error says why), VC_ERR_NOT_FOUND (no remote stream `ssrc`), VC_ERR_STATE
 * (that source is already being recorded; another recording of this client writes
 * that file; inside a callback), VC_ERR_NO_MEMORY (8 recordings run). The file's
 * first 5 ms fade in (a recording started while someone talks has no click at its
 * start). Callback-safe: no.
 */
int vc_start_recording(vc_client *c, const char *path, uint32_t ssrc);

/**
 * Stops the recording of `ssrc` (0 = the mix): writes what is still buffered,
 * completes the WAV header, closes the file, then returns. Destroying the client
 * stops every recording the same way. Returns VC_ERR_NOT_FOUND (no such recording),
 * VC_ERR_DEVICE (stopped and closed, but a write had failed: vc_last_error says why
 * and how many seconds the file holds), VC_ERR_STATE (inside a callback).
 * Callback-safe: no.
 */
int vc_stop_recording(vc_client *c, uint32_t ssrc);

/**
 * Plays on another device (an ALSA PCM name) from now on, without leaving the
 * channel. When the device plays the mix now (external playback 0, connected, not
 * suspended) the new device is opened at once (the previous one is closed first: a
 * device may be open only once): on failure the previous device is opened again and
 * plays on, and VC_ERR_DEVICE is returned with the reason in vc_last_error (the name
 * of the device that plays and is away: tried at once, as vc_set_external_playback
 * does). When the previous device cannot be opened again either, it is a failure
 * as a device lost while playing (VC_EVENT_ERROR, counted in vc_playback_stats
 * device_failures; none more when it was away already), retried on a backoff.
 * A device that opens in place of one that had failed (its VC_EVENT_ERROR
 * raised) raises VC_EVENT_DEVICE_RESTORED with its name.
 * Otherwise
 * the name is kept for when the device next opens. A device that offers no 48 kHz is
 * opened at the rate it offers and fed through a resampler; one that offers only mono
 * gets the mix downmixed. Returns
 * VC_ERR_INVALID_ARG (NULL or empty), VC_ERR_DEVICE. Callback-safe: no.
 */
int vc_set_playback_device(vc_client *c, const char *name);

/**
 * Moves a device stream's capture to another device (an ALSA PCM name), keeping the
 * stream: its id, ssrc and channel stay and listeners see no change but the sound
 * (the talkspurt under way ends; the new device's audio starts a new one).
 * The previous device is closed first, then the new one opened (at the stream's
 * sample_rate, or the rate it offers); when it cannot be opened, the previous
 * device is reopened and VC_ERR_DEVICE returned (reason in vc_last_error). When the
 * previous one cannot be reopened at once either, it is a failure as a device lost
 * while capturing (VC_EVENT_ERROR with the stream_id, counted in vc_send_stats
 * device_failures; none more when it was away already), retried on a backoff
 * (VC_EVENT_DEVICE_RESTORED when it opens). A device that opens in place of one that
 * had failed raises VC_EVENT_DEVICE_RESTORED with its name. While
 * audio is suspended the name is kept for vc_audio_restart. Returns
 * VC_ERR_NOT_FOUND, VC_ERR_INVALID_ARG (NULL or empty), VC_ERR_STATE (a stream fed
 * by the host), VC_ERR_DEVICE. Callback-safe: no.
 */
int vc_set_capture_device(vc_client *c, uint32_t stream_id, const char *name);

/**
 * Closes every audio device (playback and all captures) without touching the
 * session or its streams; device streams send nothing until restarted. Idempotent.
 * Returns VC_ERR_STATE from inside a callback. Callback-safe: no.
 */
int vc_audio_suspend(vc_client *c);

/**
 * Reopens the devices closed by vc_audio_suspend (or lost) against the current
 * route: the playback device (unless external playback) and every device stream's
 * capture. Idempotent. Returns VC_ERR_DEVICE (with ALSA's reason in
 * vc_last_error: the first device's) if one cannot be opened; the others are opened
 * anyway, and each one that could not be is a failure as a device lost while running
 * is: a VC_EVENT_ERROR (VC_ERR_DEVICE; kind, stream_id for a capture; counted in
 * vc_playback_stats / vc_send_stats device_failures), then retried on a backoff
 * (VC_EVENT_DEVICE_RESTORED when it opens; a later vc_audio_restart tries it at once
 * and says again whether it opens).
 * Callback-safe: no.
 */
int vc_audio_restart(vc_client *c);

/* ---- Events ------------------------------------------------------------------ */

/**
 * Takes the oldest queued event into *out, waiting up to timeout_ms (0 = do not
 * wait, negative = forever). Returns 1 when an event was taken, 0 when none came
 * (or the client is being destroyed and nothing is queued), or a negative error. Events are queued
 * whether or not a callback is set, by the network thread, in the order the
 * callback sees them. Callback-safe: yes (it does not wait there).
 */
int vc_poll_event(vc_client *c, vc_event *out, int timeout_ms);

/**
 * Sets (or clears with NULL) a callback called on the client's network thread for
 * each event raised from now on, in addition to the queue (events raised before it was
 * set, such as a playback device that could not be opened during vc_connect, are in
 * the queue only: set it before vc_connect to see them there). Every event (CONNECTED and a host-asked
 * DISCONNECTED included; not the one vc_client_destroy raises, which clears the
 * callback first) is delivered there, one at a time, in order. Replacing or
 * clearing returns only after a running call of the previous callback has returned,
 * except from inside the callback itself (then it returns at once, also from a sink
 * called inside it). Callback-safe: yes, but from a per-speaker sink (of any client,
 * on any thread), the log callback or a callback of another client (its event
 * callback or mixed sink) it returns VC_ERR_STATE, unless called inside this client's
 * event callback itself: a running event callback may be waiting for that thread (its
 * pull waits for the render lock a per-speaker sink holds; another client's event
 * callback may be replacing this one's, each waiting for the other).
 */
int vc_set_event_callback(vc_client *c, vc_event_fn fn, void *user);

/**
 * Why the last failed call on this client failed (for example the server's refusal
 * text, or which argument was wrong: "vc_set_jitter_bounds: min_ms 300 is above
 * max_ms 100"), copied into buf (cut to len - 1 bytes). Every call that fails on a
 * client records its own reason, argument checks included, so the text always
 * describes the last failure and never an older one; successful calls leave it as it
 * is. The reason is kept per calling thread: a thread reads the reason of its own last
 * failed call on this client even while other threads' calls fail (a thread that made
 * no failed call reads the client's latest reason, whichever thread failed; thread
 * ids of ended threads may be reused). With c NULL: the same for the functions that
 * take no client (vc_client_create, vc_set_alsa_config, vc_list_devices), whose
 * reasons are kept apart from every client's ("" when none failed). Returns
 * VC_ERR_INVALID_ARG for an invalid or destroyed handle, a NULL buf or len 0 (recording
 * nothing: that would overwrite the text being asked for). Callback-safe: yes.
 */
int vc_last_error(vc_client *c, char *buf, size_t len);

#endif /* VC_TYPES_ONLY */

#ifdef __cplusplus
}
#endif
#endif /* VOICECAT_H */
