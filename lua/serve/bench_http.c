/* bench_http.c — the HTTP mode (skeleton). */
#include "bench.h"

int bench_http_run(const bench_opts_t *o, bench_result_t **r, char *err,
                   size_t errlen)
{
    (void)o;
    *r = NULL;
    snprintf(err, errlen, "not built yet");
    return -1;
}
