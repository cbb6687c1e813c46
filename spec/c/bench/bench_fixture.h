/*
 * bench_fixture.h — a result of known values for the tests of the bench
 * report modules (lua/bench/bench_*.c): 1000 requests in 1 s, latencies
 * 900 x 1 ms, 90 x 5 ms, 9 x 20 ms, 1 x 100 ms; Req/Sec samples 1000 ..
 * 1900; and captured output.
 */
#ifndef MF_SPEC_BENCH_FIXTURE_H
#define MF_SPEC_BENCH_FIXTURE_H

#include <stdlib.h>
#include <unistd.h>

#include "bench.h"
#include "test.h"

static inline bench_result_t *fixture_result(size_t nseries)
{
    bench_result_t *r = bench_result_new("http", nseries);
    ASSERT(r != NULL && r->latency != NULL && r->rate != NULL);
    mf_hdr_record_n(r->latency, 1000000, 900);
    mf_hdr_record_n(r->latency, 5000000, 90);
    mf_hdr_record_n(r->latency, 20000000, 9);
    mf_hdr_record(r->latency, 100000000);
    for (uint64_t v = 1000; v < 2000; v += 100)
        mf_hdr_record(r->rate, v);
    r->requests = 1000;
    r->bytes = 123456;
    r->duration_ns = 1000000000;
    return r;
}

static inline void fixture_opts(bench_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->threads = 2;
    o->connections = 10;
    o->duration_ns = UINT64_C(10000000000);
    o->urls[0] = "http://127.0.0.1:8080/";
    o->nurls = 1;
}

/* Output captured in memory: open, write to .f, then close to read .text
 * (free it after). */
typedef struct capture {
    FILE *f;
    char *text;
    size_t len;
} capture_t;

static inline void capture_open(capture_t *c)
{
    c->text = NULL;
    c->f = open_memstream(&c->text, &c->len);
    ASSERT(c->f != NULL);
}

static inline const char *capture_close(capture_t *c)
{
    fclose(c->f);
    return c->text;
}

/* Whether text holds line as one whole line. */
static inline int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == 0))
            return 1;
    return 0;
}

#define ASSERT_LINE(text, line)                                     \
    do {                                                            \
        if (!has_line((text), (line)))                              \
            MF_TEST_FAIL("no line \"%s\" in:\n%s", (line), (text)); \
    } while (0)

/* A temporary directory for the test's files (removed by tmpdir_remove). */
static inline void tmpdir_make(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/mf_bench_test_XXXXXX");
    ASSERT(mkdtemp(dir) != NULL);
}

static inline void tmpdir_remove(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT(system(cmd) == 0);
}

/* Runs the Python program source (in dir) with two arguments (no single
 * quotes in them): its exit status. */
static inline int run_python(const char *dir, const char *source,
                             const char *arg1, const char *arg2)
{
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/check.py", dir);
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs(source, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s'", path, arg1, arg2);
    return system(cmd);
}

#endif
