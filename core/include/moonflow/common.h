/*
 * moonflow/common.h — shared macros and the allocator wrapper.
 *
 * Ownership: mf_xmalloc/mf_xcalloc/mf_xrealloc return memory the caller owns
 * and releases with mf_free. Every allocation the engine makes goes through
 * these functions, so mf_alloc_count() is the engine's whole malloc count: the
 * figure tests and benchmarks read to prove "no malloc per task".
 */
#ifndef MOONFLOW_COMMON_H
#define MOONFLOW_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* The library builds with -fvisibility=hidden; MF_API marks what it exports. */
#define MF_API __attribute__((visibility("default")))

#define mf_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

#define MF_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__)
#define MF_LIKELY(x) __builtin_expect(!!(x), 1)
#define MF_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define MF_LIKELY(x) (x)
#define MF_UNLIKELY(x) (x)
#endif

/* Every public header wraps its declarations in these, so C++ programs
 * that embed moonflow can include any of them. */
#ifdef __cplusplus
#define MF_EXTERN_C_BEGIN extern "C" {
#define MF_EXTERN_C_END }
#else
#define MF_EXTERN_C_BEGIN
#define MF_EXTERN_C_END
#endif

MF_EXTERN_C_BEGIN

/* Small, engine-sized allocations: abort on out-of-memory (there is no
 * sensible recovery for a 100-byte task). User-sized buffers must use
 * mf_try_malloc and fail the task instead. */
MF_API void *mf_xmalloc(size_t size);
MF_API void *mf_xcalloc(size_t n, size_t size);
MF_API void *mf_xrealloc(void *p, size_t size);
/* Checked variant: returns NULL on failure, never aborts. */
MF_API void *mf_try_malloc(size_t size);
MF_API void mf_free(void *p);

/* Test-only: makes the next n checked allocations fail, on any thread
 * (mf_try_malloc and the growth of the engine's byte buffers: request and
 * response buffers, connection output), so that tests can drive every
 * out-of-memory path; 0 disarms it. The aborting mf_x* allocators are not
 * affected. Never call it outside a test. */
MF_API void mf_alloc_fail_next(unsigned n);

/* Number of successful allocations made through the wrappers since start
 * (all threads). Reads are relaxed: exact once the threads are quiet. */
MF_API uint64_t mf_alloc_count(void);

/* Online CPUs (at least 1): the default number of workers and pool threads. */
MF_API unsigned mf_cpu_count(void);

MF_EXTERN_C_END

#endif /* MOONFLOW_COMMON_H */
