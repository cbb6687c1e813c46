/*
 * lua/bench/bench_http.h — the HTTP mode in steps, so that the command
 * (bench.c) prints wrk's report between the run and the script's done(),
 * as wrk does. bench_http_run (bench.h) is the steps in one call.
 *
 * Ownership: bench_wrk_t holds the Lua states (the main one and one per
 * thread), the loops and loads of the threads; bench_http_destroy frees
 * them. The result stays the caller's (bench_result_free), and must
 * outlive bench_http_done.
 */
#ifndef MF_BENCH_HTTP_H
#define MF_BENCH_HTTP_H

#include <lua.h>

#include "bench.h"

typedef struct bench_wrk bench_wrk_t;

/* Resolves the URLs, loads the script in the main state and in one state
 * per thread, calls setup(thread) and init(args) for each thread (wrk's
 * order). 0, or -1 with a message in err (*w is then NULL). */
int bench_http_prepare(const bench_opts_t *o, bench_wrk_t **w, char *err,
                       size_t errlen);
/* Prints wrk's header lines, runs the threads until the duration is over
 * (or every thread stopped), merges their stats into *r. 0, or -1 with a
 * message in err (a thread could not start, a script raised). */
int bench_http_execute(bench_wrk_t *w, bench_result_t **r, char *err,
                       size_t errlen);
/* Calls done(summary, latency, requests) when the script defines it. 0, or
 * -1 with the error in err. */
int bench_http_done(bench_wrk_t *w, const bench_result_t *r, char *err,
                    size_t errlen);
void bench_http_destroy(bench_wrk_t *w);

/* done(summary, latency, requests) in L when the script defines it, with
 * wrk's summary table and statistics objects over r (both modes: the
 * scenario mode calls it in a state of its own). 0, or -1 with the error
 * in err. */
int bench_lua_done(lua_State *L, const bench_result_t *r, char *err,
                   size_t errlen);

#endif /* MF_BENCH_HTTP_H */
