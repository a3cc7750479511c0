/*
 * alloc_host: a host process that counts every heap allocation made by any thread
 * (malloc, calloc, realloc, memalign and friends are interposed here, so the
 * library's Swift runtime, libopus, ALSA and libc all land in the count) while two
 * clients talk and listen through a live server in steady state.
 *
 *   alloc_host PORT MODE SECONDS [resample]
 *     MODE: sink   - external playback, a mixed-output sink (the client's mixer thread)
 *           sink10 - the same with 10 ms sink blocks (vc_set_mixed_output_block_ms): each
 *                    20 ms frame is played across two blocks
 *           pull   - external playback, a host thread calls vc_read_mixed_pcm every 20 ms
 *           device - playback on a file-backed ALSA PCM, with a sink tapping it
 *     resample: conversion everywhere: the talker's stream runs at 44.1 kHz and is fed
 *           float (vc_stream_feed_pcm_f32), the listener's output format is 16 kHz mono
 *           (the sink, the pulls as float), a per-speaker sink is set and the mix is
 *           recorded to a WAV file (the recorder's writer thread counts too).
 *
 * A talker feeds a tone from its own thread every 20 ms; the listener renders in the
 * chosen mode. After a warm-up, allocations are counted for SECONDS. Prints the
 * count (and where the first few came from) and "N passed, M failed".
 */
#define _GNU_SOURCE 1
#include <voicecat.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the interposer ---------------------------------------------------------- */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static atomic_int counting;
static atomic_long allocations;
#define MAX_TRACES 6
static void *traces[MAX_TRACES][24];
static int trace_depth[MAX_TRACES];
static atomic_int traced;
static __thread int in_hook;

static void note(void) {
    if (!atomic_load_explicit(&counting, memory_order_relaxed) || in_hook) return;
    atomic_fetch_add(&allocations, 1);
    int slot = atomic_fetch_add(&traced, 1);
    if (slot < MAX_TRACES) {
        in_hook = 1;
        trace_depth[slot] = backtrace(traces[slot], 24);
        in_hook = 0;
    }
}

void *malloc(size_t n) { note(); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { note(); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { note(); return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
void *memalign(size_t a, size_t n) { note(); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { note(); return __libc_memalign(a, n); }
void *valloc(size_t n) { note(); return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), n); }
int posix_memalign(void **out, size_t a, size_t n) {
    note();
    void *p = __libc_memalign(a, n);
    if (!p) return 12; /* ENOMEM */
    *out = p;
    return 0;
}

/* ---- the host ------------------------------------------------------------------ */

static int passed, failed;
static atomic_int running = 1;
static vc_client *talker, *listener;
static uint32_t talker_stream;
static atomic_long sink_calls, pulls, feeds, speaker_blocks;
static int resample;

static void sleep_until(struct timespec *t, long add_ns) {
    t->tv_nsec += add_ns;
    while (t->tv_nsec >= 1000000000L) { t->tv_nsec -= 1000000000L; t->tv_sec++; }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, t, NULL) != 0) {}
}

static void *feeder(void *arg) {
    (void)arg;
    int16_t pcm[960];
    float fpcm[882];
    long k = 0;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    while (atomic_load(&running)) {
        int ok;
        if (resample) {   /* 20 ms at 44.1 kHz, float */
            for (int i = 0; i < 882; i++) fpcm[i] = (float)(0.25 * sin(2 * M_PI * 440.0 * (double)(k * 882 + i) / 44100.0));
            ok = vc_stream_feed_pcm_f32(talker, talker_stream, fpcm, 882, 1) == VC_OK;
        } else {
            for (int i = 0; i < 960; i++) pcm[i] = (int16_t)(8000 * sin(2 * M_PI * 440.0 * (double)(k * 960 + i) / 48000.0));
            ok = vc_stream_feed_pcm(talker, talker_stream, pcm, 960, 1) == VC_OK;
        }
        if (ok) atomic_fetch_add(&feeds, 1);
        k++;
        sleep_until(&t, 20000000L);
    }
    return NULL;
}

static void *puller(void *arg) {
    (void)arg;
    int16_t out[960 * 2];
    float fout[320];
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    while (atomic_load(&running)) {
        int ok = resample ? vc_read_mixed_pcm_f32(listener, fout, 320) == VC_OK : vc_read_mixed_pcm(listener, out, 960) == VC_OK;
        if (ok) atomic_fetch_add(&pulls, 1);
        sleep_until(&t, 20000000L);
    }
    return NULL;
}

static void on_speaker(void *user, uint32_t ssrc, uint32_t user_id, vc_stream_kind kind, const int16_t *pcm, uint32_t frames,
                       uint32_t channels) {
    (void)user; (void)ssrc; (void)user_id; (void)kind; (void)pcm; (void)frames; (void)channels;
    atomic_fetch_add(&speaker_blocks, 1);
}

static atomic_long sink_frames;

static void on_sink(void *user, const int16_t *pcm, uint32_t frames, uint32_t channels) {
    (void)user; (void)pcm; (void)channels;
    atomic_fetch_add(&sink_calls, 1);
    atomic_fetch_add(&sink_frames, (long)frames);
}

#define CHECK(cond, ...) do { if (cond) passed++; else { failed++; fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); } } while (0)

static vc_client *connect_client(int port, const char *name, int external, const char *device) {
    vc_client_config cfg = vc_client_config_default();
    cfg.external_playback = external;
    cfg.playback_device = device;
    cfg.keepalive_ms = getenv("KA") ? (uint32_t)atoi(getenv("KA")) : 1000;  /* pings and keepalives included, often */
    cfg.loss_report_ms = getenv("LR") ? (uint32_t)atoi(getenv("LR")) : 1000;  /* loss reports included */
    vc_client *c = NULL;
    if (vc_client_create(&cfg, &c) != VC_OK) { fprintf(stderr, "create failed\n"); exit(2); }
    vc_connect_params p = {.host = "127.0.0.1", .port = (uint16_t)port, .username = name, .timeout_ms = 5000};
    int rc = vc_connect(c, &p);
    if (rc == VC_OK) rc = vc_join_channel(c, "Lobby");
    if (rc != VC_OK) {
        char buf[256];
        vc_last_error(c, buf, sizeof buf);
        fprintf(stderr, "%s: connect/join failed: %s (%s)\n", name, vc_strerror(rc), buf);
        exit(2);
    }
    return c;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: alloc_host PORT sink|sink10|pull|device SECONDS [resample]\n"); return 2; }
    int port = atoi(argv[1]);
    const char *mode = argv[2];
    int seconds = atoi(argv[3]);
    resample = argc > 4 && strcmp(argv[4], "resample") == 0;
    char wav[128];
    snprintf(wav, sizeof wav, "/tmp/vc-alloc-host-%d.wav", (int)getpid());
    void *prime[4];
    backtrace(prime, 4);  /* loads the unwinder now, not while counting */

    int device = strcmp(mode, "device") == 0;
    if (device) {
        const char *cfg = "pcm.vc_alloc_play { type file slave.pcm { type null } file \"/dev/null\" format \"raw\" }";
        if (vc_set_alsa_config(cfg) != VC_OK) { fprintf(stderr, "alsa config failed\n"); return 2; }
    }
    talker = connect_client(port, "alloc-talker", 1, NULL);
    listener = connect_client(port, "alloc-listener", device ? 0 : 1, device ? "vc_alloc_play" : NULL);
    vc_set_input_mode(talker, VC_INPUT_CONTINUOUS);
    vc_stream_desc d = vc_stream_desc_default();
    if (resample) d.sample_rate = 44100;
    if (vc_stream_start(talker, &d, &talker_stream) != VC_OK) { fprintf(stderr, "stream start failed\n"); return 2; }
    if (resample) {
        if (vc_set_output_format(listener, 16000, 1) != VC_OK || vc_set_remote_stream_sink(listener, on_speaker, NULL) != VC_OK) {
            fprintf(stderr, "output format or per-speaker sink failed\n");
            return 2;
        }
        if (vc_start_recording(listener, wav, 0) != VC_OK) { fprintf(stderr, "recording failed\n"); return 2; }
    }

    pthread_t feed_thread, pull_thread;
    pthread_create(&feed_thread, NULL, feeder, NULL);
    if (strcmp(mode, "pull") == 0) pthread_create(&pull_thread, NULL, puller, NULL);
    else {
        if (strcmp(mode, "sink10") == 0 && vc_set_mixed_output_block_ms(listener, 10) != VC_OK) {
            fprintf(stderr, "10 ms sink blocks refused\n");
            return 2;
        }
        vc_set_mixed_output_sink(listener, on_sink, NULL);
    }

    sleep(2);  /* warm-up: connections, first talkspurt, buffers sized */
    /* ... and the stream's loss protection settled: on this clean path the listener's
     * reports turn the channel's FEC off after a few seconds, with an event whose text
     * is built then (a change of state, not per-frame work). Up to 10 s more. */
    for (int i = 0; i < 100; i++) {
        vc_send_stats ss;
        if (vc_get_send_stats(talker, talker_stream, &ss) == VC_OK && ss.fec == 0 && ss.protection_changes > 0) break;
        usleep(100 * 1000);
    }
    sleep(1);
    long calls0 = atomic_load(&sink_calls) + atomic_load(&pulls), feeds0 = atomic_load(&feeds), frames0 = atomic_load(&sink_frames);
    atomic_store(&counting, 1);
    sleep((unsigned)seconds);
    atomic_store(&counting, 0);
    long n = atomic_load(&allocations);
    long calls = atomic_load(&sink_calls) + atomic_load(&pulls) - calls0, fed = atomic_load(&feeds) - feeds0;
    long sunk = atomic_load(&sink_frames) - frames0;

    atomic_store(&running, 0);
    pthread_join(feed_thread, NULL);
    if (strcmp(mode, "pull") == 0) pthread_join(pull_thread, NULL);
    else vc_set_mixed_output_sink(listener, NULL, NULL);
    long speakers = atomic_load(&speaker_blocks);
    if (resample) {
        vc_set_remote_stream_sink(listener, NULL, NULL);
        vc_stop_recording(listener, 0);
        unlink(wav);
    }

    vc_stream_stats st;
    uint32_t ssrc = 0;
    vc_remote_stream_info info[4];
    size_t count = 0;
    vc_list_remote_streams(listener, info, 4, &count);
    if (count > 0) ssrc = info[0].ssrc;
    int have_stats = count > 0 && vc_get_stream_stats(listener, ssrc, &st) == VC_OK;

    printf("alloc_host %s%s: %ld allocations in %d s of steady state (%ld frames fed, %ld blocks rendered, %llu received, "
           "%ld per-speaker blocks)\n", mode, resample ? " resample" : "", n, seconds, fed, calls,
           have_stats ? (unsigned long long)st.packets_received : 0ULL, speakers);
    int shown = n < MAX_TRACES ? (int)n : MAX_TRACES;
    for (int i = 0; i < shown; i++) {
        fprintf(stderr, "-- allocation %d:\n", i + 1);
        backtrace_symbols_fd(traces[i], trace_depth[i], 2);
    }
    CHECK(n == 0, "%s mode: %ld allocations in steady state", mode, n);
    CHECK(fed >= seconds * 50 / 2, "%s mode: only %ld frames fed", mode, fed);
    CHECK(calls >= seconds * 50 / 2, "%s mode: only %ld blocks rendered", mode, calls);
    if (strcmp(mode, "sink10") == 0) {  /* 10 ms blocks: twice as many calls, 10 ms each in the output format */
        long per_call = resample ? 160 : 480;   /* 16 kHz or 48 kHz */
        CHECK(calls >= seconds * 100 / 2 && sunk % per_call == 0 && labs(sunk - calls * per_call) <= per_call,
              "sink10 mode: %ld calls of %ld frames in all", calls, sunk);   /* a call may fall between the two reads */
    }
    CHECK(have_stats && st.packets_received >= (unsigned long long)seconds * 50 / 2, "%s mode: the listener received too little", mode);
    if (resample) CHECK(speakers >= seconds * 50 / 2, "%s mode: only %ld per-speaker blocks", mode, speakers);

    vc_client_destroy(talker);
    vc_client_destroy(listener);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
