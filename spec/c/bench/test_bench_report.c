/*
 * test_bench_report.c — the report of a result of known values: wrk's
 * text line for line, wrk2's spectrum, the series table, and the JSON
 * document read back by Python's json module.
 */
#include <errno.h>

#include "bench_fixture.h"

static char *report(const bench_opts_t *o, const bench_result_t *r)
{
    capture_t c;
    capture_open(&c);
    bench_report_text(c.f, o, r);
    return (char *)capture_close(&c);
}

TEST(text_has_wrk_layout)
{
    bench_opts_t o;
    fixture_opts(&o);
    bench_result_t *r = fixture_result(0);
    char *text = report(&o, r);
    ASSERT_STR_EQ(text, "  Thread Stats   Avg      Stdev     Max   +/- Stdev\n"
                        "    Latency     1.63ms    3.75ms 100.00ms   99.00%\n"
                        "    Req/Sec     1.45k   287.20     1.90k    60.00%\n"
                        "  1000 requests in 1.00s, 120.56KB read\n"
                        "Requests/sec:   1000.00\n"
                        "Transfer/sec:    120.56KB\n");
    free(text);
    bench_result_free(r);
}

TEST(rates_in_thousands_keep_wrk_columns)
{
    bench_opts_t o;
    fixture_opts(&o);
    bench_result_t *r = fixture_result(0);
    mf_hdr_reset(r->rate);
    mf_hdr_record(r->rate, 20000);
    mf_hdr_record(r->rate, 30000);
    mf_hdr_reset(r->latency);
    mf_hdr_record(r->latency, 833840);
    char *text = report(&o, r);
    /* the columns of wrk's "    Req/Sec    24.92k    11.71k   55.26k
     * 80.95%"; the stdev from the slots' midpoints within [min, max]:
     * 20031.5 and 30000 */
    ASSERT_LINE(text, "    Req/Sec    25.00k     4.98k   30.00k    50.00%");
    ASSERT_LINE(text, "    Latency   833.84us    0.00us 833.84us  100.00%");
    free(text);
    bench_result_free(r);
}

TEST(header_names_duration_urls_threads_and_connections)
{
    bench_opts_t o;
    fixture_opts(&o);
    capture_t c;
    capture_open(&c);
    bench_report_header(c.f, &o);
    o.duration_ns = UINT64_C(60000000000);
    o.urls[1] = "http://127.0.0.1:8080/b";
    o.nurls = 2;
    bench_report_header(c.f, &o);
    char *text = (char *)capture_close(&c);
    ASSERT_STR_EQ(text, "Running 10s test @ http://127.0.0.1:8080/\n"
                        "  2 threads and 10 connections\n"
                        "Running 1m test @ http://127.0.0.1:8080/, "
                        "http://127.0.0.1:8080/b\n"
                        "  2 threads and 10 connections\n");
    free(text);
}

static void time_is(double ns, const char *want)
{
    char buf[32];
    bench_format_time_ns(buf, sizeof buf, ns);
    ASSERT_STR_EQ(buf, want);
}

TEST(times_take_wrk_units)
{
    time_is(0, "0.00us");
    time_is(849000, "849.00us");
    time_is(850000, "0.85ms"); /* wrk moves up at 85% of the next unit */
    time_is(12310000, "12.31ms");
    time_is(999999000, "1000.00ms");
    time_is(1.5e9, "1.50s");
    time_is(90e9, "1.50m");
}

TEST(errors_are_printed_only_when_any)
{
    bench_opts_t o;
    fixture_opts(&o);
    bench_result_t *r = fixture_result(0);
    r->errors.timeout = 4;
    r->errors.read = 1;
    char *text = report(&o, r);
    ASSERT_LINE(text, "  Socket errors: connect 0, read 1, write 0, "
                      "timeout 4");
    ASSERT(strstr(text, "Non-2xx") == NULL);
    free(text);
    r->errors = (mf_load_errors_t){0};
    r->errors.status = 7;
    text = report(&o, r);
    ASSERT_LINE(text, "  Non-2xx or 3xx responses: 7");
    ASSERT(strstr(text, "Socket errors") == NULL);
    free(text);
    bench_result_free(r);
}

TEST(latency_flag_adds_distribution_and_spectrum)
{
    bench_opts_t o;
    fixture_opts(&o);
    o.latency = true;
    bench_result_t *r = fixture_result(0);
    char *text = report(&o, r);
    ASSERT_LINE(text, "  Latency Distribution");
    ASSERT_LINE(text, "     50%    1.00ms");
    ASSERT_LINE(text, "     99%    5.01ms");
    ASSERT_LINE(text, "  Detailed Percentile spectrum:");
    ASSERT_LINE(text, "       Value   Percentile   TotalCount "
                      "1/(1-Percentile)");
    ASSERT_LINE(text, "       1.000     0.000000          900         1.00");
    ASSERT_LINE(text, "       5.014     0.912500          990        11.43");
    ASSERT_LINE(text, "     100.000     1.000000         1000          inf");
    ASSERT_LINE(text, "#[Mean    =        1.630, StdDeviation   =        "
                      "3.750]");
    ASSERT_LINE(text, "#[Max     =      100.000, Total count    =         "
                      "1000]");
    ASSERT_LINE(text, "#[Buckets =           37, SubBuckets     =          "
                      "256]");
    /* wrk's totals follow the spectrum */
    ASSERT(strstr(text, "----\n  1000 requests in 1.00s") != NULL);
    free(text);
    bench_result_free(r);
}

TEST(spectrum_levels_halve_the_distance_to_100)
{
    static const double want[] = {0,  10, 20, 30, 40,   50, 55,
                                  60, 65, 70, 75, 77.5, 80, 82.5};
    bench_result_t *r = bench_result_new("http", 0);
    for (uint64_t v = 1; v <= 100000; v++)
        mf_hdr_record(r->latency, v * 1000);
    bench_spectrum_point_t points[BENCH_SPECTRUM_MAX];
    size_t n = bench_spectrum(r->latency, points, BENCH_SPECTRUM_MAX);
    /* 6 levels to 50%, then 5 per halving: 17 halvings to 1 in 10^5 */
    ASSERT(n > 80 && n < 100);
    for (size_t i = 0; i < MF_ARRAY_SIZE(want); i++)
        ASSERT(points[i].percentile == want[i]);
    for (size_t i = 1; i < n; i++) {
        ASSERT(points[i].percentile > points[i - 1].percentile);
        ASSERT(points[i].value_ns >= points[i - 1].value_ns);
        ASSERT(points[i].count >= points[i - 1].count);
        /* each point's count reaches its level */
        ASSERT(points[i].count >= points[i].percentile * 1000 - 1e-6);
    }
    ASSERT(points[n - 1].percentile == 100);
    ASSERT(points[n - 1].value_ns == 100000000);
    ASSERT(points[n - 1].count == 100000);
    ASSERT_EQ(bench_spectrum(r->latency, points, 3), 3); /* bounded */
    ASSERT(points[2].percentile == 100);
    mf_hdr_reset(r->latency);
    ASSERT_EQ(bench_spectrum(r->latency, points, BENCH_SPECTRUM_MAX), 0);
    bench_result_free(r);
}

static bench_result_t *with_series(void)
{
    bench_result_t *r = fixture_result(2);
    r->series[0].name = strdup("1 redis GET");
    r->series[0].count = 10;
    r->series[0].errors = 2;
    mf_hdr_record_n(r->series[0].latency, 300000, 10);
    r->series[1].name = strdup("2 http \"slow\"\n");
    return r;
}

TEST(series_table_follows_the_totals)
{
    bench_opts_t o;
    fixture_opts(&o);
    bench_result_t *r = with_series();
    char *text = report(&o, r);
    ASSERT(strstr(text, "Transfer/sec:    120.56KB\n  Series ") != NULL);
    ASSERT_LINE(text, "  Series              Count   Errors       p50 "
                      "      p90       p99       Max");
    ASSERT_LINE(text, "  1 redis GET            10        2  300.00us "
                      " 300.00us  300.00us  300.00us");
    /* a control character in a name stays on its line */
    ASSERT_LINE(text, "  2 http \"slow\"?          0        0         - "
                      "        -         -         -");
    free(text);
    bench_result_free(r);
}

static const char json_check[] =
    "import json, sys\n"
    "d = json.load(open(sys.argv[1]))\n"
    "assert d['version'] == 1 and d['mode'] == 'http', d\n"
    "assert d['label'] == 'a \"b\"\\\\\\n\\u00e9', d['label']\n"
    "assert d['urls'] == ['http://127.0.0.1:8080/']\n"
    "assert (d['threads'], d['connections']) == (2, 10)\n"
    "assert d['duration_s'] == 1 and d['rate'] == 0\n"
    "assert (d['requests'], d['bytes']) == (1000, 123456)\n"
    "assert d['requests_per_s'] == 1000 and d['transfer_per_s'] == 123456\n"
    "assert d['errors'] == {'connect': 1, 'read': 0, 'write': 0,\n"
    "                       'status': 2, 'timeout': 0}, d['errors']\n"
    "l = d['latency_us']\n"
    "assert (l['min'], l['mean'], l['max']) == (1000, 1630, 100000), l\n"
    "assert abs(l['stdev'] - 3749.889) < 0.01, l\n"
    "p = l['percentiles']\n"
    "assert list(p) == ['50', '75', '90', '99', '99.9', '99.99'], p\n"
    "assert (p['50'], p['99'], p['99.9']) == (1003.519, 5013.503, 20054.015)\n"
    "s = d['spectrum']\n"
    "assert s[0] == [1000, 0, 900] and s[-1] == [100000, 100, 1000], s\n"
    "assert [x[1] for x in s[:7]] == [0, 10, 20, 30, 40, 50, 55]\n"
    "assert [x['name'] for x in d['series']] == ['1 redis GET',\n"
    "                                            '2 http \"slow\"\\n']\n"
    "assert d['series'][0]['count'] == 10 and d['series'][0]['errors'] == 2\n"
    "assert d['series'][0]['latency_us']['percentiles']['99'] == 300\n"
    "t = d['thresholds']\n"
    "assert t == [{'text': 'p99<50ms', 'ok': True, 'value': 5013.503},\n"
    "             {'text': 'rps>2000', 'ok': False, 'value': 1000}], t\n";

TEST(json_document_reads_back)
{
    bench_opts_t o;
    fixture_opts(&o);
    o.label = "a \"b\"\\\n\xc3\xa9";
    char err[256];
    ASSERT(bench_threshold_parse("p99<50ms", &o.thresholds[0], err,
                                 sizeof err) == 0);
    ASSERT(bench_threshold_parse("rps>2000", &o.thresholds[1], err,
                                 sizeof err) == 0);
    o.nthresholds = 2;
    bench_result_t *r = with_series();
    r->errors.connect = 1;
    r->errors.status = 2;
    char dir[64], path[128];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.json", dir);
    ASSERT_EQ(bench_report_json(path, &o, r), 0);
    ASSERT_EQ(run_python(dir, json_check, path, ""), 0);
    snprintf(path, sizeof path, "%s/missing/run.json", dir);
    errno = 0;
    ASSERT_EQ(bench_report_json(path, &o, r), -1);
    ASSERT_EQ(errno, ENOENT);
    tmpdir_remove(dir);
    free(o.thresholds[0].text);
    free(o.thresholds[1].text);
    bench_result_free(r);
}
