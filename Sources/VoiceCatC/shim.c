#define _GNU_SOURCE 1
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>
#include "voicecat_c.h"

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

int vcshim_accept4(int fd, struct sockaddr *addr, unsigned int *len, int flags) {
    return accept4(fd, addr, (socklen_t *)len, flags);
}
int vcshim_pipe2(int fds[2], int flags) { return pipe2(fds, flags); }
void vcshim_set_thread_name(const char *name) {
    char buf[16];
    strncpy(buf, name, 15);
    buf[15] = 0;
    pthread_setname_np(pthread_self(), buf);
}

static void vcshim_alsa_quiet(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}
void vcshim_alsa_silence_errors(void) { snd_lib_error_set_handler(vcshim_alsa_quiet); }
