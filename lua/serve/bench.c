/* bench.c — `moonflow bench` (skeleton: replaced by the command). */
#include "bench.h"

int mf_bench_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fputs("moonflow bench: not built yet\n", stderr);
    return 1;
}
