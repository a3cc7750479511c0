/*
 * api_check: every C entry point given NULL, a bad handle or an unknown id returns
 * VC_ERR_INVALID_ARG or VC_ERR_NOT_FOUND (or the documented state error) and never
 * crashes. Built against the installed library through pkg-config and run by
 * `make test` with a live server:  api_check PORT
 * Prints "N passed, M failed" and exits non-zero on any failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <voicecat.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <unistd.h>

static int passed, failed;

#define EXPECT(expr, want) do { \
    int got_ = (expr); \
    if (got_ == (want)) passed++; \
    else { failed++; fprintf(stderr, "FAIL %s:%d: %s = %d (%s), want %d\n", __FILE__, __LINE__, #expr, got_, vc_strerror(got_), (want)); } \
} while (0)

static void null_and_bad_handles(void) {
    int16_t pcm[1920] = {0};
    vc_event ev;
    vc_remote_stream rs = {1.0f, 0, 0};
    vc_stream_stats st;
    vc_connection_stats cs;
    vc_send_stats ss;
    vc_audio_config ac;
    char buf[128];
    size_t count;
    uint32_t id;
    vc_stream_desc d = vc_stream_desc_default();
    vc_connect_params p = {0};
    vc_user_info users[2];
    vc_user_stream ustreams[2];
    vc_channel_info chans[2];
    vc_client *bad = (vc_client *)(uintptr_t)0x1234;  /* never a live handle */
    vc_client *handles[2] = {NULL, bad};

    for (int i = 0; i < 2; i++) {
        vc_client *c = handles[i];
        EXPECT(vc_connect(c, &p), VC_ERR_INVALID_ARG);
        EXPECT(vc_disconnect(c), VC_ERR_INVALID_ARG);
        EXPECT(vc_get_server_fingerprint(c, buf, sizeof buf), VC_ERR_INVALID_ARG);
        EXPECT(vc_join_channel(c, "Lobby"), VC_ERR_INVALID_ARG);
        EXPECT(vc_get_channel_audio(c, &ac), VC_ERR_INVALID_ARG);
        EXPECT(vc_stream_start(c, &d, &id), VC_ERR_INVALID_ARG);
        EXPECT(vc_stream_stop(c, 1), VC_ERR_INVALID_ARG);
        EXPECT(vc_stream_feed_pcm(c, 1, pcm, 960, 1), VC_ERR_INVALID_ARG);
        EXPECT(vc_stream_queued_ms(c, 1, &id), VC_ERR_INVALID_ARG);
        EXPECT(vc_stream_drain(c, 1, 0), VC_ERR_INVALID_ARG);
        EXPECT(vc_stream_flush(c, 1), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_remote_stream(c, 1, &rs), VC_ERR_INVALID_ARG);
        EXPECT(vc_get_remote_stream(c, 1, &rs), VC_ERR_INVALID_ARG);
        EXPECT(vc_list_remote_streams(c, NULL, 0, &count), VC_ERR_INVALID_ARG);
        EXPECT(vc_get_stream_stats(c, 1, &st), VC_ERR_INVALID_ARG);
        EXPECT(vc_get_connection_stats(c, &cs), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_external_playback(c, 1), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_mixed_output_sink(c, NULL, NULL), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_mixed_output_block_ms(c, 10), VC_ERR_INVALID_ARG);
        EXPECT(vc_read_mixed_pcm(c, pcm, 960), VC_ERR_INVALID_ARG);
        EXPECT(vc_poll_event(c, &ev, 0), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_event_callback(c, NULL, NULL), VC_ERR_INVALID_ARG);
        /* NULL reads the reasons of the functions that take no client (below). */
        EXPECT(vc_last_error(c, buf, sizeof buf), c == NULL ? VC_OK : VC_ERR_INVALID_ARG);
        EXPECT(vc_set_input_mode(c, VC_INPUT_VAD), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_vad(c, 0.025f, 300), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_push_to_talk(c, 1), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_capture_channels(c, 1, 2), VC_ERR_INVALID_ARG);
        EXPECT(vc_audio_suspend(c), VC_ERR_INVALID_ARG);
        EXPECT(vc_audio_restart(c), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_send_processing(c, 1, NULL), VC_ERR_INVALID_ARG);
        EXPECT(vc_get_send_processing(c, 1, NULL), VC_ERR_INVALID_ARG);
        EXPECT(vc_list_users(c, users, 2, &count), VC_ERR_INVALID_ARG);
        EXPECT(vc_list_user_streams(c, 0, ustreams, 2, &count), VC_ERR_INVALID_ARG);
        EXPECT(vc_list_channels(c, chans, 2, &count), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_stream_state(c, 1, 1, 0), VC_ERR_INVALID_ARG);
        EXPECT(vc_admin_set_server_mute(c, 1, 1, 0, "pw"), VC_ERR_INVALID_ARG);
        EXPECT(vc_admin_kick(c, 1, "why", "pw"), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_jitter_bounds(c, 0, 0, 100), VC_ERR_INVALID_ARG);
        float level, fpcm[1920] = {0};
        EXPECT(vc_stream_feed_pcm_f32(c, 1, fpcm, 960, 1), VC_ERR_INVALID_ARG);
        EXPECT(vc_get_input_level(c, 1, &level, &level), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_output_format(c, 16000, 1), VC_ERR_INVALID_ARG);
        EXPECT(vc_read_mixed_pcm_f32(c, fpcm, 960), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_remote_stream_sink(c, NULL, NULL), VC_ERR_INVALID_ARG);
        EXPECT(vc_start_recording(c, "/tmp/x.wav", 0), VC_ERR_INVALID_ARG);
        EXPECT(vc_stop_recording(c, 0), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_playback_device(c, "default"), VC_ERR_INVALID_ARG);
        EXPECT(vc_set_capture_device(c, 1, "default"), VC_ERR_INVALID_ARG);
        EXPECT(vc_get_send_stats(c, 1, &ss), VC_ERR_INVALID_ARG);
        vc_playback_stats ps;
        EXPECT(vc_get_playback_stats(c, &ps), VC_ERR_INVALID_ARG);
        vc_client_destroy(c);  /* NULL and unknown handles are ignored */
    }
    EXPECT(vc_client_create(NULL, NULL), VC_ERR_INVALID_ARG);
    EXPECT((int)vc_struct_size(NULL), 0);
    EXPECT((int)vc_struct_size("no_such_struct"), 0);
    EXPECT((int)vc_struct_size("vc_event"), (int)sizeof(vc_event));
    EXPECT((int)vc_struct_size("vc_stream_stats"), (int)sizeof(vc_stream_stats));
    EXPECT((int)vc_struct_size("vc_remote_stream_info"), (int)sizeof(vc_remote_stream_info));
    EXPECT((int)vc_struct_size("vc_client_config"), (int)sizeof(vc_client_config));
    EXPECT((int)vc_struct_size("vc_device_info"), (int)sizeof(vc_device_info));
    EXPECT((int)vc_struct_size("vc_send_processing"), (int)sizeof(vc_send_processing));
    EXPECT((int)vc_struct_size("vc_user_info"), (int)sizeof(vc_user_info));
    EXPECT((int)vc_struct_size("vc_send_stats"), (int)sizeof(vc_send_stats));
    EXPECT((int)vc_struct_size("vc_playback_stats"), (int)sizeof(vc_playback_stats));
    EXPECT((int)vc_struct_size("vc_user_stream"), (int)sizeof(vc_user_stream));
    EXPECT((int)vc_struct_size("vc_channel_info"), (int)sizeof(vc_channel_info));
    EXPECT(strcmp(vc_event_type_name(VC_EVENT_USER_UPDATED), "VC_EVENT_USER_UPDATED"), 0);
    EXPECT(strcmp(vc_event_type_name(VC_EVENT_NONE), "VC_EVENT_NONE"), 0);
    EXPECT(strcmp(vc_event_type_name((vc_event_type)-5), "VC_EVENT_UNKNOWN"), 0);
    EXPECT(strcmp(vc_event_type_name((vc_event_type)1000), "VC_EVENT_UNKNOWN"), 0);
    EXPECT((int)vc_struct_size("vc_send_stats"), (int)sizeof(vc_send_stats));
    vc_client_config cd = vc_client_config_default();
    EXPECT((int)cd.loss_report_ms, 1000);
    cd.loss_report_ms = 50;                      /* 0 or 100..60000 */
    vc_client *refused = NULL;
    EXPECT(vc_client_create(&cd, &refused), VC_ERR_INVALID_ARG);
    EXPECT(refused == NULL, 1);
    EXPECT(vc_last_error(NULL, buf, sizeof buf), VC_OK);
    EXPECT(strstr(buf, "vc_client_create: loss_report_ms must be 0 or 100..60000 (got 50)") != NULL, 1);
    cd.loss_report_ms = 1000;
    cd.playback_device = "";                     /* no name: NULL means "default" */
    EXPECT(vc_client_create(&cd, &refused), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(NULL, buf, sizeof buf), VC_OK);
    EXPECT(strncmp(buf, "vc_client_create: playback_device is empty", 42) == 0, 1);  /* named once */
    cd.playback_device = NULL;
    EXPECT(vc_last_error(NULL, NULL, 10), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(NULL, buf, 0), VC_ERR_INVALID_ARG);
    EXPECT(strcmp(vc_strerror(-9999), "unknown error"), 0);
    EXPECT((int)vc_version_number(), VC_VERSION_NUMBER);
    vc_stream_desc dd = vc_stream_desc_default();
    EXPECT(dd.kind == VC_STREAM_MIC && dd.external_feed == 1 && dd.channels == 1 && dd.max_queue_ms == 0 && dd.sample_rate == 0, 1);
    vc_connect_params pd = vc_connect_params_default();
    EXPECT(pd.host == NULL && pd.port == 0 && pd.timeout_ms == 0, 1);
    cd = vc_client_config_default();
    EXPECT((int)cd.talk_hangover_ms, 300);
    cd.talk_hangover_ms = 9000;
    vc_client *bad_cfg = NULL;
    EXPECT(vc_client_create(&cd, &bad_cfg), VC_ERR_INVALID_ARG);
    cd = vc_client_config_default();
    EXPECT((int)cd.resampler_quality, 4);
    cd.resampler_quality = 11;
    EXPECT(vc_client_create(&cd, &bad_cfg), VC_ERR_INVALID_ARG);
    cd.resampler_quality = -1;
    EXPECT(vc_client_create(&cd, &bad_cfg), VC_ERR_INVALID_ARG);
    cd = vc_client_config_default();
    EXPECT((int)cd.event_queue_size, 256);
    cd.event_queue_size = 0;                     /* 1..65536 */
    EXPECT(vc_client_create(&cd, &bad_cfg), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(NULL, buf, sizeof buf), VC_OK);
    EXPECT(strcmp(buf, "vc_client_create: event_queue_size must be 1..65536 (got 0)"), 0);
    cd.event_queue_size = 70000;
    EXPECT(vc_client_create(&cd, &bad_cfg), VC_ERR_INVALID_ARG);
    {
        /* Text longer than a control frame holds trapped inside vc_connect (SIGILL):
         * refused up front now, as are lengths no server takes. */
        char *huge = malloc(70001);
        memset(huge, 'n', 70000);
        huge[70000] = 0;
        cd = vc_client_config_default();
        cd.client_name = huge;                   /* at most 256 bytes */
        EXPECT(vc_client_create(&cd, &bad_cfg), VC_ERR_INVALID_ARG);
        EXPECT(vc_last_error(NULL, buf, sizeof buf), VC_OK);
        EXPECT(strcmp(buf, "vc_client_create: client_name is 70000 bytes (at most 256)"), 0);
        free(huge);
        cd.client_name = "bot\033[31m";            /* shown by servers and tools */
        EXPECT(vc_client_create(&cd, &bad_cfg), VC_ERR_INVALID_ARG);
        cd.client_name = "bot\xff";
        EXPECT(vc_client_create(&cd, &bad_cfg), VC_ERR_INVALID_ARG);
    }
    cd = vc_client_config_default();
    cd.max_remote_streams = 0;                   /* 1..1024 */
    EXPECT(vc_client_create(&cd, &bad_cfg), VC_ERR_INVALID_ARG);
    EXPECT(bad_cfg == NULL, 1);
    EXPECT(vc_last_error(NULL, buf, sizeof buf), VC_OK);
    EXPECT(strstr(buf, "max_remote_streams must be 1..1024 (got 0)") != NULL, 1);
    EXPECT(vc_client_create(NULL, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(NULL, buf, sizeof buf), VC_OK);
    EXPECT(strcmp(buf, "vc_client_create: out is NULL"), 0);
}

static void null_args_on_a_live_client(int port) {
    vc_client *c = NULL;
    EXPECT(vc_client_create(NULL, &c), VC_OK);
    int16_t pcm[1920] = {0};
    vc_remote_stream rs = {1.0f, 0, 0};
    vc_stream_stats st;
    char fp[65];
    uint32_t id;
    size_t count = 99;
    vc_stream_desc d = vc_stream_desc_default();
    vc_connect_params p = {0};
    char reason[512];
    vc_device_info devs[4];

    /* Devices and the input gate. */
    EXPECT(vc_list_devices(VC_DEVICE_CAPTURE, NULL, 0, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_list_devices(VC_DEVICE_CAPTURE, NULL, 4, &count), VC_ERR_INVALID_ARG);
    EXPECT(vc_list_devices((vc_device_kind)7, devs, 4, &count), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(NULL, reason, sizeof reason), VC_OK);
    EXPECT(strstr(reason, "vc_list_devices: kind 7") != NULL, 1);
    EXPECT(vc_set_alsa_config("pcm.vc_api { type null }"), VC_OK);
    EXPECT(vc_list_devices(VC_DEVICE_PLAYBACK, devs, 4, &count), VC_OK);
    EXPECT(strcmp(devs[0].name, "vc_api"), 0);
    EXPECT(vc_set_alsa_config("pcm.broken { type"), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(NULL, reason, sizeof reason), VC_OK);
    EXPECT(strncmp(reason, "vc_set_alsa_config: ", 20) == 0 && strlen(reason) > 20, 1);
    EXPECT(vc_last_error(c, reason, sizeof reason), VC_OK);   /* a client's record is its own */
    EXPECT(strstr(reason, "vc_set_alsa_config") == NULL, 1);
    EXPECT(vc_set_alsa_config(NULL), VC_OK);
    EXPECT(vc_set_input_mode(c, (vc_input_mode)9), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_input_mode(c, (vc_input_mode)-1), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(c, reason, sizeof reason), VC_OK);   /* as the host passed it, not 4294967295 */
    EXPECT(strstr(reason, "unknown mode -1 ") != NULL, 1);
    EXPECT(vc_set_input_mode(c, VC_INPUT_CONTINUOUS), VC_OK);
    EXPECT(vc_set_vad(c, -1.0f, 300), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_vad(c, 0.03f, 100000), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_vad(c, 0.025f, 300), VC_OK);
    EXPECT(vc_set_push_to_talk(c, 1), VC_OK);
    EXPECT(vc_set_capture_channels(c, 4242, 2), VC_ERR_NOT_FOUND);
    EXPECT(vc_audio_suspend(c), VC_OK);
    EXPECT(vc_audio_suspend(c), VC_OK);
    EXPECT(vc_audio_restart(c), VC_OK);

    /* Before connecting. */
    EXPECT(vc_connect(c, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_connect(c, &p), VC_ERR_INVALID_ARG);          /* host and username NULL */
    p.host = "";
    p.username = "x";
    EXPECT(vc_connect(c, &p), VC_ERR_INVALID_ARG);          /* an empty host is not a name to resolve */
    p.host = NULL;
    p.username = NULL;
    EXPECT(vc_disconnect(c), VC_ERR_STATE);
    EXPECT(vc_get_server_fingerprint(c, fp, sizeof fp), VC_ERR_STATE);
    EXPECT(vc_join_channel(c, "Lobby"), VC_ERR_STATE);
    EXPECT(vc_stream_start(c, &d, &id), VC_ERR_STATE);
    EXPECT(vc_set_external_playback(c, 1), VC_OK);
    vc_user_info users[8];
    vc_user_stream ustreams[8];
    vc_channel_info chans[8];
    EXPECT(vc_list_users(c, users, 8, &count), VC_ERR_STATE);
    EXPECT(vc_list_channels(c, chans, 8, &count), VC_ERR_STATE);
    EXPECT(vc_list_user_streams(c, 0, ustreams, 8, &count), VC_ERR_STATE);
    EXPECT(vc_admin_set_server_mute(c, 1, 1, 0, "pw"), VC_ERR_STATE);
    EXPECT(vc_admin_kick(c, 1, NULL, "pw"), VC_ERR_STATE);
    EXPECT(vc_set_jitter_bounds(c, 0, 20, 200), VC_OK);         /* remembered for streams to come */

    p.host = "127.0.0.1";
    p.port = (uint16_t)port;
    p.username = "api-check";
    p.server_fingerprint = "not hex";
    EXPECT(vc_connect(c, &p), VC_ERR_INVALID_ARG);
    p.server_fingerprint = NULL;
    p.username = "bad\033[2Jname";                          /* control characters */
    EXPECT(vc_connect(c, &p), VC_ERR_INVALID_ARG);
    p.username = "api-check";
    char *huge_pw = malloc(70001);
    memset(huge_pw, 'p', 70000);
    huge_pw[70000] = 0;
    p.password = huge_pw;                                   /* at most 1024 bytes */
    EXPECT(vc_connect(c, &p), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(c, reason, sizeof reason), VC_OK);
    EXPECT(strstr(reason, "password is 70000 bytes (at most 1024)") != NULL, 1);
    p.password = NULL;
    {
        /* No pin and no known-servers file: refused before connecting, unless allowed. */
        vc_client *bare;
        vc_client_config bc = vc_client_config_default();
        bc.known_servers_path = "";
        bc.external_playback = 1;
        EXPECT(vc_client_create(&bc, &bare), VC_OK);
        EXPECT(vc_connect(bare, &p), VC_ERR_AUTH);
        EXPECT(vc_last_error(bare, reason, sizeof reason), VC_OK);
        EXPECT(strstr(reason, "allow_unverified") != NULL, 1);
        p.allow_unverified = 1;
        p.username = "api-unverified";
        EXPECT(vc_connect(bare, &p), VC_OK);
        EXPECT(vc_join_channel(bare, "Lob\007by"), VC_ERR_INVALID_ARG);
        p.allow_unverified = 0;
        p.username = "api-check";
        vc_client_destroy(bare);
    }
    EXPECT(vc_connect(c, &p), VC_OK);   /* trust on first use: the per-user file records the server */
    EXPECT(vc_connect(c, &p), VC_ERR_STATE);
    EXPECT(vc_get_server_fingerprint(c, NULL, 65), VC_ERR_INVALID_ARG);
    EXPECT(vc_get_server_fingerprint(c, fp, 10), VC_ERR_BUFFER_TOO_SMALL);
    EXPECT(vc_get_server_fingerprint(c, fp, sizeof fp), VC_OK);
    EXPECT((int)strlen(fp), 64);
    EXPECT(vc_join_channel(c, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_join_channel(c, "No such channel"), VC_ERR_NOT_FOUND);
    EXPECT(vc_join_channel(c, "Lobby"), VC_OK);
    EXPECT(vc_get_channel_audio(c, NULL), VC_ERR_INVALID_ARG);

    /* Users, channels and administration. */
    EXPECT(vc_list_users(c, NULL, 8, &count), VC_ERR_INVALID_ARG);
    EXPECT(vc_list_users(c, users, 8, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_list_users(c, NULL, 0, &count), VC_OK);
    EXPECT(count >= 1, 1);
    EXPECT(vc_list_users(c, users, 8, &count), VC_OK);
    uint32_t me = 0;
    for (size_t i = 0; i < count && i < 8; i++) if (users[i].is_self) me = users[i].user_id;
    EXPECT(me != 0, 1);
    EXPECT(vc_list_channels(c, NULL, 2, &count), VC_ERR_INVALID_ARG);
    EXPECT(vc_list_channels(c, chans, 8, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_list_channels(c, chans, 8, &count), VC_OK);
    EXPECT(count >= 1 && strcmp(chans[0].name, "Lobby") == 0 && chans[0].is_current == 1 && chans[0].member_count >= 1, 1);
    EXPECT(vc_list_user_streams(c, 0, NULL, 3, &count), VC_ERR_INVALID_ARG);
    EXPECT(vc_list_user_streams(c, me, ustreams, 8, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_list_user_streams(c, 999999, ustreams, 8, &count), VC_ERR_NOT_FOUND);
    EXPECT(vc_list_user_streams(c, me, ustreams, 8, &count), VC_OK);
    EXPECT((int)count, 0);
    EXPECT(vc_set_stream_state(c, 4242, 0, 0), VC_ERR_NOT_FOUND);
    EXPECT(vc_admin_set_server_mute(c, me, 1, 0, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_admin_set_server_mute(c, me, 2, 0, "pw"), VC_ERR_INVALID_ARG);
    EXPECT(vc_admin_set_server_mute(c, me, 0, -1, "pw"), VC_ERR_INVALID_ARG);
    EXPECT(vc_admin_kick(c, me, "why", NULL), VC_ERR_INVALID_ARG);
    {
        char long_reason[300];
        memset(long_reason, 'r', sizeof long_reason - 1);
        long_reason[sizeof long_reason - 1] = 0;
        EXPECT(vc_admin_kick(c, me, long_reason, "pw"), VC_ERR_INVALID_ARG);
    }
    EXPECT(vc_admin_set_server_mute(c, me, 1, 0, huge_pw), VC_ERR_INVALID_ARG);
    EXPECT(vc_admin_kick(c, me, "why", huge_pw), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(c, reason, sizeof reason), VC_OK);
    EXPECT(strstr(reason, "admin_password is 70000 bytes (at most 1024)") != NULL, 1);
    free(huge_pw);
    /* This server has no admin password: every admin request is refused (and not taken
     * for a guess: it adds no delay and closes nothing). */
    EXPECT(vc_admin_set_server_mute(c, me, 1, 0, "pw"), VC_ERR_AUTH);
    EXPECT(vc_last_error(c, reason, sizeof reason), VC_OK);
    EXPECT(strstr(reason, "admin password") != NULL, 1);
    EXPECT(vc_set_jitter_bounds(c, 77777, 0, 100), VC_ERR_NOT_FOUND);
    EXPECT(vc_set_jitter_bounds(c, 0, 300, 100), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(c, reason, sizeof reason), VC_OK);
    EXPECT(strstr(reason, "min_ms 300 is above max_ms 100") != NULL, 1);
    EXPECT(vc_set_jitter_bounds(c, 0, 0, 20000), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_jitter_bounds(c, 0, 0, 0), VC_OK);

    /* Streams. */
    EXPECT(vc_stream_start(c, NULL, &id), VC_ERR_INVALID_ARG);
    EXPECT(vc_stream_start(c, &d, NULL), VC_ERR_INVALID_ARG);
    d.channels = 3;
    EXPECT(vc_stream_start(c, &d, &id), VC_ERR_INVALID_ARG);
    d.channels = 1;
    d.kind = (vc_stream_kind)42;
    EXPECT(vc_stream_start(c, &d, &id), VC_ERR_INVALID_ARG);
    d.kind = VC_STREAM_MIC;
    d.external_feed = 5;                      /* 0 (a device) or 1 (the host feeds): nothing else */
    EXPECT(vc_stream_start(c, &d, &id), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(c, reason, sizeof reason), VC_OK);
    EXPECT(strstr(reason, "external_feed must be 0") != NULL && strstr(reason, "(got 5)") != NULL, 1);
    d.external_feed = 0;
    d.device = "";                            /* no name (NULL: "default"), as vc_set_capture_device says */
    EXPECT(vc_stream_start(c, &d, &id), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(c, reason, sizeof reason), VC_OK);
    EXPECT(strstr(reason, "device is empty") != NULL, 1);
    d.device = "vc_api_check_no_such_device";
    EXPECT(vc_stream_start(c, &d, &id), VC_ERR_DEVICE);
    EXPECT(vc_last_error(c, reason, sizeof reason), VC_OK);
    EXPECT(strstr(reason, "vc_api_check_no_such_device") != NULL, 1);
    d.device = NULL;
    d.external_feed = 1;
    EXPECT(vc_stream_start(c, &d, &id), VC_OK);
    EXPECT(vc_stream_feed_pcm(c, id, NULL, 960, 1), VC_ERR_INVALID_ARG);
    EXPECT(vc_stream_feed_pcm(c, id, pcm, 960, 0), VC_ERR_INVALID_ARG);
    EXPECT(vc_stream_feed_pcm(c, id, pcm, 960, 3), VC_ERR_INVALID_ARG);
    EXPECT(vc_stream_feed_pcm(c, id + 1000, pcm, 960, 1), VC_ERR_NOT_FOUND);
    EXPECT(vc_stream_feed_pcm(c, id, NULL, 0, 1), VC_OK);             /* 0 frames feed nothing, NULL or not */
    EXPECT(vc_stream_feed_pcm_f32(c, id, NULL, 0, 2), VC_OK);
    EXPECT(vc_stream_feed_pcm(c, id + 1000, pcm, 0, 1), VC_ERR_NOT_FOUND); /* ...but the stream is checked */
    EXPECT(vc_stream_feed_pcm_f32(c, id + 1000, NULL, 0, 1), VC_ERR_NOT_FOUND);
    EXPECT(vc_stream_feed_pcm(c, id, NULL, 0, 3), VC_ERR_INVALID_ARG);
    EXPECT(vc_stream_feed_pcm(c, id, pcm, 960, 2), VC_OK);
    EXPECT(vc_stream_stop(c, id + 1000), VC_ERR_NOT_FOUND);
    uint32_t queued = 99;
    EXPECT(vc_stream_queued_ms(c, id, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_stream_queued_ms(c, id + 1000, &queued), VC_ERR_NOT_FOUND);
    EXPECT(vc_stream_drain(c, id + 1000, 10), VC_ERR_NOT_FOUND);
    EXPECT(vc_stream_flush(c, id + 1000), VC_ERR_NOT_FOUND);
    /* A second of audio fed at once is paced: most of it is still queued, then drained. */
    static int16_t second[48000];
    EXPECT(vc_stream_feed_pcm(c, id, second, 48000, 1), VC_OK);
    EXPECT(vc_stream_queued_ms(c, id, &queued), VC_OK);
    EXPECT(queued > 800 && queued <= 1000, 1);
    EXPECT(vc_stream_drain(c, id, 10), VC_ERR_TIMEOUT);
    EXPECT(vc_stream_drain(c, id, 5000), VC_OK);
    EXPECT(vc_stream_queued_ms(c, id, &queued), VC_OK);
    EXPECT((int)queued, 0);
    EXPECT(vc_stream_feed_pcm(c, id, second, 48000, 1), VC_OK);
    EXPECT(vc_stream_flush(c, id), VC_OK);
    EXPECT(vc_stream_queued_ms(c, id, &queued), VC_OK);
    EXPECT((int)queued, 0);
    /* Past max_queue_ms a feed is refused whole. */
    vc_stream_desc small = vc_stream_desc_default();
    small.max_queue_ms = 100;
    uint32_t sid2;
    EXPECT(vc_stream_start(c, &small, &sid2), VC_OK);
    EXPECT(vc_stream_feed_pcm(c, sid2, second, 48000, 1), VC_ERR_NO_MEMORY);
    /* A call one sample longer than the queue is not said to be as long as it. */
    EXPECT(vc_stream_feed_pcm(c, sid2, second, 4801, 1), VC_ERR_NO_MEMORY);
    EXPECT(vc_last_error(c, reason, sizeof reason), VC_OK);
    EXPECT(strstr(reason, "this call's 100.02 ms is more than") != NULL && strstr(reason, "at most 100 ms") != NULL, 1);
    EXPECT(vc_stream_queued_ms(c, sid2, &queued), VC_OK);
    EXPECT((int)queued, 0);
    EXPECT(vc_stream_feed_pcm(c, sid2, second, 4800, 1), VC_OK);
    /* The bound holds to the sample, the partial frame included (it held up to a frame more). */
    int taken = 0, over = 0;
    uint32_t most = 0;
    while (taken < 200 && vc_stream_feed_pcm(c, sid2, second, 48, 1) == VC_OK) {
        taken++;
        EXPECT(vc_stream_queued_ms(c, sid2, &queued), VC_OK);
        if (queued > 100) over++;
        if (queued > most) most = queued;
    }
    /* Refused at the bound: never past it, and not well before it. */
    EXPECT(taken < 200 && over == 0 && most >= 90, 1);
    EXPECT(vc_stream_stop(c, sid2), VC_OK);
    small.max_queue_ms = 700000;
    EXPECT(vc_stream_start(c, &small, &sid2), VC_ERR_INVALID_ARG);
    vc_send_processing sp = vc_send_processing_default();
    EXPECT(sp.noise_suppression == 0 && sp.agc == 0 && sp.echo_cancellation == 0, 1);
    EXPECT(vc_set_send_processing(c, id, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_send_processing(c, id + 1000, &sp), VC_ERR_NOT_FOUND);
    sp.agc_level = 3.0f;
    EXPECT(vc_set_send_processing(c, id, &sp), VC_ERR_INVALID_ARG);
    sp.agc_level = 0.1f;
    sp.noise_suppression = 1;
    sp.echo_cancellation = 1;
    EXPECT(vc_set_send_processing(c, id, &sp), VC_OK);
    vc_send_processing back;
    EXPECT(vc_get_send_processing(c, id, &back), VC_OK);
    EXPECT(back.noise_suppression == 1 && back.echo_cancellation == 1 && back.agc == 0, 1);
    EXPECT(vc_get_send_processing(c, id, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_stream_state(c, id, 2, 0), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_stream_state(c, id, 0, 7), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_stream_state(c, id, 1, 1), VC_OK);
    /* Send statistics: the stream starts at the channel's protection (Lobby: FEC at 10 %). */
    vc_send_stats sst;
    EXPECT(vc_get_send_stats(c, id, &sst), VC_OK);
    EXPECT(sst.fec == 1 && sst.packet_loss_perc == 10 && sst.channel_fec == 1 && sst.channel_expected_loss == 10, 1);
    EXPECT(sst.listeners == 0 && sst.feedback_received == 0 && sst.ssrc != 0, 1);
    EXPECT(vc_get_send_stats(c, id, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_get_send_stats(c, id + 1000, &sst), VC_ERR_NOT_FOUND);
    /* An external feed has no capture device: nothing to overrun or fail. */
    EXPECT(sst.device_overruns == 0 && sst.device_failures == 0, 1);
    /* Nor this client a playback device (external playback). */
    vc_playback_stats pst;
    memset(&pst, 0xff, sizeof pst);
    EXPECT(vc_get_playback_stats(c, &pst), VC_OK);
    EXPECT(pst.device_underruns == 0 && pst.device_failures == 0 && pst.device_buffered_ms == 0, 1);
    EXPECT(vc_get_playback_stats(c, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_stream_feed_pcm(c, id, pcm, 960, 1), VC_OK);
    EXPECT(vc_set_capture_channels(c, id, 3), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_capture_channels(c, id, 2), VC_OK);
    EXPECT(vc_stream_stop(c, id), VC_OK);
    EXPECT(vc_stream_stop(c, id), VC_ERR_NOT_FOUND);
    EXPECT(vc_stream_feed_pcm(c, id, pcm, 960, 1), VC_ERR_NOT_FOUND);
    EXPECT(vc_get_send_stats(c, id, &sst), VC_ERR_NOT_FOUND);

    /* Remote streams that do not exist. */
    EXPECT(vc_set_remote_stream(c, 77777, &rs), VC_ERR_NOT_FOUND);
    EXPECT(vc_set_remote_stream(c, 77777, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_get_remote_stream(c, 77777, &rs), VC_ERR_NOT_FOUND);
    EXPECT(vc_get_remote_stream(c, 77777, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_get_stream_stats(c, 77777, &st), VC_ERR_NOT_FOUND);
    EXPECT(vc_get_stream_stats(c, 77777, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_list_remote_streams(c, NULL, 0, &count), VC_OK);
    EXPECT((int)count, 0);
    EXPECT(vc_list_remote_streams(c, NULL, 4, &count), VC_ERR_INVALID_ARG);
    EXPECT(vc_list_remote_streams(c, NULL, 0, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_get_connection_stats(c, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_read_mixed_pcm(c, NULL, 960), VC_ERR_INVALID_ARG);
    EXPECT(vc_read_mixed_pcm(c, NULL, 0), VC_OK);      /* frames 0 renders nothing */
    EXPECT(vc_read_mixed_pcm_f32(c, NULL, 0), VC_OK);
    EXPECT(vc_read_mixed_pcm(c, pcm, 960), VC_OK);
    EXPECT(vc_poll_event(c, NULL, 0), VC_ERR_INVALID_ARG);
    EXPECT(vc_last_error(c, NULL, 10), VC_ERR_INVALID_ARG);

    EXPECT(vc_disconnect(c), VC_OK);
    EXPECT(vc_disconnect(c), VC_ERR_STATE);
    vc_client_destroy(c);
    /* The handle is dead now: refused, not dereferenced. */
    EXPECT(vc_join_channel(c, "Lobby"), VC_ERR_INVALID_ARG);
    vc_client_destroy(c);
}

/* ---- the audio edge: formats, levels, per-speaker sink, recordings, devices ---- */

static vc_client *edge_listener;
static atomic_int speaker_calls, speaker_done, inside_read, inside_set, inside_join, inside_stats, inside_format, inside_block;

static void edge_speaker_sink(void *user, uint32_t ssrc, uint32_t user_id, vc_stream_kind kind, const int16_t *pcm,
                              uint32_t frames, uint32_t channels) {
    (void)user; (void)user_id; (void)kind; (void)pcm;
    if (frames != 320 || channels != 1) return;   /* the 16 kHz mono output format */
    if (atomic_fetch_add(&speaker_calls, 1) != 0) return;
    /* From inside: callback-safe calls work, the others are refused, none deadlocks. */
    int16_t out[640];
    vc_stream_stats st;
    atomic_store(&inside_read, vc_read_mixed_pcm(edge_listener, out, 320));
    atomic_store(&inside_set, vc_set_remote_stream_sink(edge_listener, NULL, NULL));
    atomic_store(&inside_join, vc_join_channel(edge_listener, "Lobby"));
    atomic_store(&inside_format, vc_set_output_format(edge_listener, 8000, 1));
    atomic_store(&inside_block, vc_set_mixed_output_block_ms(edge_listener, 10));
    atomic_store(&inside_stats, vc_get_stream_stats(edge_listener, ssrc, &st));
    atomic_store(&speaker_done, 1);   /* every result above is stored */
}

/* Two clients with external playback in Lobby: `talker` (continuous input mode, named
 * PREFIX-talker) and `listener` (PREFIX-listener). */
static void talker_and_listener(int port, const char *prefix, vc_client **talker, vc_client **listener) {
    vc_client_config cfg = vc_client_config_default();
    cfg.external_playback = 1;
    EXPECT(vc_client_create(&cfg, talker), VC_OK);
    EXPECT(vc_client_create(&cfg, listener), VC_OK);
    char name[64];
    vc_connect_params p = vc_connect_params_default();
    p.host = "127.0.0.1";
    p.port = (uint16_t)port;
    p.username = name;
    snprintf(name, sizeof name, "%s-talker", prefix);
    EXPECT(vc_connect(*talker, &p), VC_OK);
    snprintf(name, sizeof name, "%s-listener", prefix);
    EXPECT(vc_connect(*listener, &p), VC_OK);
    EXPECT(vc_join_channel(*talker, "Lobby"), VC_OK);
    EXPECT(vc_join_channel(*listener, "Lobby"), VC_OK);
    EXPECT(vc_set_input_mode(*talker, VC_INPUT_CONTINUOUS), VC_OK);
}

/* A queue of 2 events that is not polled: the host is told what it missed. */
static void a_full_event_queue_says_what_it_dropped(int port) {
    vc_client_config cfg = vc_client_config_default();
    cfg.external_playback = 1;
    cfg.event_queue_size = 2;
    vc_client *c = NULL;
    EXPECT(vc_client_create(&cfg, &c), VC_OK);
    vc_connect_params p = vc_connect_params_default();
    p.host = "127.0.0.1";
    p.port = (uint16_t)port;
    p.username = "api-small-queue";
    EXPECT(vc_connect(c, &p), VC_OK);                       /* CONNECTED */
    EXPECT(vc_join_channel(c, "Lobby"), VC_OK);             /* CHANNEL_JOINED */
    vc_stream_desc d = vc_stream_desc_default();
    uint32_t id = 0;
    EXPECT(vc_set_input_mode(c, VC_INPUT_CONTINUOUS), VC_OK);
    EXPECT(vc_stream_start(c, &d, &id), VC_OK);
    int16_t pcm[960] = {0};
    EXPECT(vc_stream_feed_pcm(c, id, pcm, 960, 1), VC_OK);  /* GATE_OPENED */
    EXPECT(vc_stream_stop(c, id), VC_OK);                    /* GATE_CLOSED */
    struct timespec settle = {0, 300000000L};                /* the server's own echoes come in too */
    nanosleep(&settle, NULL);
    vc_event ev;
    EXPECT(vc_poll_event(c, &ev, 0), 1);
    EXPECT(ev.type, VC_EVENT_EVENTS_DROPPED);
    EXPECT(ev.code >= 2, 1);
    EXPECT(strstr(ev.text, "dropped before this one: the queue holds 2") != NULL, 1);
    EXPECT(strcmp(vc_event_type_name(ev.type), "VC_EVENT_EVENTS_DROPPED"), 0);
    int kept = 0;
    while (vc_poll_event(c, &ev, 0) == 1) {
        EXPECT(ev.type != VC_EVENT_EVENTS_DROPPED, 1);
        kept++;
    }
    EXPECT(kept, 2);                                         /* the two newest */
    EXPECT(vc_disconnect(c), VC_OK);
    vc_client_destroy(c);
}

static void audio_edge(int port) {
    vc_client *talker = NULL, *c = NULL;
    talker_and_listener(port, "api-edge", &talker, &c);
    edge_listener = c;

    /* Stream sample rates. */
    vc_stream_desc d = vc_stream_desc_default();
    uint32_t sid = 0, sid44 = 0;
    d.sample_rate = 7999;
    EXPECT(vc_stream_start(talker, &d, &sid), VC_ERR_INVALID_ARG);
    d.sample_rate = 192001;
    EXPECT(vc_stream_start(talker, &d, &sid), VC_ERR_INVALID_ARG);
    d.sample_rate = 44100;
    EXPECT(vc_stream_start(talker, &d, &sid44), VC_OK);
    d.sample_rate = 0;
    EXPECT(vc_stream_start(talker, &d, &sid), VC_OK);

    /* Float feeds and input levels. */
    static float tone[44100];
    for (int i = 0; i < 44100; i++) tone[i] = 0.25f * sinf(2.0f * 3.14159265f * 441.0f * (float)i / 44100.0f);
    EXPECT(vc_stream_feed_pcm_f32(talker, sid44, NULL, 441, 1), VC_ERR_INVALID_ARG);
    EXPECT(vc_stream_feed_pcm_f32(talker, sid44, tone, 441, 0), VC_ERR_INVALID_ARG);
    EXPECT(vc_stream_feed_pcm_f32(talker, sid44, tone, 441, 3), VC_ERR_INVALID_ARG);
    EXPECT(vc_stream_feed_pcm_f32(talker, sid44 + 1000, tone, 441, 1), VC_ERR_NOT_FOUND);
    EXPECT(vc_stream_feed_pcm_f32(talker, sid44, tone, 0, 1), VC_OK);
    float rms = 0, peak = 0;
    EXPECT(vc_get_input_level(talker, sid44, NULL, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_get_input_level(talker, sid44 + 1000, &rms, &peak), VC_ERR_NOT_FOUND);
    EXPECT(vc_get_input_level(talker, sid44, &rms, &peak), VC_OK);
    EXPECT(rms == -120.0f && peak == -120.0f, 1);                    /* nothing went through yet */
    EXPECT(vc_stream_feed_pcm_f32(talker, sid44, tone, 44100, 1), VC_OK);   /* a second, sent paced */
    struct timespec t300 = {0, 300 * 1000000L};
    nanosleep(&t300, NULL);
    EXPECT(vc_get_input_level(talker, sid44, &rms, NULL), VC_OK);
    EXPECT(rms > -16.1f && rms < -14.0f, 1);                          /* a 0.25 sine: -15.05 dBFS RMS */
    EXPECT(vc_get_input_level(talker, sid44, NULL, &peak), VC_OK);
    EXPECT(peak > -13.1f && peak < -11.0f, 1);                        /* and -12.04 peak */

    /* The output format. */
    float fout[1920];
    EXPECT(vc_set_output_format(c, 7999, 2), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_output_format(c, 192001, 2), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_output_format(c, 16000, 0), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_output_format(c, 16000, 3), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_output_format(c, 16000, 1), VC_OK);
    EXPECT(vc_read_mixed_pcm_f32(c, NULL, 320), VC_ERR_INVALID_ARG);
    EXPECT(vc_read_mixed_pcm_f32(c, fout, 320), VC_OK);
    EXPECT(vc_read_mixed_pcm_f32(c, fout, 0), VC_OK);

    /* The mixed sink's block: 10 or 20 ms, nothing else. */
    EXPECT(vc_set_mixed_output_block_ms(c, 0), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_mixed_output_block_ms(c, 5), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_mixed_output_block_ms(c, 40), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_mixed_output_block_ms(c, 0xFFFFFFFFu), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_mixed_output_block_ms(c, 10), VC_OK);
    EXPECT(vc_set_mixed_output_block_ms(c, 20), VC_OK);

    /* Remote levels: the listener's entry has them (floor while nothing renders). */
    vc_remote_stream_info info[4];
    size_t count = 0;
    EXPECT(vc_list_remote_streams(c, info, 4, &count), VC_OK);
    EXPECT(count >= 1 && info[0].level_rms_dbfs <= 0 && info[0].level_peak_dbfs <= 0, 1);

    /* The per-speaker sink, and what it may call. */
    EXPECT(vc_set_remote_stream_sink(c, edge_speaker_sink, NULL), VC_OK);
    for (int i = 0; i < 300 && atomic_load(&speaker_done) == 0; i++) { struct timespec t = {0, 10000000L}; nanosleep(&t, NULL); }
    EXPECT(atomic_load(&speaker_done), 1);   /* the first call ran to its end (not only began) */
    EXPECT(atomic_load(&inside_read), VC_ERR_STATE);
    EXPECT(atomic_load(&inside_set), VC_ERR_STATE);
    EXPECT(atomic_load(&inside_join), VC_ERR_STATE);
    EXPECT(atomic_load(&inside_format), VC_ERR_STATE);
    EXPECT(atomic_load(&inside_block), VC_ERR_STATE);
    EXPECT(atomic_load(&inside_stats), VC_OK);
    EXPECT(vc_set_remote_stream_sink(c, NULL, NULL), VC_OK);
    EXPECT(vc_set_remote_stream_sink(c, NULL, NULL), VC_OK);

    /* Recordings. */
    char path[256];
    snprintf(path, sizeof path, "/tmp/vc-api-check-%d.wav", (int)getpid());
    EXPECT(vc_start_recording(c, NULL, 0), VC_ERR_INVALID_ARG);
    EXPECT(vc_start_recording(c, "", 0), VC_ERR_INVALID_ARG);
    EXPECT(vc_start_recording(c, "/nonexistent-dir/x.wav", 0), VC_ERR_INVALID_ARG);
    EXPECT(vc_start_recording(c, path, 77777), VC_ERR_NOT_FOUND);
    EXPECT(vc_stop_recording(c, 0), VC_ERR_NOT_FOUND);
    EXPECT(vc_start_recording(c, path, 0), VC_OK);
    EXPECT(vc_start_recording(c, path, 0), VC_ERR_STATE);
    EXPECT(vc_set_output_format(c, 48000, 2), VC_ERR_STATE);           /* the file's format is fixed */
    EXPECT(vc_read_mixed_pcm(c, (int16_t *)fout, 320), VC_OK);          /* background mode still serves pulls */
    EXPECT(vc_stop_recording(c, 0), VC_OK);
    EXPECT(vc_stop_recording(c, 0), VC_ERR_NOT_FOUND);
    FILE *f = fopen(path, "rb");
    unsigned char h[44] = {0};
    EXPECT(f != NULL && fread(h, 1, 44, f) == 44, 1);
    EXPECT(memcmp(h, "RIFF", 4) == 0 && h[22] == 1 && (h[24] | h[25] << 8) == 16000, 1);   /* mono, 16 kHz */
    if (f) fclose(f);
    unlink(path);
    EXPECT(vc_set_output_format(c, 48000, 2), VC_OK);

    /* Devices mid-session. */
    EXPECT(vc_set_alsa_config("pcm.vc_edge_cap_a { type file slave.pcm { type null } file \"/dev/null\" infile \"/dev/zero\" format \"raw\" }\n"
                              "pcm.vc_edge_cap_b { type file slave.pcm { type null } file \"/dev/null\" infile \"/dev/zero\" format \"raw\" }\n"
                              "pcm.vc_edge_desk_monitor { type null }\n"), VC_OK);
    vc_device_info devs[8];
    EXPECT(vc_list_devices(VC_DEVICE_CAPTURE, devs, 8, &count), VC_OK);
    int monitors = 0, plain = 0;
    for (size_t i = 0; i < count && i < 8; i++) {
        if (strcmp(devs[i].name, "vc_edge_desk_monitor") == 0 && devs[i].is_monitor == 1) monitors++;
        if (strcmp(devs[i].name, "vc_edge_cap_a") == 0 && devs[i].is_monitor == 0) plain++;
    }
    EXPECT(monitors, 1);
    EXPECT(plain, 1);
    EXPECT(vc_set_playback_device(c, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_playback_device(c, ""), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_playback_device(c, "vc_edge_no_such"), VC_OK);       /* external: kept for later */
    EXPECT(vc_set_external_playback(c, 0), VC_ERR_DEVICE);              /* ... and refused when it opens */
    EXPECT(vc_set_playback_device(c, "default"), VC_OK);
    d = vc_stream_desc_default();
    d.external_feed = 0;
    d.device = "vc_edge_cap_a";
    uint32_t dev_sid = 0;
    EXPECT(vc_stream_start(talker, &d, &dev_sid), VC_OK);
    EXPECT(vc_set_capture_device(talker, dev_sid, NULL), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_capture_device(talker, dev_sid, ""), VC_ERR_INVALID_ARG);
    EXPECT(vc_set_capture_device(talker, dev_sid + 1000, "vc_edge_cap_b"), VC_ERR_NOT_FOUND);
    EXPECT(vc_set_capture_device(talker, sid, "vc_edge_cap_b"), VC_ERR_STATE);   /* a fed stream */
    EXPECT(vc_set_capture_device(talker, dev_sid, "vc_edge_no_such"), VC_ERR_DEVICE);
    EXPECT(vc_set_capture_device(talker, dev_sid, "vc_edge_cap_b"), VC_OK);
    EXPECT(vc_stream_stop(talker, dev_sid), VC_OK);
    EXPECT(vc_set_alsa_config(NULL), VC_OK);

    vc_client_destroy(c);
    vc_client_destroy(talker);
}

/* ---- callbacks: re-entry and lifetime ------------------------------------------ */

static vc_client *log_client;
static atomic_int log_lines, nested_done, replaced_called;

static void replacement_log(void *user, int level, const char *message) {
    (void)user; (void)level; (void)message;
    atomic_fetch_add(&replaced_called, 1);
}

/* From inside the log callback (here on the host's thread, inside the failing call
 * that logged): a failing callback-safe call (which logs again: that line is dropped,
 * not recursed into), a call that is not callback-safe (refused, as in any callback:
 * it ran), vc_client_destroy (ignored: it waited for the very call it was inside,
 * forever), and replacing the log callback itself. All return. */
static void reentrant_log(void *user, int level, const char *message) {
    (void)user; (void)level; (void)message;
    atomic_fetch_add(&log_lines, 1);
    if (atomic_exchange(&nested_done, 1)) return;
    uint32_t ms = 0;
    EXPECT(vc_stream_queued_ms(log_client, 4242, &ms), VC_ERR_NOT_FOUND);
    EXPECT(vc_stream_stop(log_client, 4242), VC_ERR_STATE);
    /* Nor may it wait for a render or for the event callback: it may run on a thread
     * that holds a render lock, or be what a running event callback waits for. */
    int16_t pcm[960 * 2];
    char why[200];
    EXPECT(vc_read_mixed_pcm(log_client, pcm, 960), VC_ERR_STATE);
    EXPECT(vc_last_error(log_client, why, sizeof why), VC_OK);
    EXPECT(strstr(why, "log callback") != NULL, 1);
    EXPECT(vc_set_event_callback(log_client, NULL, NULL), VC_ERR_STATE);
    vc_client_destroy(log_client);
    EXPECT(vc_last_error(log_client, why, sizeof why), VC_OK);   /* the line itself was dropped */
    EXPECT(strstr(why, "vc_client_destroy called from inside a callback") != NULL, 1);
    vc_set_log_callback(replacement_log, NULL);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL: a callback test deadlocked (its alarm went off)\n";
    if (write(2, msg, sizeof msg - 1) < 0) {}
    _exit(1);
}

static void log_callback_reentry(void) {
    EXPECT(vc_client_create(NULL, &log_client), VC_OK);
    vc_set_log_callback(reentrant_log, NULL);
    EXPECT(vc_stream_stop(log_client, 1), VC_ERR_NOT_FOUND);   /* logs: the callback runs */
    EXPECT(atomic_load(&nested_done), 1);
    EXPECT(atomic_load(&log_lines), 1);                          /* the nested lines were dropped */
    EXPECT(vc_set_input_mode(log_client, VC_INPUT_VAD), VC_OK);  /* the destroy inside was ignored */
    EXPECT(vc_stream_stop(log_client, 2), VC_ERR_NOT_FOUND);   /* goes to the replacement */
    EXPECT(atomic_load(&replaced_called) >= 1, 1);
    vc_set_log_callback(NULL, NULL);
    vc_client_destroy(log_client);
}

/* Clearing the event callback while a slow call of it runs returns only after that
 * call has returned, so the host may free `user` right after. */
static atomic_int cb_inside, cb_finished;
static void slow_event(void *user, const vc_event *e) {
    (void)user; (void)e;
    if (atomic_exchange(&cb_inside, 1)) return;
    struct timespec t = {0, 300 * 1000000L};
    nanosleep(&t, NULL);
    atomic_store(&cb_finished, 1);
}

static void event_callback_clear_waits(int port) {
    vc_client *c = NULL;
    EXPECT(vc_client_create(NULL, &c), VC_OK);
    EXPECT(vc_set_external_playback(c, 1), VC_OK);
    EXPECT(vc_set_event_callback(c, slow_event, NULL), VC_OK);
    vc_connect_params p = {.host = "127.0.0.1", .port = (uint16_t)port, .username = "api-cb"};
    EXPECT(vc_connect(c, &p), VC_OK);   /* CONNECTED goes to slow_event */
    for (int i = 0; i < 200 && !atomic_load(&cb_inside); i++) { struct timespec t = {0, 5000000L}; nanosleep(&t, NULL); }
    EXPECT(atomic_load(&cb_inside), 1);
    EXPECT(vc_set_event_callback(c, NULL, NULL), VC_OK);
    EXPECT(atomic_load(&cb_finished), 1);   /* the running call returned before the clear did */
    vc_client_destroy(c);
}

/* Callbacks nested in pulls (helper-63's deadlocks). The event callback pulls the mix
 * (callback-safe), so the per-speaker sink runs inside that pull on the network thread:
 * there, re-setting the event callback returns at once (it spun forever: the check saw
 * only the innermost callback, the sink). And a host thread pulls too: its per-speaker
 * sink holds the render lock, which the event callback's pull may be waiting for, so
 * re-setting the event callback there is refused rather than waited out (both threads
 * stopped for good), and so is a drain (it stalled the render). */
static vc_client *nest_client, *nest_other;
static pthread_t nest_host;
static atomic_int nest_stop, nest_ev_pulls, nest_set_inside_event, nest_set_refused, nest_drain_refused, nest_host_pulls,
    nest_other_refused, nest_other_destroy_tried, nest_other_destroy_ignored;

static void nest_event(void *user, const vc_event *e) {
    (void)user; (void)e;
    int16_t b[960 * 2];
    if (vc_read_mixed_pcm(nest_client, b, 960) == VC_OK) atomic_fetch_add(&nest_ev_pulls, 1);
}

static void nest_speaker(void *user, uint32_t ssrc, uint32_t user_id, vc_stream_kind kind, const int16_t *pcm,
                         uint32_t frames, uint32_t channels) {
    (void)user; (void)ssrc; (void)user_id; (void)kind; (void)pcm; (void)frames; (void)channels;
    if (pthread_equal(pthread_self(), nest_host)) {
        if (vc_set_event_callback(nest_client, nest_event, NULL) == VC_ERR_STATE) atomic_fetch_add(&nest_set_refused, 1);
        if (vc_stream_drain(nest_client, 1, 1000) == VC_ERR_STATE) atomic_fetch_add(&nest_drain_refused, 1);
        /* Another client's event callback could be pulling this client's mix. */
        if (vc_set_event_callback(nest_other, NULL, NULL) == VC_ERR_STATE) atomic_fetch_add(&nest_other_refused, 1);
        /* Destroying that other client would wait for its event callback: ignored. */
        if (!atomic_load(&nest_other_destroy_tried)) {
            vc_client_destroy(nest_other);
            char why[256] = "";
            vc_last_error(nest_other, why, sizeof why);
            if (strstr(why, "per-speaker sink") && strstr(why, "ignored")) atomic_store(&nest_other_destroy_ignored, 1);
            atomic_store(&nest_other_destroy_tried, 1);
        }
    } else if (vc_set_event_callback(nest_client, nest_event, NULL) == VC_OK) {
        atomic_fetch_add(&nest_set_inside_event, 1);
    }
}

static void *nest_puller(void *arg) {
    (void)arg;
    int16_t b[960 * 2];
    while (!atomic_load(&nest_stop)) {
        if (vc_read_mixed_pcm(nest_client, b, 960) == VC_OK) atomic_fetch_add(&nest_host_pulls, 1);
        struct timespec t = {0, 5 * 1000000L};
        nanosleep(&t, NULL);
    }
    return NULL;
}

static void callbacks_nested_in_pulls(int port) {
    vc_client *talker = NULL;
    talker_and_listener(port, "api-nest", &talker, &nest_client);
    nest_other = talker;
    vc_client_config cfg = vc_client_config_default();
    cfg.external_playback = 1;
    vc_connect_params p = vc_connect_params_default();
    p.host = "127.0.0.1";
    p.port = (uint16_t)port;
    vc_stream_desc d = vc_stream_desc_default();
    uint32_t sid = 0;
    EXPECT(vc_stream_start(talker, &d, &sid), VC_OK);
    static int16_t tone[48000 * 4];
    for (int i = 0; i < 48000 * 4; i++) tone[i] = (int16_t)(8000.0f * sinf(2.0f * 3.14159265f * 440.0f * (float)i / 48000.0f));
    EXPECT(vc_stream_feed_pcm(talker, sid, tone, 48000 * 4, 1), VC_OK);   /* 4 s, paced by the library */
    EXPECT(vc_set_remote_stream_sink(nest_client, nest_speaker, NULL), VC_OK);   /* background mode */
    EXPECT(vc_set_event_callback(nest_client, nest_event, NULL), VC_OK);
    EXPECT(pthread_create(&nest_host, NULL, nest_puller, NULL), 0);
    /* Events for the event callback: users coming and going. */
    for (int i = 0; i < 6; i++) {
        vc_client *x = NULL;
        char name[32];
        snprintf(name, sizeof name, "api-nest-%d", i);
        p.username = name;
        EXPECT(vc_client_create(&cfg, &x), VC_OK);
        EXPECT(vc_connect(x, &p), VC_OK);
        struct timespec t = {0, 250 * 1000000L};
        nanosleep(&t, NULL);
        vc_client_destroy(x);
    }
    atomic_store(&nest_stop, 1);
    pthread_join(nest_host, NULL);
    EXPECT(atomic_load(&nest_host_pulls) > 50, 1);
    EXPECT(atomic_load(&nest_ev_pulls) >= 1, 1);
    EXPECT(atomic_load(&nest_set_inside_event) >= 1, 1);
    EXPECT(atomic_load(&nest_set_refused) >= 1, 1);
    EXPECT(atomic_load(&nest_drain_refused) >= 1, 1);
    EXPECT(atomic_load(&nest_other_refused) >= 1, 1);
    EXPECT(atomic_load(&nest_other_destroy_ignored), 1);
    EXPECT(vc_set_input_mode(talker, VC_INPUT_CONTINUOUS), VC_OK);   /* still alive */
    vc_client_destroy(nest_client);
    vc_client_destroy(talker);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s PORT\n", argv[0]); return 2; }
    signal(SIGALRM, on_alarm);
    alarm(20);
    log_callback_reentry();
    event_callback_clear_waits(atoi(argv[1]));
    alarm(0);
    null_and_bad_handles();
    null_args_on_a_live_client(atoi(argv[1]));
    alarm(10);
    a_full_event_queue_says_what_it_dropped(atoi(argv[1]));
    alarm(30);
    audio_edge(atoi(argv[1]));
    alarm(30);
    callbacks_nested_in_pulls(atoi(argv[1]));
    alarm(0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
