/*
 * lua/bench/bench.h — `moonflow bench`: the load generator.
 *
 * Two modes share the options, the result and the report:
 *   HTTP      wrk's model: -t threads (worker loops), -c connections spread
 *             over them, each thread running one mf_load_t (core/load) and,
 *             with -s, its own Lua state holding wrk's API
 * (lua/load/mf_lua_wrk.c) whose request()/response()/delay() become the load's
 * hooks; setup(thread) and done(summary, latency, requests) run in the main
 * thread's state. bench_http.c. scenario  the script defines iteration(ctx): -c
 * virtual users per thread, each a coroutine of the thread's Lua host that
 * loops running the flow iteration(ctx) returns (mf.series, mf.parallel,
 * mf.task.*: Redis, HTTP, MySQL, Kafka ...), closed loop or at a constant rate;
 * each iteration and each step of the flow is recorded. bench_scenario.c.
 *
 * Modules: bench.c (the command: parse, pick the mode, run, report, exit
 * code), bench_cli.c (flags → bench_opts_t, --help), bench_http.c,
 * bench_scenario.c, bench_progress.c (the live line on a TTY),
 * bench_report.c (wrk's text, the percentile spectrum, JSON),
 * bench_plot.c (the SVG plot), bench_threshold.c (--threshold checks).
 * They call the Lua host and the engine's public headers (load.h, hdr.h).
 *
 * Ownership: bench_opts_t owns its strings and arrays (bench_opts_free);
 * bench_result_t owns its histograms and series (bench_result_free). Both
 * live on the main thread; worker threads fill their own stats, merged
 * into the result after they stopped.
 */
#ifndef MF_BENCH_H
#define MF_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <moonflow/hdr.h>
#include <moonflow/load.h>

#include "bench_main.h"

#define MF_BENCH_MAX_URLS 64
#define MF_BENCH_MAX_HEADERS 64
#define MF_BENCH_MAX_THRESHOLDS 32
#define MF_BENCH_MAX_CHECKS 64 /* names of bench.check's checks in a run */

/* --threshold 'p99<50ms': a metric, a comparison and a bound. Metrics:
 * pNN[.N] (latency percentile), mean, max, stdev (latency), rps
 * (requests/s), errors (count), error_rate (share of requests, %); the
 * bound of a latency takes a unit (us, ms, s). text is malloc'd by
 * bench_threshold_parse and freed with free() (bench_opts_free). */
typedef struct bench_threshold {
    char *text; /* as given, for the report */
    enum {
        BENCH_T_PERCENTILE,
        BENCH_T_MEAN,
        BENCH_T_MAX,
        BENCH_T_STDEV,
        BENCH_T_RPS,
        BENCH_T_ERRORS,
        BENCH_T_ERROR_RATE,
        BENCH_T_CHECKS /* % of bench.check's checks that passed */
    } metric;
    double percentile; /* BENCH_T_PERCENTILE */
    enum { BENCH_T_LT, BENCH_T_LE, BENCH_T_GT, BENCH_T_GE, BENCH_T_EQ } cmp;
    double bound; /* latencies in ns; rps in 1/s; error_rate in % */
} bench_threshold_t;

typedef struct bench_opts {
    unsigned threads;     /* -t, default 2 */
    unsigned connections; /* -c, default 10; >= threads */
    uint64_t duration_ns; /* -d, default 10 s */
    uint64_t warmup_ns;   /* --warmup, default 0 */
    uint64_t timeout_ns;  /* --timeout, default 2 s */
    double rate;          /* -R/--rate: total requests (iterations)/s; 0 */
    bool latency;         /* --latency: the percentile spectrum */
    bool keepalive;       /* false with --no-keepalive */
    uint64_t requests_per_conn; /* --requests-per-conn, 0: unlimited */
    char *script;               /* -s FILE */
    char **script_args;         /* after "--" (init(args)) */
    size_t nscript_args;
    char *headers[MF_BENCH_MAX_HEADERS]; /* -H "Name: value", as given */
    size_t nheaders;
    char *urls[MF_BENCH_MAX_URLS]; /* one or more; none in scenario mode */
    size_t nurls;
    char *json;  /* --json FILE ("-": stdout) */
    char *plot;  /* --plot FILE.svg (runs already in it are kept) */
    char *label; /* --label: this run's name in JSON and the plot */
    bench_threshold_t thresholds[MF_BENCH_MAX_THRESHOLDS];
    size_t nthresholds;
    int progress; /* --progress / --no-progress; -1: when stderr is a TTY */
} bench_opts_t;

/* One line of the report beside the total: a URL of several, or a step of
 * a scenario ("2 redis GET"). */
typedef struct bench_series {
    char *name;
    uint64_t count;    /* requests, iterations or step runs completed */
    uint64_t errors;   /* failed ones (not in latency) */
    mf_hdr_t *latency; /* ns */
} bench_series_t;

/* bench_check.c: the passes and fails of each named check. */
typedef struct bench_check {
    char *name;
    uint64_t passes, fails;
} bench_check_t;

typedef struct bench_checks {
    bench_check_t items[MF_BENCH_MAX_CHECKS];
    size_t n;
    uint64_t from_ns, until_ns; /* counted in [from, until]; 0: no bound */
    bool error_told;            /* a check's error was printed */
} bench_checks_t;

typedef struct bench_result {
    const char *mode;     /* "http" or "scenario" */
    uint64_t duration_ns; /* the measured window, longest thread */
    uint64_t requests;    /* completed requests (iterations) */
    uint64_t bytes;       /* read (HTTP) */
    mf_load_errors_t errors;
    mf_hdr_t *latency; /* every request's (iteration's), ns */
    mf_hdr_t *rate;    /* per-thread requests/s samples (Req/Sec) */
    bench_series_t *series;
    size_t nseries;
    bench_checks_t checks; /* scenario mode's bench.check counts */
} bench_result_t;

/* bench_cli.c. 0, or -1 with a message naming the flag in err. */
int bench_parse_args(int argc, char **argv, bench_opts_t *o, char *err,
                     size_t errlen);
extern const char bench_usage[]; /* `moonflow bench --help` */
void bench_opts_free(bench_opts_t *o);

/* bench_threshold.c. 0, or -1 with a message in err. */
int bench_threshold_parse(const char *text, bench_threshold_t *t, char *err,
                          size_t errlen);
/* Prints each threshold's verdict to out; the number that failed. */
size_t bench_thresholds_check(const bench_opts_t *o, const bench_result_t *r,
                              FILE *out);
/* One threshold against r: whether it holds; *value is the measured metric
 * (latencies in ns, rps in 1/s, errors a count, error_rate in %). */
bool bench_threshold_eval(const bench_threshold_t *t, const bench_result_t *r,
                          double *value);
/* Failed requests: every socket error and non-2xx/3xx response. And the
 * failed share, in %, of the attempts (responses, status errors included as
 * in wrk, plus socket errors). */
uint64_t bench_result_errors(const bench_result_t *r);
double bench_result_error_rate(const bench_result_t *r);

/* bench_report.c. The lines wrk prints before its run ("Running 10s test @
 * URL", "  2 threads and 10 connections"): the mode prints them when the
 * run starts. */
void bench_report_header(FILE *out, const bench_opts_t *o);
/* wrk's text after the run, from "  Thread Stats" to "Transfer/sec" (with
 * --latency wrk's distribution and wrk2's percentile spectrum), then a
 * table of the series when there are some. */
void bench_report_text(FILE *out, const bench_opts_t *o,
                       const bench_result_t *r);
/* The JSON document (fields documented in the README). 0 or -1 (errno). */
int bench_report_json(const char *path, const bench_opts_t *o,
                      const bench_result_t *r);
/* Whether a result can be written to path after the run: an existing file
 * (not a directory) that is writable, or a new one in a writable directory;
 * dir_too: the directory must be writable even when the file exists (a
 * file replaced by a rename). 0, or -1 with err naming flag and path. */
int bench_output_writable(const char *flag, const char *path, bool dir_too,
                          char *err, size_t errlen);
/* bench_check.c: sets the global bench = {check = ...} of L, counting into
 * c (kept alive by the caller while L runs). */
struct lua_State;
void bench_checks_open(struct lua_State *L, bench_checks_t *c);
/* Adds from's counts to into's, by name. */
void bench_checks_merge(bench_checks_t *into, const bench_checks_t *from);
/* bench_report.c: frees the names; the counters are empty after. */
void bench_checks_free(bench_checks_t *c);
/* bench_plot.c: whether --plot path can take this run (writable, and if it
 * exists a moonflow bench plot with room for one more); 0 or -1 and err. */
int bench_plot_check(const char *path, char *err, size_t errlen);
/* bench_plot.c: adds this run to the SVG at path (kept runs first). */
int bench_plot_write(const char *path, const bench_opts_t *o,
                     const bench_result_t *r, char *err, size_t errlen);

/* A time as wrk prints it (us, ms, s, m: "12.31ms") into buf. */
void bench_format_time_ns(char *buf, size_t len, double ns);
/* wrk2's percentile spectrum of h: levels 0, 10 .. 50, then 5 per halving
 * of the distance to 100% (55 .. 75, 77.5 .. 87.5, ...), and 100 last.
 * Each point: the value at the level (ns), the level (%), and the count of
 * values up to the point's bucket. Writes at most max; returns the number
 * written (0 when h is empty). */
typedef struct bench_spectrum_point {
    uint64_t value_ns;
    double percentile;
    uint64_t count;
} bench_spectrum_point_t;
#define BENCH_SPECTRUM_MAX 1024
size_t bench_spectrum(const mf_hdr_t *h, bench_spectrum_point_t *points,
                      size_t max);

/* mode: a string that outlives the result ("http", "scenario"). Makes the
 * latency and rate histograms and nseries series, each with its latency
 * histogram; the mode sets series[i].name (malloc'd: freed with free()). */
bench_result_t *bench_result_new(const char *mode, size_t nseries);
void bench_result_free(bench_result_t *r);

/* The modes: 0 when the run was made (its verdict is in r), -1 with a
 * message in err when it could not run (bad script, unreachable URL ...). */
int bench_http_run(const bench_opts_t *o, bench_result_t **r, char *err,
                   size_t errlen);
int bench_scenario_run(const bench_opts_t *o, bench_result_t **r, char *err,
                       size_t errlen);
/* After the report: the scenario script's done(summary, latency,
 * requests), as wrk's, when the script defines it, in a Lua host of its
 * own on the calling thread (its main chunk runs there first, with the
 * script's arguments; init() does not). 0, or -1 with the error in err. */
int bench_scenario_done(const bench_opts_t *o, const bench_result_t *r,
                        char *err, size_t errlen);
/* Whether the script defines iteration() (scenario mode). */
bool bench_script_is_scenario(const char *path);

/* bench_progress.c: a thread that redraws one line on stderr each 0.5 s
 * from counters the modes publish (bench_progress_set). */
typedef struct bench_progress bench_progress_t;
bench_progress_t *bench_progress_start(const bench_opts_t *o);
typedef struct bench_progress_sample {
    uint64_t requests, errors, p99_ns;
    bool warming_up;
} bench_progress_sample_t;
/* Called by the mode's main thread with a sampling function. */
void bench_progress_source(bench_progress_t *p,
                           void (*sample)(void *user,
                                          bench_progress_sample_t *out),
                           void *user);
void bench_progress_stop(bench_progress_t *p);

#endif /* MF_BENCH_H */
