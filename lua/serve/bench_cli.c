/* bench_cli.c — the flags (skeleton). */
#include "bench.h"

#include <string.h>

const char bench_usage[] = "usage: moonflow bench [OPTIONS] URL...\n";

int bench_parse_args(int argc, char **argv, bench_opts_t *o, char *err,
                     size_t errlen)
{
    (void)argc;
    (void)argv;
    memset(o, 0, sizeof *o);
    snprintf(err, errlen, "not built yet");
    return -1;
}

void bench_opts_free(bench_opts_t *o)
{
    (void)o;
}
