/* CFuzzerDriver: libFuzzer's entry point, resolved only when built with
 * -sanitize=fuzzer. Declared in C because Swift cannot declare an external C
 * function itself. */
#ifndef VOICECAT_CFUZZER_H
#define VOICECAT_CFUZZER_H
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*user_cb)(const uint8_t *data, size_t size));
#endif
