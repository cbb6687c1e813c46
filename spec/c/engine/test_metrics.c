/*
 * test_metrics.c — the metrics registry: families and series, sums over
 * shards written by threads at once, histograms, the text exposition
 * byte for byte (and through Prometheus's own parser when promtool is
 * installed), refusals with their reasons, out-of-memory.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moonflow/error.h"
#include "moonflow/metrics.h"
#include "test.h"

static mf_metric_family_t *family(mf_metrics_t *m, const char *name,
                                  mf_metric_type_t type,
                                  const char *const *labels, size_t n)
{
    mf_metric_spec_t spec = {name, "help of it", type, labels, n, NULL, 0};
    mf_metric_family_t *f = NULL;
    char why[200] = "";
    int rc = mf_metrics_family(m, &spec, &f, why, sizeof why);
    if (rc != 0)
        MF_TEST_FAIL("family %s: %d %s", name, rc, why);
    return f;
}

static mf_metric_t *series(mf_metric_family_t *f, const char *a, const char *b)
{
    const char *values[] = {a, b};
    mf_metric_t *s = NULL;
    ASSERT_EQ(mf_metric_series(f, values, mf_metric_family_labels(f), &s), 0);
    return s;
}

static char *text(mf_metrics_t *m)
{
    size_t len = 0;
    char *t = mf_metrics_text(m, &len);
    ASSERT(t != NULL);
    ASSERT_EQ(strlen(t), len);
    return t;
}

TEST(counter_sums_its_shards_and_keeps_series_by_labels)
{
    mf_metrics_t *m = mf_metrics_create(3);
    const char *labels[] = {"route", "status"};
    mf_metric_family_t *f =
        family(m, "http_requests_total", MF_METRIC_COUNTER, labels, 2);
    mf_metric_t *ok = series(f, "/a", "200");
    ASSERT(series(f, "/a", "200") == ok);
    mf_metric_t *missing = series(f, "/a", "404");
    ASSERT(missing != ok);
    mf_metric_add(ok, 0, 1);
    mf_metric_add(ok, 1, 2);
    mf_metric_add(ok, 2, 3);
    mf_metric_add(missing, 2, 1);
    ASSERT(mf_metric_value(ok) == 6);
    ASSERT(mf_metric_value(missing) == 1);
    char *t = text(m);
    ASSERT_STR_EQ(t, "# HELP http_requests_total help of it\n"
                     "# TYPE http_requests_total counter\n"
                     "http_requests_total{route=\"/a\",status=\"200\"} 6\n"
                     "http_requests_total{route=\"/a\",status=\"404\"} 1\n");
    mf_free(t);
    mf_metrics_free(m);
}

TEST(gauge_is_the_sum_of_what_each_shard_set)
{
    mf_metrics_t *m = mf_metrics_create(2);
    mf_metric_family_t *f =
        family(m, "open_connections", MF_METRIC_GAUGE, NULL, 0);
    mf_metric_t *g = series(f, NULL, NULL);
    mf_metric_set(g, 0, 5);
    mf_metric_set(g, 1, 7);
    mf_metric_add(g, 1, -2);
    mf_metric_set(g, 0, 4);
    ASSERT(mf_metric_value(g) == 9);
    char *t = text(m);
    ASSERT_STR_EQ(t, "# HELP open_connections help of it\n"
                     "# TYPE open_connections gauge\n"
                     "open_connections 9\n");
    mf_free(t);
    mf_metrics_free(m);
}

TEST(histogram_buckets_are_cumulative_with_sum_and_count)
{
    mf_metrics_t *m = mf_metrics_create(2);
    const char *labels[] = {"route"};
    const double bounds[] = {0.1, 0.5, 2};
    mf_metric_spec_t spec = {"latency_seconds",
                             "Request time.",
                             MF_METRIC_HISTOGRAM,
                             labels,
                             1,
                             bounds,
                             3};
    mf_metric_family_t *f = NULL;
    ASSERT_EQ(mf_metrics_family(m, &spec, &f, NULL, 0), 0);
    mf_metric_t *h = series(f, "/x", NULL);
    mf_metric_observe(h, 0, 0.05);
    mf_metric_observe(h, 1, 0.1); /* on the bound: in it */
    mf_metric_observe(h, 0, 0.3);
    mf_metric_observe(h, 1, 3);
    mf_metric_observe(h, 1, NAN); /* only in +Inf; the sum turns NaN */
    ASSERT(mf_metric_value(h) == 5);
    char *t = text(m);
    ASSERT_STR_EQ(t, "# HELP latency_seconds Request time.\n"
                     "# TYPE latency_seconds histogram\n"
                     "latency_seconds_bucket{route=\"/x\",le=\"0.1\"} 2\n"
                     "latency_seconds_bucket{route=\"/x\",le=\"0.5\"} 3\n"
                     "latency_seconds_bucket{route=\"/x\",le=\"2\"} 3\n"
                     "latency_seconds_bucket{route=\"/x\",le=\"+Inf\"} 5\n"
                     "latency_seconds_sum{route=\"/x\"} NaN\n"
                     "latency_seconds_count{route=\"/x\"} 5\n");
    mf_free(t);
    mf_metrics_free(m);
}

TEST(default_buckets_and_no_labels)
{
    mf_metrics_t *m = mf_metrics_create(1);
    mf_metric_family_t *f =
        family(m, "wait_seconds", MF_METRIC_HISTOGRAM, NULL, 0);
    mf_metric_t *h = series(f, NULL, NULL);
    mf_metric_observe(h, 0, 0.007);
    mf_metric_observe(h, 0, 0.25);
    ASSERT(fabs(mf_metric_sum(h) - 0.257) < 1e-12);
    char *t = text(m);
    ASSERT(strstr(t, "wait_seconds_bucket{le=\"0.005\"} 0\n"));
    ASSERT(strstr(t, "wait_seconds_bucket{le=\"0.01\"} 1\n"));
    ASSERT(strstr(t, "wait_seconds_bucket{le=\"0.25\"} 2\n"));
    ASSERT(strstr(t, "wait_seconds_bucket{le=\"10\"} 2\n"));
    ASSERT(strstr(t, "wait_seconds_bucket{le=\"+Inf\"} 2\n"));
    ASSERT(strstr(t, "wait_seconds_sum 0.257\n"));
    ASSERT(strstr(t, "wait_seconds_count 2\n"));
    mf_free(t);
    mf_metrics_free(m);
}

TEST(escapes_label_values_and_help)
{
    mf_metrics_t *m = mf_metrics_create(1);
    const char *labels[] = {"path"};
    mf_metric_spec_t spec = {"odd_total",
                             "a \\ and a\nnewline \"kept\"",
                             MF_METRIC_COUNTER,
                             labels,
                             1,
                             NULL,
                             0};
    mf_metric_family_t *f = NULL;
    ASSERT_EQ(mf_metrics_family(m, &spec, &f, NULL, 0), 0);
    mf_metric_add(series(f, "q\"\\\n", NULL), 0, 0.5);
    char *t = text(m);
    ASSERT_STR_EQ(t, "# HELP odd_total a \\\\ and a\\nnewline \"kept\"\n"
                     "# TYPE odd_total counter\n"
                     "odd_total{path=\"q\\\"\\\\\\n\"} 0.5\n");
    mf_free(t);
    mf_metrics_free(m);
}

TEST(numbers_in_full_or_shortest)
{
    mf_metrics_t *m = mf_metrics_create(1);
    mf_metric_family_t *f =
        family(m, "n", MF_METRIC_GAUGE, (const char *const[]){"k"}, 1);
    mf_metric_set(series(f, "a", NULL), 0, 0.1);
    mf_metric_set(series(f, "b", NULL), 0, 123456789012.0);
    mf_metric_set(series(f, "c", NULL), 0, -2.5e-9);
    mf_metric_set(series(f, "d", NULL), 0, 1e300);
    mf_metric_set(series(f, "e", NULL), 0, -INFINITY);
    char *t = text(m);
    ASSERT(strstr(t, "n{k=\"a\"} 0.1\n"));
    ASSERT(strstr(t, "n{k=\"b\"} 123456789012\n"));
    ASSERT(strstr(t, "n{k=\"c\"} -2.5e-09\n"));
    ASSERT(strstr(t, "n{k=\"d\"} 1e+300\n"));
    ASSERT(strstr(t, "n{k=\"e\"} -Inf\n"));
    mf_free(t);
    mf_metrics_free(m);
}

static int refused(mf_metrics_t *m, mf_metric_spec_t spec, const char *want)
{
    mf_metric_family_t *f = NULL;
    char why[200] = "";
    int rc = mf_metrics_family(m, &spec, &f, why, sizeof why);
    if (!strstr(why, want))
        MF_TEST_FAIL("%s: \"%s\" lacks \"%s\"", spec.name, why, want);
    return rc;
}

TEST(refuses_bad_names_labels_buckets_and_other_shapes)
{
    mf_metrics_t *m = mf_metrics_create(1);
    const char *le[] = {"le"}, *twice[] = {"a", "a"}, *under[] = {"__x"},
               *dash[] = {"a-b"}, *ab[] = {"a", "b"};
    const double down[] = {1, 0.5}, inf[] = {1, INFINITY};
    mf_metric_type_t C = MF_METRIC_COUNTER, H = MF_METRIC_HISTOGRAM;
    ASSERT_EQ(refused(m, (mf_metric_spec_t){"1x", "", C, 0, 0, 0, 0},
                      "metric name \"1x\""),
              MF_EINVAL);
    ASSERT_EQ(refused(m, (mf_metric_spec_t){"a b", "", C, 0, 0, 0, 0},
                      "[a-zA-Z_:][a-zA-Z0-9_:]* expected"),
              MF_EINVAL);
    ASSERT_EQ(
        refused(m, (mf_metric_spec_t){"h", "", H, le, 1, 0, 0}, "label \"le\""),
        MF_EINVAL);
    ASSERT_EQ(refused(m, (mf_metric_spec_t){"c", "", C, twice, 2, 0, 0},
                      "given twice"),
              MF_EINVAL);
    ASSERT_EQ(refused(m, (mf_metric_spec_t){"c", "", C, under, 1, 0, 0},
                      "not starting with __"),
              MF_EINVAL);
    ASSERT_EQ(refused(m, (mf_metric_spec_t){"c", "", C, dash, 1, 0, 0},
                      "label \"a-b\""),
              MF_EINVAL);
    ASSERT_EQ(refused(m, (mf_metric_spec_t){"h", "", H, 0, 0, down, 2},
                      "increasing order expected (bucket 2)"),
              MF_EINVAL);
    ASSERT_EQ(
        refused(m, (mf_metric_spec_t){"h", "", H, 0, 0, inf, 2}, "(bucket 2)"),
        MF_EINVAL);
    /* The same shape again is the same family; another shape is refused. */
    mf_metric_family_t *c = family(m, "c_total", C, ab, 2);
    ASSERT(family(m, "c_total", C, ab, 2) == c);
    ASSERT_EQ(refused(m, (mf_metric_spec_t){"c_total", "", C, ab, 1, 0, 0},
                      "already declared as a counter with 2 label(s)"),
              MF_EINVAL);
    ASSERT_EQ(
        refused(m,
                (mf_metric_spec_t){"c_total", "", MF_METRIC_GAUGE, ab, 2, 0, 0},
                "already declared as a counter"),
        MF_EINVAL);
    /* A series needs every label's value. */
    mf_metric_t *s = NULL;
    const char *one[] = {"x"}, *null2[] = {"x", NULL};
    ASSERT_EQ(mf_metric_series(c, one, 1, &s), MF_EINVAL);
    ASSERT_EQ(mf_metric_series(c, null2, 2, &s), MF_EINVAL);
    /* A family with no series yet writes nothing. */
    char *t = text(m);
    ASSERT_STR_EQ(t, "");
    mf_free(t);
    mf_metrics_free(m);
}

TEST(a_family_stops_at_its_series_limit)
{
    mf_metrics_t *m = mf_metrics_create(2);
    mf_metric_family_t *f = family(m, "per_path_total", MF_METRIC_COUNTER,
                                   (const char *const[]){"path"}, 1);
    char value[32];
    mf_metric_t *s = NULL;
    for (int i = 0; i < MF_METRIC_MAX_SERIES; i++) {
        snprintf(value, sizeof value, "/p%d", i);
        ASSERT_EQ(mf_metric_series(f, (const char *const[]){value}, 1, &s), 0);
        mf_metric_add(s, (unsigned)i % 2, 1);
    }
    ASSERT_EQ(mf_metric_series(f, (const char *const[]){"/more"}, 1, &s),
              MF_ENOSPC);
    /* Known series are still found, with their values. */
    ASSERT_EQ(mf_metric_series(f, (const char *const[]){"/p9999"}, 1, &s), 0);
    ASSERT(mf_metric_value(s) == 1);
    char *t = text(m);
    ASSERT(strstr(t, "per_path_total{path=\"/p0\"} 1\n"));
    ASSERT(strstr(t, "per_path_total{path=\"/p9999\"} 1\n"));
    mf_free(t);
    mf_metrics_free(m);
}

TEST(out_of_memory_is_an_error_then_passes)
{
    mf_metrics_t *m = mf_metrics_create(2);
    mf_metric_family_t *f = family(m, "oom_total", MF_METRIC_COUNTER,
                                   (const char *const[]){"k"}, 1);
    mf_metric_t *s = NULL;
    for (unsigned n = 1; n <= 4; n++) {
        mf_alloc_fail_next(n);
        int rc = mf_metric_series(f, (const char *const[]){"v"}, 1, &s);
        mf_alloc_fail_next(0);
        ASSERT(rc == MF_ENOMEM || rc == 0);
    }
    ASSERT_EQ(mf_metric_series(f, (const char *const[]){"v"}, 1, &s), 0);
    mf_metric_add(s, 1, 4);
    size_t len;
    mf_alloc_fail_next(1);
    ASSERT(mf_metrics_text(m, &len) == NULL);
    mf_alloc_fail_next(0);
    char *t = text(m);
    ASSERT(strstr(t, "oom_total{k=\"v\"} 4\n"));
    mf_free(t);
    mf_metrics_free(m);
}

/* ---- threads: each writes its shard while another scrapes -------------- */

#define WRITERS 4
#define ADDS 1000000

typedef struct {
    mf_metric_t *counter, *histogram;
    unsigned shard;
} writer_t;

static void *write_shard(void *arg)
{
    writer_t *w = arg;
    for (int i = 0; i < ADDS; i++) {
        mf_metric_add(w->counter, w->shard, 1);
        if (i % 100 == 0)
            mf_metric_observe(w->histogram, w->shard, 0.001 * (i % 7));
    }
    return NULL;
}

static _Atomic int writers_done;

static void *scrape(void *arg)
{
    mf_metrics_t *m = arg;
    double last = 0;
    while (!writers_done) {
        size_t len;
        char *t = mf_metrics_text(m, &len);
        ASSERT(t != NULL);
        const char *p = strstr(t, "adds_total ");
        double now = p ? strtod(p + 11, NULL) : 0;
        ASSERT(now >= last); /* each shard only grows */
        last = now;
        mf_free(t);
    }
    return NULL;
}

TEST(threads_write_their_shards_without_losing_a_count)
{
    mf_metrics_t *m = mf_metrics_create(WRITERS);
    mf_metric_t *c =
        series(family(m, "adds_total", MF_METRIC_COUNTER, NULL, 0), 0, 0);
    mf_metric_t *h =
        series(family(m, "obs_seconds", MF_METRIC_HISTOGRAM, NULL, 0), 0, 0);
    pthread_t threads[WRITERS], scraper;
    writer_t w[WRITERS];
    pthread_create(&scraper, NULL, scrape, m);
    for (unsigned i = 0; i < WRITERS; i++) {
        w[i] = (writer_t){c, h, i};
        pthread_create(&threads[i], NULL, write_shard, &w[i]);
    }
    for (unsigned i = 0; i < WRITERS; i++)
        pthread_join(threads[i], NULL);
    writers_done = 1;
    pthread_join(scraper, NULL);
    ASSERT(mf_metric_value(c) == (double)WRITERS * ADDS);
    ASSERT(mf_metric_value(h) == (double)WRITERS * ADDS / 100);
    mf_metrics_free(m);
}

/* ---- Prometheus's own parser ------------------------------------------- */

TEST(promtool_accepts_the_text)
{
    /* The Makefile installs Debian's prometheus package for this. */
    if (system("command -v promtool >/dev/null 2>&1") != 0)
        MF_TEST_FAIL("promtool not found (Debian package prometheus)");
    mf_metrics_t *m = mf_metrics_create(2);
    const char *labels[] = {"route", "method", "status"};
    mf_metric_spec_t spec = {"moonflow_http_requests_total",
                             "Requests answered, by route, method and status.",
                             MF_METRIC_COUNTER,
                             labels,
                             3,
                             NULL,
                             0};
    mf_metric_family_t *f = NULL;
    ASSERT_EQ(mf_metrics_family(m, &spec, &f, NULL, 0), 0);
    mf_metric_t *s = NULL;
    const char *v1[] = {"/a \"b\"\\", "GET", "200"};
    ASSERT_EQ(mf_metric_series(f, v1, 3, &s), 0);
    mf_metric_add(s, 1, 3);
    spec = (mf_metric_spec_t){"moonflow_http_request_duration_seconds",
                              "Time to answer.\nSecond line.",
                              MF_METRIC_HISTOGRAM,
                              labels,
                              1,
                              NULL,
                              0};
    ASSERT_EQ(mf_metrics_family(m, &spec, &f, NULL, 0), 0);
    ASSERT_EQ(mf_metric_series(f, v1, 1, &s), 0);
    mf_metric_observe(s, 0, 0.042);
    spec = (mf_metric_spec_t){"moonflow_lua_memory_bytes",
                              "Lua heap.",
                              MF_METRIC_GAUGE,
                              NULL,
                              0,
                              NULL,
                              0};
    ASSERT_EQ(mf_metrics_family(m, &spec, &f, NULL, 0), 0);
    ASSERT_EQ(mf_metric_series(f, NULL, 0, &s), 0);
    mf_metric_set(s, 0, 1048576);
    char path[] = "/tmp/mf-metrics-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    char *t = text(m);
    ASSERT_EQ(write(fd, t, strlen(t)), (long long)strlen(t));
    close(fd);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
    int rc = system(cmd);
    unlink(path);
    if (rc != 0)
        MF_TEST_FAIL("promtool refused:\n%s", t);
    mf_free(t);
    mf_metrics_free(m);
}
