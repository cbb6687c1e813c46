/* bench_scenario.c — the scenario mode (skeleton). */
#include "bench.h"

int bench_scenario_run(const bench_opts_t *o, bench_result_t **r, char *err,
                       size_t errlen)
{
    (void)o;
    *r = NULL;
    snprintf(err, errlen, "not built yet");
    return -1;
}

bool bench_script_is_scenario(const char *path)
{
    (void)path;
    return false;
}
