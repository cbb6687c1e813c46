/* bench_report.c — the report (skeleton). */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>

void bench_report_text(FILE *out, const bench_opts_t *o,
                       const bench_result_t *r)
{
    (void)out;
    (void)o;
    (void)r;
}

int bench_report_json(const char *path, const bench_opts_t *o,
                      const bench_result_t *r)
{
    (void)path;
    (void)o;
    (void)r;
    errno = ENOSYS;
    return -1;
}

bench_result_t *bench_result_new(const char *mode, size_t nseries)
{
    (void)mode;
    (void)nseries;
    return NULL;
}

void bench_result_free(bench_result_t *r)
{
    (void)r;
}
