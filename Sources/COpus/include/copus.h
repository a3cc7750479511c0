/*
 * COpus: libopus's header for Swift, plus one pass-through per variadic
 * opus_*_ctl request Swift cannot call, and the DRED API of libopus >= 1.5 found
 * at run time. Every wrapper is prefixed `vcshim_` and says in one line why.
 */
#ifndef VOICECAT_COPUS_H
#define VOICECAT_COPUS_H

#include <stdint.h>
#include <opus/opus.h>

/* OPUS_SET_BITRATE(bps) */
int vcshim_opus_set_bitrate(OpusEncoder *enc, int32_t bps);
/* OPUS_SET_COMPLEXITY(0..10) */
int vcshim_opus_set_complexity(OpusEncoder *enc, int32_t complexity);
/* OPUS_SET_INBAND_FEC(0/1) */
int vcshim_opus_set_inband_fec(OpusEncoder *enc, int32_t on);
/* OPUS_SET_PACKET_LOSS_PERC(0..100) */
int vcshim_opus_set_packet_loss_perc(OpusEncoder *enc, int32_t perc);
/* OPUS_SET_DTX(0/1) */
int vcshim_opus_set_dtx(OpusEncoder *enc, int32_t on);
/* OPUS_SET_MAX_BANDWIDTH(OPUS_BANDWIDTH_*) */
int vcshim_opus_set_max_bandwidth(OpusEncoder *enc, int32_t bw);
/* OPUS_SET_SIGNAL(OPUS_SIGNAL_*) */
int vcshim_opus_set_signal(OpusEncoder *enc, int32_t signal);
/* OPUS_GET_LOOKAHEAD(&x) */
int vcshim_opus_get_lookahead(OpusEncoder *enc, int32_t *out);
/* OPUS_GET_IN_DTX(&x): 1 when the last encoded frame was DTX silence */
int vcshim_opus_get_in_dtx(OpusEncoder *enc, int32_t *out);
/* OPUS_SET_DRED_DURATION(x): request 1.5 only; returns OPUS_UNIMPLEMENTED on older libopus */
int vcshim_opus_set_dred_duration(OpusEncoder *enc, int32_t frames10ms);
/* OPUS_GET_LAST_PACKET_DURATION(&x) on a decoder */
int vcshim_opus_decoder_get_last_packet_duration(OpusDecoder *dec, int32_t *out);
/* OPUS_RESET_STATE on a decoder */
int vcshim_opus_decoder_reset(OpusDecoder *dec);
/* 1 when the packet's first frame carries LBRR (in-band FEC for the previous frame),
 * 0 when not, a negative Opus error for a malformed packet. In C because
 * opus_packet_parse wants arrays of 48 frame pointers, kept here on the stack. */
int vcshim_opus_packet_has_lbrr(const unsigned char *packet, int32_t len);

/* 1 when the loaded libopus exports the DRED decoder API (looked up with dlsym). */
int vcshim_dred_available(void);
/* A DRED parser state; NULL when DRED is unavailable. */
void *vcshim_dred_create(void);
void vcshim_dred_destroy(void *state);
/* Rebuilds the `frame_size` samples just before `packet` from the packet's DRED data
 * into pcm (interleaved, the decoder's channels). Returns the samples written, 0
 * when the packet carries no usable DRED, or a negative Opus error. */
int vcshim_dred_recover(void *state, OpusDecoder *dec, const unsigned char *packet, int len, int16_t *pcm, int frame_size);
/* The same into float PCM (full scale ±1.0). */
int vcshim_dred_recover_float(void *state, OpusDecoder *dec, const unsigned char *packet, int len, float *pcm, int frame_size);

#endif
