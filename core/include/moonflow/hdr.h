/*
 * moonflow/hdr.h — a log-linear histogram of non-negative integers (the
 * load generator records latencies in nanoseconds), in the manner of
 * HdrHistogram: every power of two is cut into MF_HDR_SUB_BUCKETS / 2 (128)
 * equal slices, so any value read back (a percentile, a bucket) is within
 * 2 / MF_HDR_SUB_BUCKETS (0.78%) of a recorded one; values below
 * MF_HDR_SUB_BUCKETS are exact (HdrHistogram's two significant digits).
 * Recording is a shift, a count of leading zeros and an increment: no
 * allocation, no lock.
 *
 * Histograms of the same shape merge exactly (counts add), so each thread
 * records into its own and the report merges them. min, max, the count and
 * the sum are kept exactly beside the buckets; mean and stdev come from the
 * exact sum and from the buckets.
 *
 * Ownership: mf_hdr_create returns a histogram the caller owns (one block,
 * about 38 KiB) and frees with mf_hdr_destroy. Threads: one writer; readers
 * on other threads need the writer stopped (or their own copy, merged).
 */
#ifndef MOONFLOW_HDR_H
#define MOONFLOW_HDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

MF_EXTERN_C_BEGIN

#define MF_HDR_SUB_BUCKETS 256
/* The largest value recorded as itself: 2^44 - 1 (in nanoseconds, about 4.9
 * hours). Larger values are recorded as MF_HDR_MAX (in the buckets, min,
 * max and sum) and counted in mf_hdr_clamped. */
#define MF_HDR_MAX ((UINT64_C(1) << 44) - 1)

typedef struct mf_hdr mf_hdr_t;

MF_API mf_hdr_t *mf_hdr_create(void);
MF_API void mf_hdr_destroy(mf_hdr_t *h);
MF_API void mf_hdr_reset(mf_hdr_t *h);

MF_API void mf_hdr_record(mf_hdr_t *h, uint64_t value);
MF_API void mf_hdr_record_n(mf_hdr_t *h, uint64_t value, uint64_t count);
/* dst += src (counts, min, max, sum, clamped). */
MF_API void mf_hdr_merge(mf_hdr_t *dst, const mf_hdr_t *src);

MF_API uint64_t mf_hdr_count(const mf_hdr_t *h);
MF_API uint64_t mf_hdr_clamped(const mf_hdr_t *h);
/* Exact; 0 when empty. */
MF_API uint64_t mf_hdr_min(const mf_hdr_t *h);
MF_API uint64_t mf_hdr_max(const mf_hdr_t *h);
MF_API double mf_hdr_mean(const mf_hdr_t *h);
/* Population standard deviation (as wrk prints it); 0 when empty. */
MF_API double mf_hdr_stdev(const mf_hdr_t *h);
/* The value at percentile p (0..100): the smallest recorded bucket whose
 * cumulative count reaches p% of the count, reported as that bucket's
 * highest equivalent value, clamped to max (p 100 gives max, p 0 min).
 * 0 when empty. */
MF_API uint64_t mf_hdr_percentile(const mf_hdr_t *h, double p);
/* The share (0..100) of recorded values within mean ± n * stdev: wrk's
 * "+/- Stdev" column (n 1). */
MF_API double mf_hdr_within_stdev(const mf_hdr_t *h, double n);

/* The non-empty buckets in increasing order:
 *     mf_hdr_iter_t it = MF_HDR_ITER_INIT;
 *     while (mf_hdr_next(h, &it)) use(it.value, it.count);
 * value: the bucket's highest equivalent value (max for the last one). */
typedef struct mf_hdr_iter {
    size_t _index;
    uint64_t value;
    uint64_t count;
} mf_hdr_iter_t;
#define MF_HDR_ITER_INIT \
    {                    \
        0, 0, 0          \
    }
MF_API bool mf_hdr_next(const mf_hdr_t *h, mf_hdr_iter_t *it);

MF_EXTERN_C_END

#endif /* MOONFLOW_HDR_H */
