/*
 * alloc.c — the allocator wrappers, the engine-wide allocation counter, the
 * failure injection of the checked paths (for tests), and the CPU count
 * that sizes worker and pool defaults.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "alloc.h"

static atomic_uint_fast64_t mf__allocs;
atomic_uint mf__alloc_failures_armed;

static void mf__out_of_memory(size_t size)
{
    fprintf(stderr, "moonflow: out of memory allocating %zu bytes\n", size);
    abort();
}

static void *mf__counted(void *p)
{
    if (p)
        atomic_fetch_add_explicit(&mf__allocs, 1, memory_order_relaxed);
    return p;
}

void mf_alloc_fail_next(unsigned n)
{
    atomic_store_explicit(&mf__alloc_failures_armed, n, memory_order_relaxed);
}

bool mf__alloc_take_failure(void)
{
    unsigned n =
        atomic_load_explicit(&mf__alloc_failures_armed, memory_order_relaxed);
    while (n)
        if (atomic_compare_exchange_weak_explicit(&mf__alloc_failures_armed, &n,
                                                  n - 1, memory_order_relaxed,
                                                  memory_order_relaxed))
            return true;
    return false;
}

void *mf_try_malloc(size_t size)
{
    if (MF_UNLIKELY(mf__alloc_should_fail()))
        return NULL;
    return mf__counted(malloc(size ? size : 1));
}

void *mf_xmalloc(size_t size)
{
    void *p = mf_try_malloc(size);
    if (MF_UNLIKELY(!p))
        mf__out_of_memory(size);
    return p;
}

void *mf_xcalloc(size_t n, size_t size)
{
    void *p = mf__counted(calloc(n ? n : 1, size ? size : 1));
    if (MF_UNLIKELY(!p))
        mf__out_of_memory(n * size);
    return p;
}

void *mf_xrealloc(void *old, size_t size)
{
    void *p = mf__counted(realloc(old, size ? size : 1));
    if (MF_UNLIKELY(!p))
        mf__out_of_memory(size);
    return p;
}

void mf_free(void *p)
{
    free(p);
}

uint64_t mf_alloc_count(void)
{
    return atomic_load_explicit(&mf__allocs, memory_order_relaxed);
}

unsigned mf_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}
