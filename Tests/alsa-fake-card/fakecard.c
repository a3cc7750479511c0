/* An ALSA PCM that behaves like a sound card, for the device tests (there is no sound
 * card here or in CI, and ALSA's file plugin over `null` takes or gives any amount at
 * once, so it shows nothing of a card's clock).
 *
 * A card's clock: once started, the card moves `rate` x `speed` frames per second of
 * the monotonic clock (speed 1.01: a card whose crystal runs 1 % fast). A capture
 * card's frames are read from `file` (raw S16_LE, silence past its end); a playback
 * card's are appended to `file` as they are written. Reads and writes block until the
 * card has a period (the ioplug layer polls a timerfd that ticks every period). Like a
 * kernel driver, it detects its own xruns: playback that runs past what was written
 * (an underrun), capture that laps what was read (an overrun), each an EPIPE that
 * snd_pcm_recover undoes. At close it appends "<direction> xruns <n> starts <n>" to the
 * file `log`, when given.
 *
 * Options a real card may have: `steps 1`, its position moves in whole periods (a
 * driver without a fine position register: it holds less than it says by up to a
 * period; an underrun is then position >= written, as the kernel judges it);
 * `period_min N`, it offers no period shorter than N frames; `stall_after S`, its
 * clock stops S seconds after it started, with no error (a driver whose interrupts
 * stopped, a sound server's stream suspended); `jumps N` with `jump_after S`, its
 * position jumps 200 ms ahead S seconds after a start, up to N times in all (the
 * process was not scheduled for that long while the card ran on: an xrun each time,
 * as the buffer holds less).
 *
 * Built by the tests:  cc -shared -fPIC -DPIC -o libasound_module_pcm_vcfakecard.so
 *                      fakecard.c -lasound
 * Used as:  pcm_type.vcfakecard { lib "/path/libasound_module_pcm_vcfakecard.so" }
 *           pcm.card { type vcfakecard file "in.raw" rate 48000 channels 1 speed 1.01
 *                      log "xruns.log" }
 */
#include <alsa/asoundlib.h>
#include <alsa/pcm_external.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    snd_pcm_ioplug_t io;
    FILE *file;
    char *log;
    long rate, channels;
    double speed, stall_after;
    double jump_after, jump;  /* jump: seconds added to the clock since this start */
    long jumps;               /* jumps left */
    int steps;
    long period_min;
    double started;           /* monotonic seconds at start; 0: not running */
    int timer;
    int xruns, starts;
} card_t;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Frames the card has moved since it started. */
static double moved(card_t *k) {
    if (k->started <= 0) return 0;
    double t = now() - k->started;
    if (k->stall_after > 0 && t > k->stall_after) t = k->stall_after;
    if (k->jump == 0 && k->jumps > 0 && k->jump_after > 0 && t >= k->jump_after) {
        k->jump = 0.2;
        k->jumps--;
    }
    t += k->jump;
    double hw = t * k->io.rate * k->speed;
    return k->steps ? (double)(((snd_pcm_uframes_t)hw / k->io.period_size) * k->io.period_size) : hw;
}

static int card_start(snd_pcm_ioplug_t *io) {
    card_t *k = io->private_data;
    k->started = now();
    k->jump = 0;
    k->starts++;
    long ns = (long)(1e9 * io->period_size / io->rate / k->speed);
    struct itimerspec its = {{ns / 1000000000, ns % 1000000000}, {ns / 1000000000, ns % 1000000000}};
    timerfd_settime(k->timer, 0, &its, NULL);
    return 0;
}

static int card_stop(snd_pcm_ioplug_t *io) {
    card_t *k = io->private_data;
    struct itimerspec its = {{0, 0}, {0, 0}};
    timerfd_settime(k->timer, 0, &its, NULL);
    k->started = 0;
    return 0;
}

static int card_prepare(snd_pcm_ioplug_t *io) {
    ((card_t *)io->private_data)->started = 0;
    return 0;
}

static snd_pcm_sframes_t card_pointer(snd_pcm_ioplug_t *io) {
    card_t *k = io->private_data;
    if (k->started <= 0) return 0;
    double hw = moved(k);
    if (io->state == SND_PCM_STATE_RUNNING) {
        if (io->stream == SND_PCM_STREAM_PLAYBACK && (k->steps ? hw >= (double)io->appl_ptr : hw > (double)io->appl_ptr)) {
            k->xruns++;
            return -EPIPE;
        }
        if (io->stream == SND_PCM_STREAM_CAPTURE && hw - (double)io->appl_ptr > (double)io->buffer_size) { k->xruns++; return -EPIPE; }
    }
    return (snd_pcm_sframes_t)((snd_pcm_uframes_t)hw % io->buffer_size);
}

static snd_pcm_sframes_t card_transfer(snd_pcm_ioplug_t *io, const snd_pcm_channel_area_t *areas,
                                       snd_pcm_uframes_t offset, snd_pcm_uframes_t size) {
    card_t *k = io->private_data;
    char *buf = (char *)areas->addr + (areas->first + areas->step * offset) / 8;
    size_t frame = 2 * (size_t)io->channels;
    if (io->stream == SND_PCM_STREAM_CAPTURE) {
        size_t n = k->file ? fread(buf, frame, size, k->file) : 0;
        if (n < size) memset(buf + n * frame, 0, (size - n) * frame);
    } else if (k->file) {
        fwrite(buf, frame, size, k->file);
    }
    return (snd_pcm_sframes_t)size;
}

static int card_poll_revents(snd_pcm_ioplug_t *io, struct pollfd *pfd, unsigned int nfds, unsigned short *revents) {
    card_t *k = io->private_data;
    (void)pfd; (void)nfds;
    uint64_t ticks;
    while (read(k->timer, &ticks, sizeof ticks) == sizeof ticks) {}
    if (card_pointer(io) < 0) { *revents = POLLERR; return 0; }
    double hw = moved(k), avail;
    if (io->stream == SND_PCM_STREAM_CAPTURE) avail = hw - (double)io->appl_ptr;
    else avail = (double)io->buffer_size - ((double)io->appl_ptr - hw);
    *revents = avail >= 1 ? (io->stream == SND_PCM_STREAM_CAPTURE ? POLLIN : POLLOUT) : 0;
    return 0;
}

static int card_close(snd_pcm_ioplug_t *io) {
    card_t *k = io->private_data;
    if (k->log) {
        FILE *l = fopen(k->log, "a");
        if (l) {
            fprintf(l, "%s xruns %d starts %d\n", io->stream == SND_PCM_STREAM_CAPTURE ? "capture" : "playback", k->xruns, k->starts);
            fclose(l);
        }
    }
    if (k->file) fclose(k->file);
    close(k->timer);
    free(k->log);
    free(k);
    return 0;
}

static const snd_pcm_ioplug_callback_t callbacks = {
    .start = card_start, .stop = card_stop, .prepare = card_prepare, .pointer = card_pointer,
    .transfer = card_transfer, .poll_revents = card_poll_revents, .close = card_close,
};

SND_PCM_PLUGIN_DEFINE_FUNC(vcfakecard) {
    (void)root;
    card_t *k = calloc(1, sizeof *k);
    if (!k) return -ENOMEM;
    k->rate = 48000; k->channels = 1; k->speed = 1.0;
    const char *path = NULL;
    snd_config_iterator_t i, next;
    snd_config_for_each(i, next, conf) {
        snd_config_t *n = snd_config_iterator_entry(i);
        const char *id, *s;
        char *text;
        if (snd_config_get_id(n, &id) < 0) continue;
        if (!strcmp(id, "comment") || !strcmp(id, "type") || !strcmp(id, "hint")) continue;
        if (!strcmp(id, "file") && snd_config_get_string(n, &s) >= 0) { path = s; continue; }
        if (!strcmp(id, "log") && snd_config_get_string(n, &s) >= 0) { k->log = strdup(s); continue; }
        if (!strcmp(id, "rate") && snd_config_get_integer(n, &k->rate) >= 0) continue;
        if (!strcmp(id, "channels") && snd_config_get_integer(n, &k->channels) >= 0) continue;
        if (!strcmp(id, "speed") && snd_config_get_ascii(n, &text) >= 0) { k->speed = atof(text); free(text); if (k->speed > 0) continue; }
        if (!strcmp(id, "stall_after") && snd_config_get_ascii(n, &text) >= 0) { k->stall_after = atof(text); free(text); continue; }
        if (!strcmp(id, "jump_after") && snd_config_get_ascii(n, &text) >= 0) { k->jump_after = atof(text); free(text); continue; }
        if (!strcmp(id, "jumps") && snd_config_get_integer(n, &k->jumps) >= 0) continue;
        long v;
        if (!strcmp(id, "steps") && snd_config_get_integer(n, &v) >= 0) { k->steps = v != 0; continue; }
        if (!strcmp(id, "period_min") && snd_config_get_integer(n, &k->period_min) >= 0) continue;
        SNDERR("vcfakecard: bad field %s", id);
        free(k->log); free(k);
        return -EINVAL;
    }
    if (path && !(k->file = fopen(path, stream == SND_PCM_STREAM_CAPTURE ? "rb" : "wb"))) {
        SNDERR("vcfakecard: cannot open %s", path);
        free(k->log); free(k);
        return -ENOENT;
    }
    k->timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    k->io.version = SND_PCM_IOPLUG_VERSION;
    k->io.name = "VoiceCat test sound card";
    k->io.callback = &callbacks;
    k->io.private_data = k;
    k->io.poll_fd = k->timer;
    k->io.poll_events = POLLIN;
    int err = snd_pcm_ioplug_create(&k->io, name, stream, mode);
    if (err < 0) {
        if (k->file) fclose(k->file);
        close(k->timer); free(k->log); free(k);
        return err;
    }
    static const unsigned int access[] = {SND_PCM_ACCESS_RW_INTERLEAVED};
    static const unsigned int format[] = {SND_PCM_FORMAT_S16_LE};
    snd_pcm_ioplug_set_param_list(&k->io, SND_PCM_IOPLUG_HW_ACCESS, 1, access);
    snd_pcm_ioplug_set_param_list(&k->io, SND_PCM_IOPLUG_HW_FORMAT, 1, format);
    snd_pcm_ioplug_set_param_minmax(&k->io, SND_PCM_IOPLUG_HW_CHANNELS, (unsigned)k->channels, (unsigned)k->channels);
    snd_pcm_ioplug_set_param_minmax(&k->io, SND_PCM_IOPLUG_HW_RATE, (unsigned)k->rate, (unsigned)k->rate);
    unsigned frame = 2 * (unsigned)k->channels;
    snd_pcm_ioplug_set_param_minmax(&k->io, SND_PCM_IOPLUG_HW_PERIOD_BYTES, k->period_min > 0 ? (unsigned)k->period_min * frame : 64, 1 << 20);
    snd_pcm_ioplug_set_param_minmax(&k->io, SND_PCM_IOPLUG_HW_PERIODS, 2, 64);
    *pcmp = k->io.pcm;
    return 0;
}
SND_PCM_PLUGIN_SYMBOL(vcfakecard);
