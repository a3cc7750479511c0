/*
 * record_mix: joins a channel and records the final stereo mix of everyone else to
 * a WAV file for SECONDS seconds (external playback with a mixed-output sink),
 * printing events as they come and per-stream statistics at the end.
 *
 *   record_mix HOST PORT USERNAME CHANNEL OUT.wav SECONDS [FINGERPRINT]
 */
#include <voicecat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "wav.h"

typedef struct {
    int16_t *pcm;        /* preallocated: the sink never allocates */
    uint32_t capacity;   /* frames */
    uint32_t frames;     /* written by the sink thread only */
} recording;

static void on_mix(void *user, const int16_t *pcm, uint32_t frames, uint32_t channels) {
    recording *r = user;
    (void)channels; /* always 2 */
    if (r->frames + frames > r->capacity) frames = r->capacity - r->frames;
    memcpy(r->pcm + (size_t)r->frames * 2, pcm, (size_t)frames * 4);
    r->frames += frames;
}

static void print_stream(vc_client *c, uint32_t ssrc, const char *name) {
    vc_stream_stats s;
    if (vc_get_stream_stats(c, ssrc, &s) != VC_OK) return;
    printf("record_mix: ssrc %u (%s): received %llu, lost %llu, duplicates %llu, late %llu, underruns %llu, "
           "fec %llu, plc %llu, depth %u/%u ms\n",
           ssrc, name, (unsigned long long)s.packets_received, (unsigned long long)s.packets_lost,
           (unsigned long long)s.duplicates, (unsigned long long)s.late, (unsigned long long)s.underruns,
           (unsigned long long)s.fec_recovered, (unsigned long long)s.plc_frames, s.current_depth_ms, s.target_depth_ms);
}

static void print_stats(vc_client *c) {
    vc_remote_stream_info info[16];
    size_t n = 0;
    vc_list_remote_streams(c, info, 16, &n);
    for (size_t i = 0; i < n && i < 16; i++) print_stream(c, info[i].ssrc, info[i].username);
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s HOST PORT USERNAME CHANNEL OUT.wav SECONDS [FINGERPRINT]\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[6]);
    if (seconds <= 0 || seconds > 3600) { fprintf(stderr, "record_mix: SECONDS must be in (0, 3600]\n"); return 2; }
    recording rec = {0};
    rec.capacity = (uint32_t)(seconds * 48000) + 960;
    rec.pcm = calloc((size_t)rec.capacity * 2, sizeof(int16_t));
    if (!rec.pcm) return 1;

    vc_client *c = NULL;
    vc_client_config cfg = vc_client_config_default();
    cfg.client_name = "record_mix";
    cfg.external_playback = 1;  /* the mix goes to our sink, not to a sound card */
    int rc = vc_client_create(&cfg, &c);
    if (rc) { fprintf(stderr, "record_mix: %s\n", vc_strerror(rc)); return 1; }
    vc_connect_params p = vc_connect_params_default();
    p.host = argv[1];
    p.port = (uint16_t)atoi(argv[2]);
    p.username = argv[3];
    p.server_fingerprint = argc > 7 ? argv[7] : NULL;
    if ((rc = vc_connect(c, &p)) || (rc = vc_join_channel(c, argv[4]))) {
        char detail[256] = "";
        vc_last_error(c, detail, sizeof detail);
        fprintf(stderr, "record_mix: %s (%s)\n", vc_strerror(rc), detail);
        vc_client_destroy(c);
        return 1;
    }
    vc_set_mixed_output_sink(c, on_mix, &rec);
    printf("record_mix: recording %s for %.1f s\n", argv[5], seconds);

    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        vc_event e;
        if (vc_poll_event(c, &e, 100) == 1) {
            printf("record_mix: event %s ssrc=%u user=%u %s\n", vc_event_type_name(e.type), e.ssrc, e.user_id, e.text);
            /* A stream's statistics, each time its talker pauses (they go with the stream). */
            if (e.type == VC_EVENT_TALK_STOP) print_stream(c, e.ssrc, "talk stop");
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= seconds) break;
    }
    vc_set_mixed_output_sink(c, NULL, NULL);  /* waits for the sink thread: rec is ours again */
    print_stats(c);
    vc_disconnect(c);
    vc_client_destroy(c);
    int ok = wav_write(argv[5], rec.pcm, rec.frames, 2, 48000);
    printf("record_mix: wrote %.2f s of stereo 48 kHz to %s\n", rec.frames / 48000.0, argv[5]);
    free(rec.pcm);
    return ok == 0 ? 0 : 1;
}
