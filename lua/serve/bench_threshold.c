/* bench_threshold.c — --threshold (skeleton). */
#include "bench.h"

int bench_threshold_parse(const char *text, bench_threshold_t *t, char *err,
                          size_t errlen)
{
    (void)text;
    (void)t;
    snprintf(err, errlen, "not built yet");
    return -1;
}

size_t bench_thresholds_check(const bench_opts_t *o, const bench_result_t *r,
                              FILE *out)
{
    (void)o;
    (void)r;
    (void)out;
    return 0;
}
