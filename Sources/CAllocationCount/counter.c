// Counts a process's heap allocations by defining the allocator's entry points in the
// executable that links this target (HitAllocations only): the dynamic linker binds every
// library's calls (the Swift runtime's, Foundation's) to these first, and each forwards to
// glibc's own implementation through its exported __libc_* names. Only the count is added.
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>

#include "CAllocationCount.h"

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);

static atomic_long allocations;
static atomic_int counting;

static inline void count(void) {
    if (atomic_load_explicit(&counting, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
    }
}

void *malloc(size_t size) {
    count();
    return __libc_malloc(size);
}

void *calloc(size_t count_, size_t size) {
    count();
    return __libc_calloc(count_, size);
}

void *realloc(void *pointer, size_t size) {
    count();
    return __libc_realloc(pointer, size);
}

int posix_memalign(void **out, size_t alignment, size_t size) {
    // As glibc: a power of two, a multiple of a pointer's size.
    if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
    count();
    void *pointer = __libc_memalign(alignment, size);
    if (pointer == NULL) return ENOMEM;
    *out = pointer;
    return 0;
}

void *aligned_alloc(size_t alignment, size_t size) {
    count();
    return __libc_memalign(alignment, size);
}

void *memalign(size_t alignment, size_t size) {
    count();
    return __libc_memalign(alignment, size);
}

void tc_allocations_start(void) {
    atomic_store(&allocations, 0);
    atomic_store(&counting, 1);
}

long tc_allocations_stop(void) {
    atomic_store(&counting, 0);
    return atomic_load(&allocations);
}
