/* CAlsa: the one ALSA construct Swift cannot express (a variadic error handler). */
#include "calsa.h"

static void vcshim_alsa_quiet(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}
void vcshim_alsa_silence_errors(void) { snd_lib_error_set_handler(vcshim_alsa_quiet); }

