#define _GNU_SOURCE 1
#include "alloc_counter.h"
#include <errno.h>
#include <stddef.h>

#if defined(__has_feature)
#  if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#    define VC_NO_COUNTER 1
#  endif
#endif

#ifdef VC_NO_COUNTER
uint64_t vc_alloc_count(void) { return 0; }
uint64_t vc_alloc_count_thread(void) { return 0; }
int vc_alloc_counter_active(void) { return 0; }
#else
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static uint64_t allocations;
/* Static TLS of the executable the counter is linked into: reading it never allocates. */
static __thread uint64_t thread_allocations;

uint64_t vc_alloc_count(void) { return __atomic_load_n(&allocations, __ATOMIC_RELAXED); }
uint64_t vc_alloc_count_thread(void) { return thread_allocations; }
int vc_alloc_counter_active(void) { return 1; }

static void count(void) {
    __atomic_fetch_add(&allocations, 1, __ATOMIC_RELAXED);
    thread_allocations++;
}

void *malloc(size_t n) { count(); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { count(); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { count(); return __libc_realloc(p, n); }
void *aligned_alloc(size_t a, size_t n) { count(); return __libc_memalign(a, n); }
void *memalign(size_t a, size_t n) { count(); return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    count();
    void *p = __libc_memalign(a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
#endif
