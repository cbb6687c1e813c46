/*
 * lua/bench/bench.c — `moonflow bench`: parses the flags, picks the mode
 * (scenario when the script defines iteration(), else HTTP), runs it, prints
 * wrk's report on stdout, calls the script's done() (both modes, wrk's order:
 * after the report), writes JSON and the plot, checks the thresholds, and
 * decides the exit code: 0 done, 1 the run could not be made or a
 * threshold failed, 2 bad flags.
 *
 * Owns the options and the result of the run. May call the modes
 * (bench_http.c, bench_scenario.c) and the report modules.
 */
#include <errno.h>
#include <string.h>

#include <moonflow/moonflow.h>

#include "bench.h"
#include "bench_http.h"

#define EXIT_OK 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2

/* --help, -h, --version and -v before "--" answer at once. */
static int early_flags(int argc, char **argv)
{
    for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(bench_usage, stdout);
            return EXIT_OK;
        }
        if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-v")) {
            printf("moonflow bench %s (wrk 4 scripts, wrk2 rates) [epoll]\n",
                   MOONFLOW_VERSION);
            return EXIT_OK;
        }
    }
    return -1;
}

static int usage_error(const char *msg)
{
    fprintf(stderr,
            "moonflow bench: %s\n"
            "Try 'moonflow bench --help'.\n",
            msg);
    return EXIT_USAGE;
}

/* The outputs after the report; the exit code. */
static int outputs(const bench_opts_t *o, const bench_result_t *r)
{
    int code = EXIT_OK;
    char err[256];
    if (o->json && bench_report_json(o->json, o, r) < 0) {
        fprintf(stderr, "moonflow bench: --json %s: %s\n", o->json,
                strerror(errno));
        code = EXIT_FAILED;
    }
    if (o->plot && bench_plot_write(o->plot, o, r, err, sizeof err) < 0) {
        fprintf(stderr, "moonflow bench: %s\n", err); /* names the file */
        code = EXIT_FAILED;
    }
    if (o->nthresholds && bench_thresholds_check(o, r, stdout) > 0)
        code = EXIT_FAILED;
    return code;
}

/* The script's done(summary, latency, requests) of a mode. */
typedef int (*done_fn)(void *user, const bench_result_t *r, char *err,
                       size_t errlen);

/* After a run: the report, done() (wrk's order), then the outputs. */
static int finish(const bench_opts_t *o, const bench_result_t *r, done_fn done,
                  void *user)
{
    char err[1024];
    int code = EXIT_OK;
    bench_report_text(stdout, o, r);
    fflush(stdout);
    if (done(user, r, err, sizeof err) < 0) {
        fprintf(stderr, "moonflow bench: %s\n", err);
        code = EXIT_FAILED;
    }
    int out = outputs(o, r);
    return code ? code : out;
}

static int http_done(void *user, const bench_result_t *r, char *err,
                     size_t errlen)
{
    return bench_http_done(user, r, err, errlen);
}

static int run_http(const bench_opts_t *o)
{
    char err[1024];
    bench_wrk_t *w;
    bench_result_t *r = NULL;
    if (bench_http_prepare(o, &w, err, sizeof err) < 0) {
        fprintf(stderr, "moonflow bench: %s\n", err);
        return EXIT_FAILED;
    }
    int code = EXIT_FAILED;
    if (bench_http_execute(w, &r, err, sizeof err) < 0)
        fprintf(stderr, "moonflow bench: %s\n", err);
    else
        code = finish(o, r, http_done, w);
    bench_http_destroy(w);
    if (r)
        bench_result_free(r);
    return code;
}

static int scenario_done(void *user, const bench_result_t *r, char *err,
                         size_t errlen)
{
    return bench_scenario_done(user, r, err, errlen);
}

static int run_scenario(const bench_opts_t *o)
{
    char err[1024];
    bench_result_t *r = NULL;
    int code = EXIT_FAILED;
    if (bench_scenario_run(o, &r, err, sizeof err) < 0)
        fprintf(stderr, "moonflow bench: %s\n", err);
    else
        code = finish(o, r, scenario_done, (void *)o);
    if (r)
        bench_result_free(r);
    return code;
}

int mf_bench_main(int argc, char **argv)
{
    int code = early_flags(argc, argv);
    if (code >= 0)
        return code;
    bench_opts_t o;
    char err[512];
    if (bench_parse_args(argc, argv, &o, err, sizeof err) < 0)
        return usage_error(err);
    if (o.script && bench_script_is_scenario(o.script))
        code = run_scenario(&o);
    else if (o.nurls == 0)
        code = usage_error("missing URL (a script without iteration() is a "
                           "wrk script: it needs one)");
    else
        code = run_http(&o);
    bench_opts_free(&o);
    return code;
}
