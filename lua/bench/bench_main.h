/*
 * lua/bench/bench_main.h — the bench application's one entry, for the
 * binary's command dispatch (lua/main): everything else in lua/bench is
 * its own.
 */
#ifndef MF_BENCH_MAIN_H
#define MF_BENCH_MAIN_H

/* bench.c: `moonflow bench ARGS`. The exit code: 0, 1 (a threshold failed,
 * or the run could not be made), 2 (bad flags). */
int mf_bench_main(int argc, char **argv);

#endif /* MF_BENCH_MAIN_H */
