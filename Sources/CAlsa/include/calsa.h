/* CAlsa: ALSA's header for Swift, plus the one wrapper Swift needs. */
#ifndef VOICECAT_CALSA_H
#define VOICECAT_CALSA_H

#include <alsa/asoundlib.h>

/* Installs a silent snd_lib_error handler (the handler type is variadic, which Swift
 * cannot implement); the library reports ALSA errors itself with snd_strerror. */
void vcshim_alsa_silence_errors(void);

#endif
