/* bench_progress.c — the live line (skeleton). */
#include "bench.h"

bench_progress_t *bench_progress_start(const bench_opts_t *o)
{
    (void)o;
    return NULL;
}

void bench_progress_source(bench_progress_t *p,
                           void (*sample)(void *user,
                                          bench_progress_sample_t *out),
                           void *user)
{
    (void)p;
    (void)sample;
    (void)user;
}

void bench_progress_stop(bench_progress_t *p)
{
    (void)p;
}
