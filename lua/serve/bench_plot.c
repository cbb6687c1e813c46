/* bench_plot.c — the SVG plot (skeleton). */
#include "bench.h"

int bench_plot_write(const char *path, const bench_opts_t *o,
                     const bench_result_t *r, char *err, size_t errlen)
{
    (void)path;
    (void)o;
    (void)r;
    snprintf(err, errlen, "not built yet");
    return -1;
}
