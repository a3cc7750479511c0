/* COpus: pass-throughs for libopus calls Swift cannot import (variadic *_ctl), and
 * the DRED decoder API looked up at run time (Debian's libopus 1.3 has none). */
#include <pthread.h>
#include <dlfcn.h>
#include <stdlib.h>
#include "copus.h"

/* OPUS_SET_DRED_DURATION_REQUEST from libopus >= 1.5; absent from 1.3 headers. */
#ifndef OPUS_SET_DRED_DURATION_REQUEST
#define OPUS_SET_DRED_DURATION_REQUEST 4050
#endif

int vcshim_opus_set_bitrate(OpusEncoder *enc, int32_t bps) { return opus_encoder_ctl(enc, OPUS_SET_BITRATE(bps)); }
int vcshim_opus_set_complexity(OpusEncoder *enc, int32_t c) { return opus_encoder_ctl(enc, OPUS_SET_COMPLEXITY(c)); }
int vcshim_opus_set_inband_fec(OpusEncoder *enc, int32_t on) { return opus_encoder_ctl(enc, OPUS_SET_INBAND_FEC(on)); }
int vcshim_opus_set_packet_loss_perc(OpusEncoder *enc, int32_t p) { return opus_encoder_ctl(enc, OPUS_SET_PACKET_LOSS_PERC(p)); }
int vcshim_opus_set_dtx(OpusEncoder *enc, int32_t on) { return opus_encoder_ctl(enc, OPUS_SET_DTX(on)); }
int vcshim_opus_set_max_bandwidth(OpusEncoder *enc, int32_t bw) { return opus_encoder_ctl(enc, OPUS_SET_MAX_BANDWIDTH(bw)); }
int vcshim_opus_set_signal(OpusEncoder *enc, int32_t s) { return opus_encoder_ctl(enc, OPUS_SET_SIGNAL(s)); }
int vcshim_opus_get_lookahead(OpusEncoder *enc, int32_t *out) { return opus_encoder_ctl(enc, OPUS_GET_LOOKAHEAD(out)); }
int vcshim_opus_get_in_dtx(OpusEncoder *enc, int32_t *out) { return opus_encoder_ctl(enc, OPUS_GET_IN_DTX(out)); }
int vcshim_opus_set_dred_duration(OpusEncoder *enc, int32_t n) {
    return opus_encoder_ctl(enc, OPUS_SET_DRED_DURATION_REQUEST, (opus_int32)n);
}
int vcshim_opus_decoder_get_last_packet_duration(OpusDecoder *dec, int32_t *out) {
    return opus_decoder_ctl(dec, OPUS_GET_LAST_PACKET_DURATION(out));
}
int vcshim_opus_decoder_reset(OpusDecoder *dec) { return opus_decoder_ctl(dec, OPUS_RESET_STATE); }

/* RFC 6716 4.2.3: a SILK or hybrid frame begins with its header bits, each coded
 * with probability 1/2, so they are the first byte's top bits: one VAD flag per
 * 20 ms of SILK audio (1 for 10-20 ms frames, 2 for 40 ms, 3 for 60 ms), then the
 * LBRR flag; a stereo frame repeats them for the side channel. CELT-only frames
 * (configurations 16-31) never carry LBRR. */
int vcshim_opus_packet_has_lbrr(const unsigned char *packet, int32_t len) {
    const unsigned char *frames[48];
    opus_int16 sizes[48];
    unsigned char toc = 0;
    if (len < 1) return OPUS_BAD_ARG;
    if ((packet[0] >> 3) >= 16) return 0;
    int n = opus_packet_parse(packet, len, &toc, frames, sizes, NULL);
    if (n < 0) return n;
    if (n == 0 || sizes[0] == 0) return 0;
    int per_frame = opus_packet_get_samples_per_frame(packet, 48000);
    int silk_frames = per_frame > 960 ? per_frame / 960 : 1;
    int mid = (frames[0][0] >> (7 - silk_frames)) & 1;
    int side = 0;
    if (opus_packet_get_nb_channels(packet) == 2) side = (frames[0][0] >> (6 - 2 * silk_frames)) & 1;
    return mid || side;
}

/* ---- DRED through dlsym: the Debian 1.3 headers do not declare it ---------------- */

typedef struct vcshim_dred_fns {
    void *(*decoder_create)(int *error);
    void (*decoder_destroy)(void *dec);
    void *(*alloc)(int *error);
    void (*free_)(void *dred);
    int (*parse)(void *dred_dec, void *dred, const unsigned char *data, opus_int32 len, opus_int32 max_dred_samples,
                 opus_int32 sampling_rate, int *dred_end, int defer_processing);
    int (*decode)(OpusDecoder *st, const void *dred, opus_int32 dred_offset, opus_int16 *pcm, opus_int32 frame_size);
    int (*decode_float)(OpusDecoder *st, const void *dred, opus_int32 dred_offset, float *pcm, opus_int32 frame_size);
} vcshim_dred_fns;

static vcshim_dred_fns dred_fns;
static pthread_once_t dred_once = PTHREAD_ONCE_INIT;
static int dred_ok;

static void dred_resolve(void) {
    dred_fns.decoder_create = (void *(*)(int *))dlsym(RTLD_DEFAULT, "opus_dred_decoder_create");
    dred_fns.decoder_destroy = (void (*)(void *))dlsym(RTLD_DEFAULT, "opus_dred_decoder_destroy");
    dred_fns.alloc = (void *(*)(int *))dlsym(RTLD_DEFAULT, "opus_dred_alloc");
    dred_fns.free_ = (void (*)(void *))dlsym(RTLD_DEFAULT, "opus_dred_free");
    dred_fns.parse = (int (*)(void *, void *, const unsigned char *, opus_int32, opus_int32, opus_int32, int *, int))
        dlsym(RTLD_DEFAULT, "opus_dred_parse");
    dred_fns.decode = (int (*)(OpusDecoder *, const void *, opus_int32, opus_int16 *, opus_int32))
        dlsym(RTLD_DEFAULT, "opus_decoder_dred_decode");
    dred_fns.decode_float = (int (*)(OpusDecoder *, const void *, opus_int32, float *, opus_int32))
        dlsym(RTLD_DEFAULT, "opus_decoder_dred_decode_float");
    dred_ok = dred_fns.decoder_create && dred_fns.decoder_destroy && dred_fns.alloc && dred_fns.free_ &&
              dred_fns.parse && dred_fns.decode && dred_fns.decode_float;
}

int vcshim_dred_available(void) { pthread_once(&dred_once, dred_resolve); return dred_ok; }

typedef struct { void *dec; void *dred; } vcshim_dred_state;

void *vcshim_dred_create(void) {
    if (!vcshim_dred_available()) return NULL;
    int err = 0;
    vcshim_dred_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->dec = dred_fns.decoder_create(&err);
    s->dred = err == 0 ? dred_fns.alloc(&err) : NULL;
    if (!s->dec || !s->dred) { vcshim_dred_destroy(s); return NULL; }
    return s;
}

void vcshim_dred_destroy(void *state) {
    vcshim_dred_state *s = state;
    if (!s) return;
    if (s->dred) dred_fns.free_(s->dred);
    if (s->dec) dred_fns.decoder_destroy(s->dec);
    free(s);
}

/* Parses `packet`'s DRED; 1 when it covers the frame_size samples before the
 * packet's own audio (the lost frame ends where the packet starts). */
static int dred_covers(vcshim_dred_state *s, const unsigned char *packet, int len, int frame_size) {
    if (!s || !packet || len <= 0) return 0;
    int dred_end = 0;
    int r = dred_fns.parse(s->dec, s->dred, packet, len, 48000, 48000, &dred_end, 0);
    return r >= frame_size;  /* r <= 0: no DRED in this packet, or an error */
}

int vcshim_dred_recover(void *state, OpusDecoder *dec, const unsigned char *packet, int len, int16_t *pcm, int frame_size) {
    vcshim_dred_state *s = state;
    if (!dred_covers(s, packet, len, frame_size)) return 0;
    return dred_fns.decode(dec, s->dred, frame_size, pcm, frame_size);
}

int vcshim_dred_recover_float(void *state, OpusDecoder *dec, const unsigned char *packet, int len, float *pcm, int frame_size) {
    vcshim_dred_state *s = state;
    if (!dred_covers(s, packet, len, frame_size)) return 0;
    return dred_fns.decode_float(dec, s->dred, frame_size, pcm, frame_size);
}
