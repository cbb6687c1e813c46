/*
 * test_hdr.c — the latency histogram (core/load/hdr.c) against exact
 * computations over the same values: slot error, percentiles of sorted
 * arrays, merge, mean and stdev, no allocation while recording.
 */
#include <math.h>
#include <moonflow/hdr.h>

#include "test.h"

#define ONE_HOUR_NS UINT64_C(3600000000000)
#define NVALUES 100000

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng_next(void)
{
    uint64_t x = rng_state; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1du;
}

static double rng_unit(void) /* (0, 1) */
{
    return ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;
}

/* Spread evenly over the magnitudes 1 ns .. 1 h. */
static uint64_t log_uniform(void)
{
    return (uint64_t)exp(rng_unit() * log((double)ONE_HOUR_NS));
}

/* The value a histogram holding only v (and a larger value) reads back for
 * it: its slot's highest equivalent value. */
static uint64_t read_back(mf_hdr_t *h, uint64_t v)
{
    mf_hdr_reset(h);
    mf_hdr_record(h, v);
    mf_hdr_record(h, MF_HDR_MAX);
    mf_hdr_iter_t it = MF_HDR_ITER_INIT;
    ASSERT(mf_hdr_next(h, &it));
    return it.value;
}

static void check_slot_error(mf_hdr_t *h, uint64_t v)
{
    uint64_t back = read_back(h, v);
    if (v < MF_HDR_SUB_BUCKETS || v == MF_HDR_MAX) {
        if (back != v)
            MF_TEST_FAIL("%" PRIu64 " read back as %" PRIu64, v, back);
        return;
    }
    if (back < v || (double)(back - v) > (double)v / 128.0)
        MF_TEST_FAIL("%" PRIu64 " read back as %" PRIu64, v, back);
}

TEST(values_read_back_within_one_128th)
{
    mf_hdr_t *h = mf_hdr_create();
    uint64_t edges[] = {0,
                        1,
                        127,
                        128,
                        255,
                        256,
                        257,
                        1000,
                        1000000,
                        ONE_HOUR_NS,
                        MF_HDR_MAX - 1,
                        MF_HDR_MAX};
    for (size_t i = 0; i < MF_ARRAY_SIZE(edges); i++)
        check_slot_error(h, edges[i]);
    for (unsigned k = 1; k < 44; k++) {
        uint64_t p = UINT64_C(1) << k;
        check_slot_error(h, p - 1);
        check_slot_error(h, p);
        check_slot_error(h, p + 1);
    }
    for (int i = 0; i < NVALUES; i++)
        check_slot_error(h, log_uniform());
    mf_hdr_destroy(h);
}

TEST(values_above_max_are_clamped_and_counted)
{
    mf_hdr_t *h = mf_hdr_create();
    mf_hdr_record(h, 5);
    mf_hdr_record(h, MF_HDR_MAX + 1);
    mf_hdr_record_n(h, UINT64_MAX, 3);
    ASSERT_EQ(mf_hdr_count(h), 5);
    ASSERT_EQ(mf_hdr_clamped(h), 4);
    ASSERT(mf_hdr_max(h) == MF_HDR_MAX);
    ASSERT(mf_hdr_percentile(h, 99) == MF_HDR_MAX);
    ASSERT_EQ(mf_hdr_min(h), 5);
    mf_hdr_destroy(h);
}

TEST(empty_histogram_reads_zero)
{
    mf_hdr_t *h = mf_hdr_create();
    ASSERT_EQ(mf_hdr_count(h), 0);
    ASSERT_EQ(mf_hdr_min(h), 0);
    ASSERT_EQ(mf_hdr_max(h), 0);
    ASSERT(mf_hdr_mean(h) == 0 && mf_hdr_stdev(h) == 0);
    ASSERT_EQ(mf_hdr_percentile(h, 50), 0);
    ASSERT(mf_hdr_within_stdev(h, 1) == 0);
    mf_hdr_iter_t it = MF_HDR_ITER_INIT;
    ASSERT(!mf_hdr_next(h, &it));
    mf_hdr_record(h, 7);
    mf_hdr_reset(h);
    ASSERT_EQ(mf_hdr_count(h), 0);
    ASSERT_EQ(mf_hdr_min(h), 0);
    ASSERT(!mf_hdr_next(h, &it));
    mf_hdr_destroy(h);
}

TEST(percentiles_of_small_exact_values)
{
    mf_hdr_t *h = mf_hdr_create();
    for (uint64_t v = 1; v <= 100; v++)
        mf_hdr_record(h, v);
    ASSERT_EQ(mf_hdr_percentile(h, 0), 1);
    ASSERT_EQ(mf_hdr_percentile(h, 1), 1);
    ASSERT_EQ(mf_hdr_percentile(h, 50), 50);
    ASSERT_EQ(mf_hdr_percentile(h, 50.5), 51);
    ASSERT_EQ(mf_hdr_percentile(h, 99), 99);
    ASSERT_EQ(mf_hdr_percentile(h, 99.9), 100);
    ASSERT_EQ(mf_hdr_percentile(h, 100), 100);
    mf_hdr_reset(h);
    for (uint64_t v = 1; v <= 1000; v++)
        mf_hdr_record(h, v);
    /* 99.9% of 1000 is rank 999, not 1000 (no rounding up of 999.0000x) */
    ASSERT(mf_hdr_percentile(h, 99.9) < 1000);
    ASSERT(mf_hdr_percentile(h, 99.9) >= 999);
    /* the answer never leaves [min, max] though the slot reaches further */
    mf_hdr_reset(h);
    mf_hdr_record_n(h, 1000001, 10);
    ASSERT_EQ(mf_hdr_percentile(h, 50), 1000001);
    mf_hdr_destroy(h);
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

enum {
    DIST_UNIFORM,
    DIST_EXPONENTIAL,
    DIST_LOGNORMAL,
    DIST_BIMODAL,
    DIST_LOG_UNIFORM,
    DIST_COUNT
};

static uint64_t draw(int dist)
{
    switch (dist) {
    case DIST_UNIFORM: /* 0 .. 20 ms */
        return rng_next() % 20000000;
    case DIST_EXPONENTIAL: /* mean 2 ms */
        return (uint64_t)(-log(rng_unit()) * 2e6);
    case DIST_LOGNORMAL: { /* median 1 ms, long tail */
        double z = sqrt(-2 * log(rng_unit())) * cos(6.283185307 * rng_unit());
        return (uint64_t)(1e6 * exp(z));
    }
    case DIST_BIMODAL: /* 95% near 300 us, 5% near 1 s */
        return rng_next() % 100 < 95 ? 290000 + rng_next() % 20000
                                     : 900000000 + rng_next() % 200000000;
    default:
        return log_uniform();
    }
}

static uint64_t exact_percentile(const uint64_t *sorted, size_t n, double p)
{
    if (p <= 0)
        return sorted[0];
    size_t rank = (size_t)ceil(p / 100.0 * (double)n - 1e-9);
    return sorted[(rank < 1 ? 1 : rank) - 1];
}

static void fill(mf_hdr_t *h, uint64_t *values, int dist)
{
    for (size_t i = 0; i < NVALUES; i++) {
        values[i] = draw(dist);
        mf_hdr_record(h, values[i]);
    }
    qsort(values, NVALUES, sizeof *values, compare_u64);
}

TEST(percentiles_match_sorted_values_within_one_percent)
{
    static uint64_t values[NVALUES];
    static const double ps[] = {0,  0.1, 1,    10,    25,     50, 75,
                                90, 99,  99.9, 99.99, 99.999, 100};
    mf_hdr_t *h = mf_hdr_create();
    for (int dist = 0; dist < DIST_COUNT; dist++) {
        mf_hdr_reset(h);
        fill(h, values, dist);
        for (size_t i = 0; i < MF_ARRAY_SIZE(ps); i++) {
            uint64_t want = exact_percentile(values, NVALUES, ps[i]);
            uint64_t got = mf_hdr_percentile(h, ps[i]);
            if (got < want || (double)(got - want) > want * 0.01)
                MF_TEST_FAIL("distribution %d p%g: %" PRIu64 " for %" PRIu64,
                             dist, ps[i], got, want);
        }
        ASSERT(mf_hdr_min(h) == values[0]);
        ASSERT(mf_hdr_max(h) == values[NVALUES - 1]);
    }
    mf_hdr_destroy(h);
}

TEST(mean_and_stdev_match_exact_computations)
{
    static uint64_t values[NVALUES];
    mf_hdr_t *h = mf_hdr_create();
    for (int dist = 0; dist < DIST_COUNT; dist++) {
        mf_hdr_reset(h);
        fill(h, values, dist);
        long double sum = 0, squares = 0;
        for (size_t i = 0; i < NVALUES; i++)
            sum += values[i];
        long double mean = sum / NVALUES;
        for (size_t i = 0; i < NVALUES; i++)
            squares += (values[i] - mean) * (values[i] - mean);
        double stdev = sqrt((double)(squares / NVALUES));
        if (fabs(mf_hdr_mean(h) - (double)mean) > (double)mean * 1e-12)
            MF_TEST_FAIL("distribution %d mean %f for %f", dist, mf_hdr_mean(h),
                         (double)mean);
        if (fabs(mf_hdr_stdev(h) - stdev) > stdev * 0.01)
            MF_TEST_FAIL("distribution %d stdev %f for %f", dist,
                         mf_hdr_stdev(h), stdev);
    }
    mf_hdr_destroy(h);
}

TEST(stdev_and_within_stdev_of_exact_values)
{
    mf_hdr_t *h = mf_hdr_create();
    mf_hdr_record_n(h, 100, 50);
    mf_hdr_record_n(h, 200, 50);
    ASSERT(mf_hdr_mean(h) == 150);
    ASSERT(mf_hdr_stdev(h) == 50);
    ASSERT(mf_hdr_within_stdev(h, 1) == 100);
    mf_hdr_reset(h);
    for (uint64_t v = 0; v < 256; v++)
        mf_hdr_record(h, v);
    /* mean 127.5, stdev sqrt((256^2 - 1) / 12) = 73.9: 54 .. 201 within */
    ASSERT(fabs(mf_hdr_stdev(h) - sqrt((256.0 * 256 - 1) / 12)) < 1e-9);
    ASSERT(fabs(mf_hdr_within_stdev(h, 1) - 100.0 * 148 / 256) < 1e-9);
    mf_hdr_reset(h);
    mf_hdr_record_n(h, 123456789, 7); /* one value: no spread */
    ASSERT(mf_hdr_stdev(h) == 0);
    ASSERT(mf_hdr_within_stdev(h, 1) == 100);
    mf_hdr_destroy(h);
}

TEST(sum_does_not_overflow_over_hours)
{
    mf_hdr_t *h = mf_hdr_create();
    /* 2^44 ns * 2^30 records is 2^74 ns in the sum */
    mf_hdr_record_n(h, MF_HDR_MAX, UINT64_C(1) << 30);
    for (int i = 0; i < 1000; i++)
        mf_hdr_record(h, MF_HDR_MAX);
    ASSERT(mf_hdr_mean(h) == (double)MF_HDR_MAX);
    mf_hdr_record_n(h, 0, (UINT64_C(1) << 30) + 1000);
    ASSERT(mf_hdr_mean(h) == (double)MF_HDR_MAX / 2);
    mf_hdr_destroy(h);
}

static void assert_same(const mf_hdr_t *a, const mf_hdr_t *b)
{
    mf_hdr_iter_t ia = MF_HDR_ITER_INIT, ib = MF_HDR_ITER_INIT;
    size_t n = 0;
    for (;;) {
        bool more = mf_hdr_next(a, &ia);
        ASSERT(more == mf_hdr_next(b, &ib));
        if (!more)
            break;
        ASSERT(ia.value == ib.value);
        ASSERT(ia.count == ib.count);
        n++;
    }
    ASSERT(n > 100);
    ASSERT(mf_hdr_count(a) == mf_hdr_count(b));
    ASSERT(mf_hdr_min(a) == mf_hdr_min(b));
    ASSERT(mf_hdr_max(a) == mf_hdr_max(b));
    ASSERT(mf_hdr_mean(a) == mf_hdr_mean(b));
    ASSERT(mf_hdr_stdev(a) == mf_hdr_stdev(b));
    ASSERT(mf_hdr_percentile(a, 99.9) == mf_hdr_percentile(b, 99.9));
}

TEST(merged_thread_histograms_equal_one_histogram)
{
    mf_hdr_t *all = mf_hdr_create(), *merged = mf_hdr_create();
    mf_hdr_t *threads[4];
    for (int t = 0; t < 4; t++)
        threads[t] = mf_hdr_create();
    for (int i = 0; i < NVALUES; i++) {
        uint64_t v = draw(i % DIST_COUNT);
        mf_hdr_record(all, v);
        mf_hdr_record(threads[i % 4], v);
    }
    mf_hdr_record(all, MF_HDR_MAX + 5);
    mf_hdr_record(threads[2], MF_HDR_MAX + 5);
    for (int t = 0; t < 4; t++) {
        mf_hdr_merge(merged, threads[t]);
        mf_hdr_destroy(threads[t]);
    }
    assert_same(merged, all);
    ASSERT_EQ(mf_hdr_clamped(merged), 1);
    mf_hdr_destroy(all);
    mf_hdr_destroy(merged);
}

TEST(iteration_visits_non_empty_buckets_in_order)
{
    mf_hdr_t *h = mf_hdr_create();
    mf_hdr_record_n(h, 3, 2);
    mf_hdr_record(h, 1000);
    mf_hdr_record(h, 1001);
    mf_hdr_record(h, 5000000);
    mf_hdr_iter_t it = MF_HDR_ITER_INIT;
    ASSERT(mf_hdr_next(h, &it));
    ASSERT(it.value == 3 && it.count == 2);
    ASSERT(mf_hdr_next(h, &it)); /* 1000 and 1001 share a slot of 4 */
    ASSERT(it.value == 1003 && it.count == 2);
    ASSERT(mf_hdr_next(h, &it)); /* the last one reads max */
    ASSERT(it.value == 5000000 && it.count == 1);
    ASSERT(!mf_hdr_next(h, &it));
    mf_hdr_destroy(h);
}

TEST(recording_does_not_allocate)
{
    mf_hdr_t *h = mf_hdr_create(), *other = mf_hdr_create();
    uint64_t before = mf_alloc_count();
    for (int i = 0; i < 1000000; i++)
        mf_hdr_record(h, log_uniform());
    mf_hdr_record_n(h, 12345, 10);
    mf_hdr_merge(other, h);
    ASSERT(mf_hdr_percentile(other, 99) > 0);
    ASSERT(mf_hdr_stdev(other) > 0);
    ASSERT_EQ(mf_alloc_count() - before, 0);
    mf_hdr_destroy(h);
    mf_hdr_destroy(other);
}
