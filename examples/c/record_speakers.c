/*
 * record_speakers: joins a channel and records every other participant's stream to
 * its own WAV file (OUTDIR/USERNAME-SSRC.wav) for SECONDS seconds, with the library's
 * recorder (vc_start_recording): a file starts when a stream appears and is closed
 * when it goes away or at the end. Nothing else consumes the mix, so the library
 * renders by itself for the recordings.
 *
 *   record_speakers HOST PORT USERNAME CHANNEL OUTDIR SECONDS [RATE [CHANNELS [FINGERPRINT]]]
 *
 * RATE and CHANNELS: the files' format (vc_set_output_format); default 48000 Hz, 2.
 */
#include <voicecat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fail(vc_client *c, const char *what, int rc) {
    char detail[256] = "";
    if (c) vc_last_error(c, detail, sizeof detail);
    fprintf(stderr, "record_speakers: %s failed: %s (%s)\n", what, vc_strerror(rc), detail);
    return 1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s HOST PORT USERNAME CHANNEL OUTDIR SECONDS [RATE [CHANNELS [FINGERPRINT]]]\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[6]);
    uint32_t rate = argc > 7 ? (uint32_t)atoi(argv[7]) : 48000, channels = argc > 8 ? (uint32_t)atoi(argv[8]) : 2;

    vc_client *c = NULL;
    vc_client_config cfg = vc_client_config_default();
    cfg.client_name = "record_speakers";
    cfg.external_playback = 1;
    int rc = vc_client_create(&cfg, &c);
    if (rc) return fail(NULL, "vc_client_create", rc);
    if ((rc = vc_set_output_format(c, rate, channels))) return fail(c, "vc_set_output_format", rc);
    vc_connect_params p = vc_connect_params_default();
    p.host = argv[1];
    p.port = (uint16_t)atoi(argv[2]);
    p.username = argv[3];
    p.server_fingerprint = argc > 9 ? argv[9] : NULL;
    if ((rc = vc_connect(c, &p))) return fail(c, "vc_connect", rc);
    if ((rc = vc_join_channel(c, argv[4]))) return fail(c, "vc_join_channel", rc);
    printf("record_speakers: recording each speaker at %u Hz, %u channel(s) into %s for %.1f s\n", rate, channels, argv[5], seconds);

    uint32_t recording[32];
    int n = 0;
    double end = now_s() + seconds;
    while (now_s() < end) {
        vc_event e;
        if (vc_poll_event(c, &e, 100) != 1) continue;
        if (e.type == VC_EVENT_REMOTE_STREAM_ADDED && n < 32) {
            char path[512];
            snprintf(path, sizeof path, "%s/%s-%u.wav", argv[5], e.text, e.ssrc);
            if ((rc = vc_start_recording(c, path, e.ssrc)) == VC_OK) {
                recording[n++] = e.ssrc;
                printf("record_speakers: %s (ssrc %u) -> %s\n", e.text, e.ssrc, path);
            } else {
                fail(c, "vc_start_recording", rc);
            }
        } else if (e.type == VC_EVENT_REMOTE_STREAM_REMOVED) {
            for (int i = 0; i < n; i++) {
                if (recording[i] != e.ssrc) continue;
                vc_stop_recording(c, e.ssrc);   /* completes and closes the file */
                printf("record_speakers: ssrc %u left, its file is complete\n", e.ssrc);
                recording[i] = recording[--n];
                break;
            }
        } else if (e.type == VC_EVENT_TALK_START) {
            printf("record_speakers: %s talks (ssrc %u)\n", e.text, e.ssrc);
        }
    }
    for (int i = 0; i < n; i++) vc_stop_recording(c, recording[i]);
    vc_disconnect(c);
    vc_client_destroy(c);
    return 0;
}
