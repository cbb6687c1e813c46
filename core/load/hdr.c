/*
 * hdr.c — the latency histogram (moonflow/hdr.h).
 *
 * Layout: values below MF_HDR_SUB_BUCKETS (256) have a slot each; above,
 * the values of each power of two [2^k, 2^(k+1)) share MF_HDR_SUB_BUCKETS /
 * 2 (128) slots of width 2^(k-7). The slot of v is found from the position
 * of its highest bit (one count of leading zeros), so a record is a shift,
 * an add and an increment on an array inside the struct. A slot's lowest
 * value is at least 128 times its width, so its highest equivalent value is
 * within 1/128 (0.78%) of any value recorded in it.
 *
 * min, max, the count and the sum (two 64-bit words: hours of nanoseconds
 * at millions of records a second do not overflow them) are exact. The
 * stdev takes the exact mean and each slot at its midpoint: the midpoint is
 * the unbiased stand-in for values spread over a slot, where the highest
 * equivalent value would add half a slot's width to every deviation.
 *
 * Owns: mf_hdr_t. Calls: mf_xcalloc/mf_free (once per histogram).
 */
#include "moonflow/hdr.h"

#include <math.h>
#include <string.h>

#define HALF_COUNT (MF_HDR_SUB_BUCKETS / 2)
#define HALF_SHIFT 7 /* log2(HALF_COUNT) */
/* The slot of MF_HDR_MAX (bit 43 set: magnitude 43 - 7) plus one. */
#define SLOT_COUNT ((43 - HALF_SHIFT) * HALF_COUNT + MF_HDR_SUB_BUCKETS)

_Static_assert(HALF_COUNT == 1 << HALF_SHIFT, "HALF_SHIFT matches");

struct mf_hdr {
    uint64_t count;
    uint64_t clamped;
    uint64_t min; /* UINT64_MAX while empty */
    uint64_t max;
    uint64_t sum_lo; /* the sum of every value, 128 bits */
    uint64_t sum_hi;
    uint64_t counts[SLOT_COUNT];
};

/* The magnitude of v: 0 for values with a slot each, else the log2 of the
 * width of v's slot. */
static inline unsigned magnitude_of(uint64_t v)
{
    unsigned top =
        63u - (unsigned)__builtin_clzll(v | (MF_HDR_SUB_BUCKETS - 1));
    return top - HALF_SHIFT;
}

static inline size_t slot_of(uint64_t v)
{
    unsigned m = magnitude_of(v);
    return (size_t)m * HALF_COUNT + (size_t)(v >> m);
}

static uint64_t slot_lowest(size_t slot, uint64_t *width)
{
    if (slot < MF_HDR_SUB_BUCKETS) {
        *width = 1;
        return slot;
    }
    unsigned m = (unsigned)(slot >> HALF_SHIFT) - 1;
    uint64_t sub = (slot & (HALF_COUNT - 1)) + HALF_COUNT;
    *width = UINT64_C(1) << m;
    return sub << m;
}

static uint64_t slot_highest(size_t slot)
{
    uint64_t width;
    uint64_t low = slot_lowest(slot, &width);
    return low + width - 1;
}

/* The middle of the slot's values, kept within [min, max]: the first and
 * the last slot hold nothing beyond them. */
static double slot_midpoint(const mf_hdr_t *h, size_t slot)
{
    uint64_t width;
    uint64_t low = slot_lowest(slot, &width);
    double mid = (double)low + (double)(width - 1) / 2.0;
    if (mid < (double)h->min)
        return (double)h->min;
    return mid > (double)h->max ? (double)h->max : mid;
}

mf_hdr_t *mf_hdr_create(void)
{
    mf_hdr_t *h = mf_xcalloc(1, sizeof *h);
    h->min = UINT64_MAX;
    return h;
}

void mf_hdr_destroy(mf_hdr_t *h)
{
    mf_free(h);
}

void mf_hdr_reset(mf_hdr_t *h)
{
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

static void sum_add(mf_hdr_t *h, uint64_t lo, uint64_t hi)
{
    h->sum_lo += lo;
    h->sum_hi += hi + (h->sum_lo < lo);
}

static void sum_add_product(mf_hdr_t *h, uint64_t value, uint64_t count)
{
    unsigned __int128 product = (unsigned __int128)value * count;
    sum_add(h, (uint64_t)product, (uint64_t)(product >> 64));
}

void mf_hdr_record_n(mf_hdr_t *h, uint64_t value, uint64_t count)
{
    if (count == 0)
        return;
    if (MF_UNLIKELY(value > MF_HDR_MAX)) {
        value = MF_HDR_MAX;
        h->clamped += count;
    }
    h->counts[slot_of(value)] += count;
    h->count += count;
    if (value < h->min)
        h->min = value;
    if (value > h->max)
        h->max = value;
    if (count == 1)
        sum_add(h, value, 0);
    else
        sum_add_product(h, value, count);
}

void mf_hdr_record(mf_hdr_t *h, uint64_t value)
{
    mf_hdr_record_n(h, value, 1);
}

void mf_hdr_merge(mf_hdr_t *dst, const mf_hdr_t *src)
{
    if (src->count == 0)
        return;
    for (size_t i = 0; i < SLOT_COUNT; i++)
        dst->counts[i] += src->counts[i];
    dst->count += src->count;
    dst->clamped += src->clamped;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
    sum_add(dst, src->sum_lo, src->sum_hi);
}

uint64_t mf_hdr_count(const mf_hdr_t *h)
{
    return h->count;
}

uint64_t mf_hdr_clamped(const mf_hdr_t *h)
{
    return h->clamped;
}

uint64_t mf_hdr_min(const mf_hdr_t *h)
{
    return h->count ? h->min : 0;
}

uint64_t mf_hdr_max(const mf_hdr_t *h)
{
    return h->max;
}

double mf_hdr_mean(const mf_hdr_t *h)
{
    if (h->count == 0)
        return 0;
    long double sum = (long double)h->sum_hi * 18446744073709551616.0L +
                      (long double)h->sum_lo;
    return (double)(sum / (long double)h->count);
}

double mf_hdr_stdev(const mf_hdr_t *h)
{
    if (h->count == 0)
        return 0;
    double mean = mf_hdr_mean(h);
    long double squares = 0;
    for (size_t i = 0; i < SLOT_COUNT; i++) {
        if (h->counts[i] == 0)
            continue;
        double d = slot_midpoint(h, i) - mean;
        squares += (long double)d * d * (long double)h->counts[i];
    }
    return sqrt((double)(squares / (long double)h->count));
}

/* The rank (1..count) percentile p asks for: ceil(p% of count), with the
 * rounding error of p / 100 * count taken off first so that 99.9% of 1000
 * is 999, not 1000. */
static uint64_t rank_of(uint64_t count, double p)
{
    double exact = p / 100.0 * (double)count;
    double rank = ceil(exact - exact * 1e-12);
    if (rank < 1)
        return 1;
    return rank > (double)count ? count : (uint64_t)rank;
}

uint64_t mf_hdr_percentile(const mf_hdr_t *h, double p)
{
    if (h->count == 0)
        return 0;
    if (!(p > 0)) /* also NaN */
        return h->min;
    if (p >= 100)
        return h->max;
    uint64_t rank = rank_of(h->count, p), seen = 0;
    size_t i = slot_of(h->min);
    for (; i < SLOT_COUNT; i++) {
        seen += h->counts[i];
        if (seen >= rank)
            break;
    }
    uint64_t v = i < SLOT_COUNT ? slot_highest(i) : h->max;
    if (v > h->max)
        v = h->max;
    return v < h->min ? h->min : v;
}

double mf_hdr_within_stdev(const mf_hdr_t *h, double n)
{
    if (h->count == 0)
        return 0;
    double mean = mf_hdr_mean(h), reach = n * mf_hdr_stdev(h);
    double lo = mean - reach, hi = mean + reach;
    uint64_t within = 0;
    for (size_t i = slot_of(h->min); i <= slot_of(h->max); i++) {
        double mid = slot_midpoint(h, i);
        if (h->counts[i] != 0 && mid >= lo && mid <= hi)
            within += h->counts[i];
    }
    return 100.0 * (double)within / (double)h->count;
}

bool mf_hdr_next(const mf_hdr_t *h, mf_hdr_iter_t *it)
{
    if (h->count == 0)
        return false;
    size_t i = it->_index;
    if (i == 0)
        i = slot_of(h->min);
    size_t last = slot_of(h->max);
    for (; i <= last; i++)
        if (h->counts[i] != 0)
            break;
    if (i > last)
        return false;
    uint64_t v = slot_highest(i);
    it->value = v > h->max ? h->max : v;
    it->count = h->counts[i];
    it->_index = i + 1;
    return true;
}
