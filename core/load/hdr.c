/* hdr.c — the latency histogram (skeleton). */
#include "moonflow/hdr.h"

#include <stdlib.h>

mf_hdr_t *mf_hdr_create(void)
{
    return NULL;
}
void mf_hdr_destroy(mf_hdr_t *h)
{
    (void)h;
}
void mf_hdr_reset(mf_hdr_t *h)
{
    (void)h;
}
void mf_hdr_record(mf_hdr_t *h, uint64_t value)
{
    (void)h;
    (void)value;
}
void mf_hdr_record_n(mf_hdr_t *h, uint64_t value, uint64_t count)
{
    (void)h;
    (void)value;
    (void)count;
}
void mf_hdr_merge(mf_hdr_t *dst, const mf_hdr_t *src)
{
    (void)dst;
    (void)src;
}
uint64_t mf_hdr_count(const mf_hdr_t *h)
{
    (void)h;
    return 0;
}
uint64_t mf_hdr_clamped(const mf_hdr_t *h)
{
    (void)h;
    return 0;
}
uint64_t mf_hdr_min(const mf_hdr_t *h)
{
    (void)h;
    return 0;
}
uint64_t mf_hdr_max(const mf_hdr_t *h)
{
    (void)h;
    return 0;
}
double mf_hdr_mean(const mf_hdr_t *h)
{
    (void)h;
    return 0;
}
double mf_hdr_stdev(const mf_hdr_t *h)
{
    (void)h;
    return 0;
}
uint64_t mf_hdr_percentile(const mf_hdr_t *h, double p)
{
    (void)h;
    (void)p;
    return 0;
}
double mf_hdr_within_stdev(const mf_hdr_t *h, double n)
{
    (void)h;
    (void)n;
    return 0;
}
bool mf_hdr_next(const mf_hdr_t *h, mf_hdr_iter_t *it)
{
    (void)h;
    (void)it;
    return false;
}
