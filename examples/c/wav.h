/* Minimal 16-bit PCM WAV reading and writing for the examples. */
#ifndef VC_EXAMPLE_WAV_H
#define VC_EXAMPLE_WAV_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { uint32_t rate; uint16_t channels; uint32_t frames; int16_t *pcm; } wav_data;

static inline uint32_t wav_le32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static inline uint16_t wav_le16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Reads a 16-bit PCM WAV file. Returns 0, or -1 with a message on stderr. */
static inline int wav_read(const char *path, wav_data *out) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return -1; }
    unsigned char h[12];
    if (fread(h, 1, 12, f) != 12 || memcmp(h, "RIFF", 4) || memcmp(h + 8, "WAVE", 4)) {
        fprintf(stderr, "%s: not a RIFF/WAVE file\n", path); fclose(f); return -1;
    }
    memset(out, 0, sizeof *out);
    int have_fmt = 0;
    for (;;) {
        unsigned char ch[8];
        if (fread(ch, 1, 8, f) != 8) break;
        uint32_t size = wav_le32(ch + 4);
        if (!memcmp(ch, "fmt ", 4)) {
            unsigned char fmt[40];
            if (size < 16 || size > sizeof fmt || fread(fmt, 1, size, f) != size) break;
            if (wav_le16(fmt) != 1 || wav_le16(fmt + 14) != 16) {
                fprintf(stderr, "%s: only 16-bit PCM is supported\n", path); fclose(f); return -1;
            }
            out->channels = wav_le16(fmt + 2);
            out->rate = wav_le32(fmt + 4);
            have_fmt = 1;
        } else if (!memcmp(ch, "data", 4) && have_fmt) {
            out->pcm = malloc(size ? size : 1);
            if (!out->pcm) { fclose(f); return -1; }
            out->frames = (uint32_t)(fread(out->pcm, 1, size, f) / (2u * out->channels));
            fclose(f);
            return 0;
        } else {
            fseek(f, (long)(size + (size & 1)), SEEK_CUR);
        }
    }
    fprintf(stderr, "%s: no fmt/data chunk\n", path);
    fclose(f);
    return -1;
}

static inline void wav_put32(FILE *f, uint32_t v) { unsigned char b[4] = {v, v >> 8, v >> 16, v >> 24}; fwrite(b, 1, 4, f); }
static inline void wav_put16(FILE *f, uint16_t v) { unsigned char b[2] = {v, v >> 8}; fwrite(b, 1, 2, f); }

/* Writes 16-bit PCM. Returns 0, or -1 with a message on stderr. */
static inline int wav_write(const char *path, const int16_t *pcm, uint32_t frames, uint16_t channels, uint32_t rate) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return -1; }
    uint32_t bytes = frames * channels * 2u;
    fwrite("RIFF", 1, 4, f); wav_put32(f, 36 + bytes); fwrite("WAVEfmt ", 1, 8, f);
    wav_put32(f, 16); wav_put16(f, 1); wav_put16(f, channels); wav_put32(f, rate);
    wav_put32(f, rate * channels * 2u); wav_put16(f, (uint16_t)(channels * 2)); wav_put16(f, 16);
    fwrite("data", 1, 4, f); wav_put32(f, bytes);
    fwrite(pcm, 2, (size_t)frames * channels, f);
    return fclose(f) == 0 ? 0 : -1;
}
#endif
