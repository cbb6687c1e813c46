/*
 * alloc.h — the allocator's failure injection, seen by the checked
 * allocation paths of the engine (mf_try_malloc in alloc.c, buffer growth
 * in buf.c). Internal.
 *
 * A test arms it with mf_alloc_fail_next(n) (common.h): the next n checked
 * allocations, on any thread, report failure. The check is one relaxed
 * atomic load while nothing is armed, so the growth of a buffer costs no
 * more than before in production.
 */
#ifndef MF_ALLOC_H
#define MF_ALLOC_H

#include <stdatomic.h>
#include <stdbool.h>

#include "moonflow/common.h"

extern atomic_uint mf__alloc_failures_armed;

/* Takes one armed failure; the slow path only runs in tests. */
bool mf__alloc_take_failure(void);

/* Whether this checked allocation must fail (a failure was injected). */
static inline bool mf__alloc_should_fail(void)
{
    if (MF_LIKELY(atomic_load_explicit(&mf__alloc_failures_armed,
                                       memory_order_relaxed) == 0))
        return false;
    return mf__alloc_take_failure();
}

#endif /* MF_ALLOC_H */
