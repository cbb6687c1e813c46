/*
 * test_bench_threshold.c — --threshold: the syntax, its errors (each
 * naming the text), and verdicts against a result of known values.
 */
#include "bench_fixture.h"

static bench_threshold_t parse_ok(const char *text)
{
    bench_threshold_t t;
    char err[256] = "";
    if (bench_threshold_parse(text, &t, err, sizeof err) != 0)
        MF_TEST_FAIL("'%s' refused: %s", text, err);
    ASSERT_STR_EQ(t.text, text);
    free(t.text);
    t.text = NULL;
    return t;
}

TEST(parses_every_metric_comparison_and_unit)
{
    bench_threshold_t t = parse_ok("p99<50ms");
    ASSERT(t.metric == BENCH_T_PERCENTILE && t.percentile == 99);
    ASSERT(t.cmp == BENCH_T_LT && t.bound == 50e6);
    t = parse_ok("p99.9 <= 1s");
    ASSERT(t.percentile == 99.9 && t.cmp == BENCH_T_LE && t.bound == 1e9);
    t = parse_ok("mean<10ms");
    ASSERT(t.metric == BENCH_T_MEAN && t.bound == 10e6);
    t = parse_ok("max<2s");
    ASSERT(t.metric == BENCH_T_MAX && t.bound == 2e9);
    t = parse_ok("stdev < 5ms ");
    ASSERT(t.metric == BENCH_T_STDEV && t.bound == 5e6);
    t = parse_ok("rps>1000");
    ASSERT(t.metric == BENCH_T_RPS && t.cmp == BENCH_T_GT && t.bound == 1000);
    t = parse_ok("errors==0");
    ASSERT(t.metric == BENCH_T_ERRORS && t.cmp == BENCH_T_EQ && t.bound == 0);
    t = parse_ok("error_rate<1%");
    ASSERT(t.metric == BENCH_T_ERROR_RATE && t.bound == 1);
    t = parse_ok("error_rate <= 0.5");
    ASSERT(t.cmp == BENCH_T_LE && t.bound == 0.5);
    t = parse_ok("p50<250us");
    ASSERT(t.bound == 250e3);
    t = parse_ok("p50<250\xc2\xb5s"); /* µs */
    ASSERT(t.bound == 250e3);
    t = parse_ok("rps >= 1.5e3");
    ASSERT(t.cmp == BENCH_T_GE && t.bound == 1500);
}

static void refused(const char *text, const char *message)
{
    bench_threshold_t t;
    char err[256] = "";
    if (bench_threshold_parse(text, &t, err, sizeof err) == 0)
        MF_TEST_FAIL("'%s' accepted", text);
    ASSERT_STR_EQ(err, message);
}

TEST(refuses_bad_thresholds_naming_the_text)
{
    refused("p99<50", "--threshold 'p99<50': a latency needs a unit "
                      "(us, ms, s)");
    refused("p99<50xs", "--threshold 'p99<50xs': unknown unit 'xs' "
                        "(us, ms, s)");
    refused("latency<5ms", "--threshold 'latency<5ms': unknown metric "
                           "'latency' (pNN, mean, max, stdev, rps, errors, "
                           "error_rate, checks)");
    refused("p99 50ms", "--threshold 'p99 50ms': needs a comparison (<, <=, "
                        ">, >=, ==) after the metric");
    refused("p99=50ms", "--threshold 'p99=50ms': needs a comparison (<, <=, "
                        ">, >=, ==) after the metric");
    refused("p150<5ms", "--threshold 'p150<5ms': a percentile is p followed "
                        "by a number from 0 to 100 (p50, p99.9)");
    refused("p9x<5ms", "--threshold 'p9x<5ms': a percentile is p followed "
                       "by a number from 0 to 100 (p50, p99.9)");
    refused("p99<", "--threshold 'p99<': the bound is not a number of 0 or "
                    "more");
    refused("p99<-5ms", "--threshold 'p99<-5ms': the bound is not a number "
                        "of 0 or more");
    refused("rps>5ms", "--threshold 'rps>5ms': rps takes no unit ('ms')");
    refused("errors==1%", "--threshold 'errors==1%': errors takes no unit "
                          "('%')");
    refused("", "--threshold '': unknown metric '' (pNN, mean, max, stdev, "
                "rps, errors, error_rate, checks)");
}

static void add(bench_opts_t *o, const char *text)
{
    char err[256];
    ASSERT(bench_threshold_parse(text, &o->thresholds[o->nthresholds++], err,
                                 sizeof err) == 0);
}

TEST(check_prints_each_verdict_and_counts_failures)
{
    bench_opts_t o;
    fixture_opts(&o);
    bench_result_t *r = fixture_result(0);
    r->errors.status = 5;
    r->errors.timeout = 5;
    add(&o, "p99<50ms");
    add(&o, "p99.9 <= 10ms");
    add(&o, "mean<2ms");
    add(&o, "max<2s");
    add(&o, "rps>1000");
    add(&o, "errors==0");
    add(&o, "error_rate<1%");
    add(&o, "p50>=1ms");
    capture_t c;
    capture_open(&c);
    size_t failed = bench_thresholds_check(&o, r, c.f);
    const char *text = capture_close(&c);
    /* p99: rank 990 falls in 5 ms's slot [4980736, 5013503]; p99.9 in
     * 20 ms's [19922944, 20054015] */
    ASSERT_LINE(text, "threshold p99<50ms: ok (p99 5.01ms)");
    ASSERT_LINE(text, "threshold p99.9 <= 10ms: FAILED (p99.9 20.05ms)");
    ASSERT_LINE(text, "threshold mean<2ms: ok (mean 1.63ms)");
    ASSERT_LINE(text, "threshold max<2s: ok (max 100.00ms)");
    ASSERT_LINE(text, "threshold rps>1000: FAILED (rps 1000.00)");
    ASSERT_LINE(text, "threshold errors==0: FAILED (errors 10)");
    /* 10 failed of 1005 attempts (status errors are responses) */
    ASSERT_LINE(text, "threshold error_rate<1%: ok (error_rate 0.995%)");
    ASSERT_LINE(text, "threshold p50>=1ms: ok (p50 1.00ms)");
    ASSERT_EQ(failed, 3);
    free(c.text);
    for (size_t i = 0; i < o.nthresholds; i++)
        free(o.thresholds[i].text);
    bench_result_free(r);
}

TEST(error_rate_of_an_empty_run_is_zero)
{
    bench_result_t *r = bench_result_new("http", 0);
    ASSERT(bench_result_error_rate(r) == 0);
    r->errors.connect = 3;
    ASSERT(bench_result_error_rate(r) == 100);
    ASSERT_EQ(bench_result_errors(r), 3);
    bench_result_free(r);
}

/* checks: the share of bench.check's calls that passed, all names
 * together; a run with no check has no share and fails every bound. */
TEST(checks_threshold_is_the_share_passed)
{
    bench_threshold_t t = parse_ok("checks>=99%");
    ASSERT(t.metric == BENCH_T_CHECKS && t.cmp == BENCH_T_GE && t.bound == 99);
    bench_threshold_t bad;
    char err[256] = "";
    ASSERT_EQ(bench_threshold_parse("checks>1ms", &bad, err, sizeof err), -1);
    ASSERT_STR_EQ(err, "--threshold 'checks>1ms': checks (but %) takes no "
                       "unit ('ms')");
    bench_opts_t o;
    fixture_opts(&o);
    bench_result_t *r = bench_result_new("scenario", 0);
    add(&o, "checks>=99");
    add(&o, "checks<100");
    capture_t c;
    capture_open(&c);
    ASSERT_EQ(bench_thresholds_check(&o, r, c.f), 2); /* none ran */
    capture_close(&c);
    free(c.text);
    r->checks.n = 2;
    r->checks.items[0] = (bench_check_t){strdup("a"), 990, 0};
    r->checks.items[1] = (bench_check_t){strdup("b"), 5, 5};
    capture_open(&c);
    ASSERT_EQ(bench_thresholds_check(&o, r, c.f), 0);
    const char *text = capture_close(&c);
    ASSERT_LINE(text, "threshold checks>=99: ok (checks 99.5%)");
    free(c.text);
    for (size_t i = 0; i < o.nthresholds; i++)
        free(o.thresholds[i].text);
    bench_result_free(r); /* frees the names */
}
