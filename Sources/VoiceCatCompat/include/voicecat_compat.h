/* VoiceCatCompat has no interface of its own: its entry points are reached only through
 * the library's symbol versions (see compat.c). */
