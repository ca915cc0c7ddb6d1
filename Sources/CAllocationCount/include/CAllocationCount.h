#ifndef C_ALLOCATION_COUNT_H
#define C_ALLOCATION_COUNT_H

/// Starts counting every heap allocation of the process (malloc, calloc, realloc,
/// posix_memalign, aligned_alloc, memalign), from zero.
void tc_allocations_start(void);

/// Stops counting; the allocations counted since the start.
long tc_allocations_stop(void);

#endif
