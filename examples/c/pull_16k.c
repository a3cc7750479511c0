/*
 * pull_16k: a 16 kHz mono consumer, as a speech recognizer would be fed. It asks the
 * library for 16 kHz mono output (vc_set_output_format), pulls the mix from its own
 * loop every 20 ms (vc_read_mixed_pcm, 320 frames) into OUT.wav, and gets each
 * speaker's own 16 kHz mono PCM from the per-speaker sink, which the library calls on
 * this thread inside each pull once the pulls come (before the first, its background
 * thread renders for the sink; one thread at a time): it keeps each speaker's speech
 * time and level.
 *
 *   pull_16k HOST PORT USERNAME CHANNEL OUT.wav SECONDS [FINGERPRINT]
 *
 * Build: cc pull_16k.c $(pkg-config --cflags --libs voicecat) -lm -o pull_16k
 * (-lm for its own sqrt: the library's pkg-config file names only what it needs).
 */
#include <voicecat.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "wav.h"

#define RATE 16000
#define BLOCK (RATE / 50)
#define SPEAKERS 16

/* Per speaker: touched only by the per-speaker sink (one thread at a time, see above). */
typedef struct { uint32_t ssrc, user_id; uint64_t frames, loud_frames; double energy; } speaker;
static speaker speakers[SPEAKERS];
static int nspeakers;

static void on_speaker(void *user, uint32_t ssrc, uint32_t user_id, vc_stream_kind kind, const int16_t *pcm, uint32_t frames,
                       uint32_t channels) {
    (void)user; (void)kind;
    speaker *s = NULL;
    for (int i = 0; i < nspeakers; i++) if (speakers[i].ssrc == ssrc) s = &speakers[i];
    if (!s && nspeakers < SPEAKERS) { s = &speakers[nspeakers++]; s->ssrc = ssrc; s->user_id = user_id; }
    if (!s) return;
    double e = 0;
    for (uint32_t i = 0; i < frames * channels; i++) e += (double)pcm[i] * pcm[i];
    s->frames += frames;
    s->energy += e;
    if (frames && sqrt(e / (frames * channels)) > 1000) s->loud_frames += frames;   /* about -30 dBFS */
}

static void sleep_until(struct timespec *t, long add_ns) {
    t->tv_nsec += add_ns;
    while (t->tv_nsec >= 1000000000L) { t->tv_nsec -= 1000000000L; t->tv_sec++; }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, t, NULL) != 0) {}
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s HOST PORT USERNAME CHANNEL OUT.wav SECONDS [FINGERPRINT]\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[6]);
    if (seconds <= 0 || seconds > 3600) { fprintf(stderr, "pull_16k: SECONDS must be in (0, 3600]\n"); return 2; }
    uint32_t blocks = (uint32_t)(seconds * 50);
    int16_t *mix = calloc((size_t)blocks * BLOCK, sizeof(int16_t));
    if (!mix) return 1;

    vc_client *c = NULL;
    vc_client_config cfg = vc_client_config_default();
    cfg.client_name = "pull_16k";
    cfg.external_playback = 1;     /* we pull the mix ourselves */
    int rc = vc_client_create(&cfg, &c);
    if (rc) { fprintf(stderr, "pull_16k: %s\n", vc_strerror(rc)); return 1; }
    vc_connect_params p = vc_connect_params_default();
    p.host = argv[1];
    p.port = (uint16_t)atoi(argv[2]);
    p.username = argv[3];
    p.server_fingerprint = argc > 7 ? argv[7] : NULL;
    if ((rc = vc_set_output_format(c, RATE, 1)) || (rc = vc_connect(c, &p)) || (rc = vc_join_channel(c, argv[4])) ||
        (rc = vc_set_remote_stream_sink(c, on_speaker, NULL))) {
        char detail[256] = "";
        vc_last_error(c, detail, sizeof detail);
        fprintf(stderr, "pull_16k: %s (%s)\n", vc_strerror(rc), detail);
        vc_client_destroy(c);
        return 1;
    }
    printf("pull_16k: pulling %.1f s of the mix at 16 kHz mono\n", seconds);
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    uint32_t got = 0;
    for (uint32_t k = 0; k < blocks; k++) {
        if (vc_read_mixed_pcm(c, mix + (size_t)got * BLOCK, BLOCK) == VC_OK) got++;
        vc_event e;
        while (vc_poll_event(c, &e, 0) == 1) {
            if (e.type == VC_EVENT_TALK_START) printf("pull_16k: %s talks (ssrc %u)\n", e.text, e.ssrc);
        }
        sleep_until(&t, 20000000L);
    }
    vc_set_remote_stream_sink(c, NULL, NULL);
    for (int i = 0; i < nspeakers; i++) {
        speaker *s = &speakers[i];
        double rms = s->frames ? sqrt(s->energy / s->frames) : 0;
        printf("pull_16k: speaker ssrc %u (user %u): %.2f s received at 16 kHz, %.2f s of it above -30 dBFS, RMS %.0f\n", s->ssrc,
               s->user_id, (double)s->frames / RATE, (double)s->loud_frames / RATE, rms);
    }
    vc_disconnect(c);
    vc_client_destroy(c);
    int ok = wav_write(argv[5], mix, got * BLOCK, 1, RATE);
    printf("pull_16k: wrote %.2f s of 16 kHz mono to %s\n", (double)got * BLOCK / RATE, argv[5]);
    free(mix);
    return ok == 0 ? 0 : 1;
}
