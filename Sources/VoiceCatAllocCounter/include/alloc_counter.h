/* Test-only allocation counter: the test binary's own malloc family, which counts
 * calls and forwards to glibc. Used to prove the audio paths do not allocate per
 * frame. Disabled (counts stay 0, vc_alloc_counter_active() is 0) under
 * ThreadSanitizer, whose runtime owns malloc. */
#ifndef VOICECAT_ALLOC_COUNTER_H
#define VOICECAT_ALLOC_COUNTER_H
#include <stdint.h>
uint64_t vc_alloc_count(void);
int vc_alloc_counter_active(void);
#endif
