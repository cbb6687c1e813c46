/*
 * lua/bench/bench.c — `moonflow bench`: parses the flags, picks the mode
 * (scenario when the script defines iteration(), else HTTP), runs it, prints
 * wrk's report on stdout, calls the script's done() (both modes, wrk's order:
 * after the report), checks the thresholds, writes JSON and the plot, and
 * decides the exit code: 0 done, 1 the run could not be made or nothing
 * succeeded (no request or iteration did, some failed), 2 bad flags or an
 * output that could not be written (checked before the run), 99 a
 * threshold failed (k6's code; it wins over 1). With --json -, stdout carries
 * the JSON document alone.
 *
 * Owns the options and the result of the run. May call the modes
 * (bench_http.c, bench_scenario.c) and the report modules.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include <moonflow/moonflow.h>

#include "bench.h"
#include "bench_http.h"

#define EXIT_OK 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_THRESHOLD 99 /* k6's: CI tells a breach from a broken run */

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

/* With --json -, the document is all that goes to stdout: fd 1 points at
 * stderr while the run lasts (the report, the script's prints, the
 * thresholds' verdicts), the real stdout kept aside for the document. */
static int kept_stdout = -1;

static int stdout_to_stderr(void)
{
    fflush(stdout);
    kept_stdout = dup(STDOUT_FILENO);
    return kept_stdout < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0 ? -1 : 0;
}

static void stdout_back(void)
{
    if (kept_stdout < 0)
        return;
    fflush(stdout);
    dup2(kept_stdout, STDOUT_FILENO);
    close(kept_stdout);
    kept_stdout = -1;
}

static bool json_on_stdout(const bench_opts_t *o)
{
    return o->json && strcmp(o->json, "-") == 0;
}

/* Every output path can be written, before any request is sent. */
static int check_outputs(const bench_opts_t *o, char *err, size_t errlen)
{
    if (o->json && !json_on_stdout(o) &&
        bench_output_writable("--json", o->json, false, err, errlen) < 0)
        return -1;
    return o->plot ? bench_plot_check(o->plot, err, errlen) : 0;
}

/* A run in which nothing succeeded and something failed says so. */
static int nothing_succeeded(const bench_result_t *r)
{
    uint64_t errors = bench_result_errors(r);
    if (r->requests > 0 || errors == 0)
        return EXIT_OK;
    fprintf(stderr,
            "moonflow bench: every %s failed (%" PRIu64 " errors, none "
            "succeeded)\n",
            strcmp(r->mode, "http") == 0 ? "request" : "iteration", errors);
    return EXIT_FAILED;
}

/* The outputs after the report; the exit code. */
static int outputs(const bench_opts_t *o, const bench_result_t *r)
{
    int code = nothing_succeeded(r);
    char err[256];
    if (o->nthresholds && bench_thresholds_check(o, r, stdout) > 0)
        code = EXIT_THRESHOLD;
    stdout_back();
    if (o->json && bench_report_json(o->json, o, r) < 0) {
        fprintf(stderr, "moonflow bench: --json %s: %s\n", o->json,
                strerror(errno));
        code = code ? code : EXIT_FAILED;
    }
    if (o->plot && bench_plot_write(o->plot, o, r, err, sizeof err) < 0) {
        fprintf(stderr, "moonflow bench: %s\n", err); /* names the file */
        code = code ? code : EXIT_FAILED;
    }
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
    if (check_outputs(&o, err, sizeof err) < 0) {
        bench_opts_free(&o);
        return usage_error(err);
    }
    if (json_on_stdout(&o) && stdout_to_stderr() < 0) {
        bench_opts_free(&o);
        fprintf(stderr, "moonflow bench: --json -: %s\n", strerror(errno));
        return EXIT_FAILED;
    }
    if (o.script && bench_script_is_scenario(o.script))
        code = run_scenario(&o);
    else if (o.nurls == 0)
        code = usage_error("missing URL (a script without iteration() is a "
                           "wrk script: it needs one)");
    else
        code = run_http(&o);
    stdout_back(); /* a run that failed before its outputs */
    bench_opts_free(&o);
    return code;
}
