/* Test-only allocation counter: the test binary's own malloc family, which counts
 * calls and forwards to glibc. Used to prove the audio paths do not allocate per
 * frame. Disabled (counts stay 0, vc_alloc_counter_active() is 0) under
 * ThreadSanitizer, whose runtime owns malloc. */
#ifndef VOICECAT_ALLOC_COUNTER_H
#define VOICECAT_ALLOC_COUNTER_H
#include <stdint.h>
uint64_t vc_alloc_count(void);
/* The calling thread's own calls: for a test whose measured work runs on its thread
 * (another thread of the process, say the test runner's, may allocate meanwhile). */
uint64_t vc_alloc_count_thread(void);
int vc_alloc_counter_active(void);
#endif
