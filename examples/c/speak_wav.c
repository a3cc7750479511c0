/*
 * speak_wav: joins a channel and speaks a WAV file as a MIC stream (external feed:
 * the whole file in one call, paced at real time by the library), then prints what
 * the connection saw.
 *
 *   speak_wav HOST PORT USERNAME CHANNEL FILE.wav [FINGERPRINT]
 *
 * FILE.wav: 16-bit PCM, mono or stereo, at any rate from 8 to 192 kHz (the stream is
 * declared at the file's rate and the library resamples it to 48 kHz).
 */
#include <voicecat.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "wav.h"

static int fail(vc_client *c, const char *what, int rc) {
    char detail[256] = "";
    if (c) vc_last_error(c, detail, sizeof detail);
    fprintf(stderr, "speak_wav: %s failed: %s (%s)\n", what, vc_strerror(rc), detail);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s HOST PORT USERNAME CHANNEL FILE.wav [FINGERPRINT]\n", argv[0]);
        return 2;
    }
    if (vc_version_number() != VC_VERSION_NUMBER) {
        fprintf(stderr, "speak_wav: header %d does not match library %u\n", VC_VERSION_NUMBER, vc_version_number());
        return 1;
    }
    wav_data w;
    if (wav_read(argv[5], &w) != 0) return 1;
    if (w.rate < 8000 || w.rate > 192000 || (w.channels != 1 && w.channels != 2)) {
        fprintf(stderr, "speak_wav: %s must be 8..192 kHz mono or stereo (is %u Hz, %u ch)\n", argv[5], w.rate, w.channels);
        return 1;
    }

    vc_client *c = NULL;
    vc_client_config cfg = vc_client_config_default();
    cfg.client_name = "speak_wav";
    cfg.external_playback = 1;  /* a talker only: no playback device */
    int rc = vc_client_create(&cfg, &c);
    if (rc) return fail(NULL, "vc_client_create", rc);
    vc_connect_params p = vc_connect_params_default();
    p.host = argv[1];
    p.port = (uint16_t)atoi(argv[2]);
    p.username = argv[3];
    p.server_fingerprint = argc > 6 ? argv[6] : NULL;
    p.timeout_ms = 5000;
    if ((rc = vc_connect(c, &p))) return fail(c, "vc_connect", rc);
    char fp[65];
    vc_get_server_fingerprint(c, fp, sizeof fp);
    printf("speak_wav: connected, server fingerprint %s\n", fp);
    if ((rc = vc_join_channel(c, argv[4]))) return fail(c, "vc_join_channel", rc);

    vc_stream_desc d = vc_stream_desc_default();
    d.channels = w.channels;
    d.sample_rate = w.rate;     /* fed at the file's rate; resampled inside when it is not 48 kHz */
    d.max_queue_ms = (uint32_t)((uint64_t)w.frames * 1000 / w.rate) + 1000;  /* room for the whole file */
    uint32_t sid;
    if ((rc = vc_stream_start(c, &d, &sid))) return fail(c, "vc_stream_start", rc);

    /* The whole file in one call: the library queues it and sends it paced at real
     * time, as a talkspurt; vc_stream_drain waits until the last frame is out. */
    if ((rc = vc_stream_feed_pcm(c, sid, w.pcm, w.frames, w.channels))) return fail(c, "vc_stream_feed_pcm", rc);
    uint32_t queued = 0;
    vc_stream_queued_ms(c, sid, &queued);
    printf("speak_wav: %.2f s fed at %u Hz, %u ms queued to be sent at real time\n", (double)w.frames / w.rate, w.rate, queued);
    if ((rc = vc_stream_drain(c, sid, -1))) return fail(c, "vc_stream_drain", rc);
    /* Let listeners play out what is buffered and see the talker pause before the stream goes. */
    struct timespec linger = {0, 500000000};
    nanosleep(&linger, NULL);
    vc_stream_stop(c, sid);

    vc_connection_stats cs;
    vc_get_connection_stats(c, &cs);
    printf("speak_wav: sent %.2f s of audio in %llu packets (%llu bytes), media rtt %u ms, control rtt %u ms\n",
           (double)w.frames / w.rate, (unsigned long long)cs.packets_out, (unsigned long long)cs.bytes_out,
           cs.media_rtt_ms, cs.control_rtt_ms);
    vc_disconnect(c);
    vc_client_destroy(c);
    free(w.pcm);
    return 0;
}
