/*
 * lua/bench/bench_report.c — the result of a run and its reports: wrk's text
 * (the layout of wrk 4.1.0 line for line, its units and paddings), wrk2's
 * percentile spectrum for --latency, a table of the series, and the JSON
 * document (--json).
 *
 * Units as wrk prints them: times with two decimals in us, ms, s or m
 * (switching at 85% of the next unit), rates in k/M/G/T, sizes in
 * K/M/G/T (1024s). Latencies are kept in ns; wrk works in us.
 *
 * The JSON document (version 1; fields are only ever added): version,
 * label (null without --label), mode ("http", "scenario"), urls, threads,
 * connections, duration_s (the measured window), rate (-R; 0: closed
 * loop), requests, bytes, requests_per_s, transfer_per_s (bytes/s),
 * errors {connect, read, write, status, timeout}, latency_us {min, mean,
 * stdev, max, percentiles {"50", "75", "90", "99", "99.9", "99.99"}},
 * spectrum [[value_us, percentile (0..100), count up to it], ...],
 * series [{name, count, errors, latency_us}], checks [{name, passes,
 * fails}] (bench_check.c), thresholds [{text, ok,
 * value (latencies in us, rps, errors, error_rate and checks in %)}].
 *
 * Owns: bench_result_t (its histograms, series and their names, the names
 * of its checks: bench_checks_free). Calls:
 * the histogram (hdr.h), bench_threshold_eval for the JSON verdicts.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

/* ---- the result ---------------------------------------------------- */

bench_result_t *bench_result_new(const char *mode, size_t nseries)
{
    bench_result_t *r = mf_xcalloc(1, sizeof *r);
    r->mode = mode;
    r->latency = mf_hdr_create();
    r->rate = mf_hdr_create();
    if (nseries > 0)
        r->series = mf_xcalloc(nseries, sizeof *r->series);
    r->nseries = nseries;
    for (size_t i = 0; i < nseries; i++)
        r->series[i].latency = mf_hdr_create();
    return r;
}

void bench_checks_free(bench_checks_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        mf_free(c->items[i].name);
    c->n = 0;
}

void bench_result_free(bench_result_t *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->nseries; i++) {
        free(r->series[i].name);
        mf_hdr_destroy(r->series[i].latency);
    }
    mf_free(r->series);
    bench_checks_free(&r->checks);
    mf_hdr_destroy(r->latency);
    mf_hdr_destroy(r->rate);
    mf_free(r);
}

/* ---- wrk's units ----------------------------------------------------- */

typedef struct unit_scale {
    double scale;
    const char *base;
    const char *units[5]; /* NULL-ended */
} unit_scale_t;

static const unit_scale_t time_us = {1000, "us", {"ms", NULL}};
static const unit_scale_t time_s = {60, "s", {"m", NULL}};
static const unit_scale_t binary = {1024, "", {"K", "M", "G", "T", NULL}};
static const unit_scale_t metric = {1000, "", {"k", "M", "G", "T", NULL}};

static void format_scaled(char *buf, size_t len, double n,
                          const unit_scale_t *u, int decimals)
{
    const char *unit = u->base;
    for (size_t i = 0; u->units[i] != NULL && n >= u->scale * 0.85; i++) {
        n /= u->scale;
        unit = u->units[i];
    }
    snprintf(buf, len, "%.*f%s", decimals, n, unit);
}

static void format_time_us(char *buf, size_t len, double us)
{
    if (us >= 1e6)
        format_scaled(buf, len, us / 1e6, &time_s, 2);
    else
        format_scaled(buf, len, us, &time_us, 2);
}

void bench_format_time_ns(char *buf, size_t len, double ns)
{
    format_time_us(buf, len, ns / 1e3);
}

static void format_metric(char *buf, size_t len, double n)
{
    format_scaled(buf, len, n, &metric, 2);
}

static bool isalpha_ascii(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* A field of width characters, its unit letters taking the padding. */
static void print_units(FILE *out, const char *text, int width)
{
    int n = (int)strlen(text), pad = 2;
    if (n > 0 && isalpha_ascii(text[n - 1]))
        pad--;
    if (n > 1 && isalpha_ascii(text[n - 2]))
        pad--;
    width -= pad;
    fprintf(out, "%*.*s%.*s", width, width, text, pad, "  ");
}

typedef void (*format_fn)(char *buf, size_t len, double n);

static void format_latency_us(char *buf, size_t len, double us)
{
    format_time_us(buf, len, us);
}

/* "    Latency   833.84us    1.47ms  12.98ms   86.10%" (h in unit). */
static void print_stats(FILE *out, const char *name, const mf_hdr_t *h,
                        double unit, format_fn fmt)
{
    char text[32];
    fprintf(out, "    %-10s", name);
    fmt(text, sizeof text, mf_hdr_mean(h) / unit);
    print_units(out, text, 8);
    fmt(text, sizeof text, mf_hdr_stdev(h) / unit);
    print_units(out, text, 10);
    fmt(text, sizeof text, (double)mf_hdr_max(h) / unit);
    print_units(out, text, 9);
    fprintf(out, "%8.2f%%\n", mf_hdr_within_stdev(h, 1));
}

/* ---- the spectrum ---------------------------------------------------- */

static double next_level(double level)
{
    double halvings = floor(log2(100.0 / (100.0 - level)));
    return level + 100.0 / (5.0 * pow(2.0, halvings + 1));
}

/* The rank (1..count) of level, as the histogram counts it. */
static uint64_t level_rank(uint64_t count, double level)
{
    double exact = level / 100.0 * (double)count;
    double rank = ceil(exact - exact * 1e-12);
    return rank < 1 ? 1 : (uint64_t)rank;
}

size_t bench_spectrum(const mf_hdr_t *h, bench_spectrum_point_t *points,
                      size_t max)
{
    uint64_t total = mf_hdr_count(h), seen = 0;
    mf_hdr_iter_t it = MF_HDR_ITER_INIT;
    size_t n = 0;
    if (total == 0 || max == 0)
        return 0;
    for (double level = 0; n + 1 < max; level = next_level(level)) {
        uint64_t rank = level_rank(total, level);
        if (level > 0 && rank >= total)
            break;
        while (seen < rank && mf_hdr_next(h, &it))
            seen += it.count;
        points[n].value_ns = level > 0 ? it.value : mf_hdr_min(h);
        points[n].percentile = level;
        points[n].count = seen;
        n++;
    }
    points[n].value_ns = mf_hdr_max(h);
    points[n].percentile = 100;
    points[n].count = total;
    return n + 1;
}

/* The magnitudes of the histogram (HdrHistogram's "buckets"). */
static int hdr_magnitudes(void)
{
    int bits = 64 - __builtin_clzll(MF_HDR_MAX);
    int half_bits = 64 - __builtin_clzll(MF_HDR_SUB_BUCKETS / 2 - 1);
    return bits - half_bits;
}

static void print_spectrum(FILE *out, const mf_hdr_t *h)
{
    bench_spectrum_point_t points[BENCH_SPECTRUM_MAX];
    size_t n = bench_spectrum(h, points, BENCH_SPECTRUM_MAX);
    fprintf(out, "\n  Detailed Percentile spectrum:\n");
    fprintf(out, "%12s %12s %12s %12s\n\n", "Value", "Percentile", "TotalCount",
            "1/(1-Percentile)");
    for (size_t i = 0; i < n; i++) {
        double q = points[i].percentile / 100.0;
        fprintf(out, "%12.3f %12f %12" PRIu64 " %12.2f\n",
                (double)points[i].value_ns / 1e6, q, points[i].count,
                q < 1 ? 1.0 / (1.0 - q) : INFINITY);
    }
    fprintf(out, "#[Mean    = %12.3f, StdDeviation   = %12.3f]\n",
            mf_hdr_mean(h) / 1e6, mf_hdr_stdev(h) / 1e6);
    fprintf(out, "#[Max     = %12.3f, Total count    = %12" PRIu64 "]\n",
            (double)mf_hdr_max(h) / 1e6, mf_hdr_count(h));
    fprintf(out, "#[Buckets = %12d, SubBuckets     = %12d]\n", hdr_magnitudes(),
            MF_HDR_SUB_BUCKETS);
    fprintf(out,
            "----------------------------------------------------------\n");
}

static void print_distribution(FILE *out, const mf_hdr_t *h)
{
    static const double levels[] = {50, 75, 90, 99};
    char text[32];
    fprintf(out, "  Latency Distribution\n");
    for (size_t i = 0; i < MF_ARRAY_SIZE(levels); i++) {
        fprintf(out, "%7.0f%%", levels[i]);
        bench_format_time_ns(text, sizeof text,
                             (double)mf_hdr_percentile(h, levels[i]));
        print_units(out, text, 10);
        fputc('\n', out);
    }
    print_spectrum(out, h);
}

/* ---- the text -------------------------------------------------------- */

void bench_report_header(FILE *out, const bench_opts_t *o)
{
    char duration[32];
    double seconds = (double)o->duration_ns / 1e9;
    if (seconds < 1)
        bench_format_time_ns(duration, sizeof duration, (double)o->duration_ns);
    else
        format_scaled(duration, sizeof duration, seconds, &time_s, 0);
    fprintf(out, "Running %s test @ ", duration);
    if (o->nurls == 0)
        fprintf(out, "%s\n", o->script ? o->script : "(no script)");
    for (size_t i = 0; i < o->nurls; i++)
        fprintf(out, "%s%s", o->urls[i], i + 1 < o->nurls ? ", " : "\n");
    fprintf(out, "  %u threads and %u connections\n", o->threads,
            o->connections);
}

static void print_errors(FILE *out, const bench_result_t *r)
{
    const mf_load_errors_t *e = &r->errors;
    bool scenario = r->mode && !strcmp(r->mode, "scenario");
    if (e->connect || e->read || e->write || e->timeout)
        fprintf(out,
                "  Socket errors: connect %" PRIu64 ", read %" PRIu64
                ", write %" PRIu64 ", timeout %" PRIu64 "\n",
                e->connect, e->read, e->write, e->timeout);
    if (e->status && scenario) /* failed steps and Lua errors */
        fprintf(out, "  Failed iterations: %" PRIu64 "\n", e->status);
    else if (e->status)
        fprintf(out, "  Non-2xx or 3xx responses: %" PRIu64 "\n", e->status);
}

static void print_totals(FILE *out, const bench_result_t *r)
{
    char runtime[32], bytes[32], rate[32];
    double seconds = (double)r->duration_ns / 1e9;
    bench_format_time_ns(runtime, sizeof runtime, (double)r->duration_ns);
    format_scaled(bytes, sizeof bytes, (double)r->bytes, &binary, 2);
    fprintf(out, "  %" PRIu64 " requests in %s, %sB read\n", r->requests,
            runtime, bytes);
    print_errors(out, r);
    double per_s = seconds > 0 ? (double)r->requests / seconds : 0;
    double bytes_per_s = seconds > 0 ? (double)r->bytes / seconds : 0;
    format_scaled(rate, sizeof rate, bytes_per_s, &binary, 2);
    fprintf(out, "Requests/sec: %9.2f\n", per_s);
    fprintf(out, "Transfer/sec: %10sB\n", rate);
}

/* name cut to fit width, a control character (a newline in a step's
 * name) as '?' so that each series keeps one line. */
static void series_name(char *buf, size_t len, const char *name)
{
    size_t n = 0;
    for (; name && name[n] && n + 1 < len; n++)
        buf[n] = (unsigned char)name[n] < 0x20 ? '?' : name[n];
    buf[n] = 0;
}

static void print_series(FILE *out, const bench_result_t *r)
{
    char name[41];
    int width = 6;
    for (size_t i = 0; i < r->nseries; i++) {
        series_name(name, sizeof name, r->series[i].name);
        width = (int)strlen(name) > width ? (int)strlen(name) : width;
    }
    fprintf(out, "  %-*s %10s %8s %9s %9s %9s %9s\n", width, "Series", "Count",
            "Errors", "p50", "p90", "p99", "Max");
    for (size_t i = 0; i < r->nseries; i++) {
        const bench_series_t *s = &r->series[i];
        static const double levels[] = {50, 90, 99, 100};
        char v[4][32];
        for (int k = 0; k < 4; k++) /* "-": no latency recorded */
            if (mf_hdr_count(s->latency) == 0)
                snprintf(v[k], sizeof v[k], "-");
            else
                bench_format_time_ns(
                    v[k], sizeof v[k],
                    (double)mf_hdr_percentile(s->latency, levels[k]));
        series_name(name, sizeof name, s->name);
        fprintf(out, "  %-*s %10" PRIu64 " %8" PRIu64 " %9s %9s %9s %9s\n",
                width, name, s->count, s->errors, v[0], v[1], v[2], v[3]);
    }
}

/* bench.check's checks: passes and fails per name, and the share passed
 * (k6's "checks" lines). */
static void print_checks(FILE *out, const bench_result_t *r)
{
    fprintf(out, "  Checks (passed / failed):\n");
    for (size_t i = 0; i < r->checks.n; i++) {
        const bench_check_t *k = &r->checks.items[i];
        uint64_t all = k->passes + k->fails;
        char name[64];
        series_name(name, sizeof name, k->name);
        fprintf(out,
                "    %-40s %10" PRIu64 " / %-10" PRIu64 " %7.2f%% passed\n",
                name, k->passes, k->fails,
                all ? 100.0 * (double)k->passes / (double)all : 0.0);
    }
}

void bench_report_text(FILE *out, const bench_opts_t *o,
                       const bench_result_t *r)
{
    fprintf(out, "  Thread Stats%6s%11s%8s%12s\n", "Avg", "Stdev", "Max",
            "+/- Stdev");
    print_stats(out, "Latency", r->latency, 1e3, format_latency_us);
    print_stats(out, "Req/Sec", r->rate, 1, format_metric);
    if (o->latency)
        print_distribution(out, r->latency);
    print_totals(out, r);
    if (r->nseries > 0)
        print_series(out, r);
    if (r->checks.n > 0)
        print_checks(out, r);
}

/* ---- JSON -------------------------------------------------------------- */

static void json_string(FILE *out, const char *s)
{
    if (s == NULL) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

/* A number with decimals digits; null when it is not finite. */
static void json_number(FILE *out, double v, int decimals)
{
    if (isfinite(v))
        fprintf(out, "%.*f", decimals, v);
    else
        fputs("null", out);
}

static void json_latency(FILE *out, const mf_hdr_t *h)
{
    static const char *const names[] = {"50", "75",   "90",
                                        "99", "99.9", "99.99"};
    fprintf(out, "{\"min\":");
    json_number(out, (double)mf_hdr_min(h) / 1e3, 3);
    fprintf(out, ",\"mean\":");
    json_number(out, mf_hdr_mean(h) / 1e3, 3);
    fprintf(out, ",\"stdev\":");
    json_number(out, mf_hdr_stdev(h) / 1e3, 3);
    fprintf(out, ",\"max\":");
    json_number(out, (double)mf_hdr_max(h) / 1e3, 3);
    fprintf(out, ",\"percentiles\":{");
    for (size_t i = 0; i < MF_ARRAY_SIZE(names); i++) {
        fprintf(out, "%s\"%s\":", i ? "," : "", names[i]);
        json_number(out, (double)mf_hdr_percentile(h, atof(names[i])) / 1e3, 3);
    }
    fprintf(out, "}}");
}

static void json_run(FILE *out, const bench_opts_t *o, const bench_result_t *r)
{
    double seconds = (double)r->duration_ns / 1e9;
    fprintf(out, "{\"version\":1,\n\"label\":");
    json_string(out, o->label);
    fprintf(out, ",\n\"mode\":");
    json_string(out, r->mode);
    fprintf(out, ",\n\"urls\":[");
    for (size_t i = 0; i < o->nurls; i++) {
        fputs(i ? "," : "", out);
        json_string(out, o->urls[i]);
    }
    fprintf(out,
            "],\n\"threads\":%u,\"connections\":%u,\"duration_s\":", o->threads,
            o->connections);
    json_number(out, seconds, 6);
    fprintf(out, ",\"rate\":");
    json_number(out, o->rate, 3);
    fprintf(out,
            ",\n\"requests\":%" PRIu64 ",\"bytes\":%" PRIu64
            ",\"requests_per_s\":",
            r->requests, r->bytes);
    json_number(out, seconds > 0 ? (double)r->requests / seconds : 0, 2);
    fprintf(out, ",\"transfer_per_s\":");
    json_number(out, seconds > 0 ? (double)r->bytes / seconds : 0, 2);
    const mf_load_errors_t *e = &r->errors;
    fprintf(out,
            ",\n\"errors\":{\"connect\":%" PRIu64 ",\"read\":%" PRIu64
            ",\"write\":%" PRIu64 ",\"status\":%" PRIu64 ",\"timeout\":%" PRIu64
            "},\n\"latency_us\":",
            e->connect, e->read, e->write, e->status, e->timeout);
    json_latency(out, r->latency);
}

static void json_spectrum(FILE *out, const mf_hdr_t *h)
{
    bench_spectrum_point_t points[BENCH_SPECTRUM_MAX];
    size_t n = bench_spectrum(h, points, BENCH_SPECTRUM_MAX);
    fprintf(out, ",\n\"spectrum\":[");
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "%s[", i ? ",\n " : "");
        json_number(out, (double)points[i].value_ns / 1e3, 3);
        fprintf(out, ",");
        json_number(out, points[i].percentile, 6);
        fprintf(out, ",%" PRIu64 "]", points[i].count);
    }
    fprintf(out, "]");
}

static void json_series(FILE *out, const bench_result_t *r)
{
    fprintf(out, ",\n\"series\":[");
    for (size_t i = 0; i < r->nseries; i++) {
        const bench_series_t *s = &r->series[i];
        fprintf(out, "%s{\"name\":", i ? ",\n " : "");
        json_string(out, s->name);
        fprintf(out,
                ",\"count\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"latency_us\":",
                s->count, s->errors);
        json_latency(out, s->latency);
        fputc('}', out);
    }
    fprintf(out, "]");
}

/* bench.check's counts: [{name, passes, fails}]. */
static void json_checks(FILE *out, const bench_result_t *r)
{
    fprintf(out, ",\n\"checks\":[");
    for (size_t i = 0; i < r->checks.n; i++) {
        const bench_check_t *k = &r->checks.items[i];
        fprintf(out, "%s{\"name\":", i ? ",\n " : "");
        json_string(out, k->name);
        fprintf(out, ",\"passes\":%" PRIu64 ",\"fails\":%" PRIu64 "}",
                k->passes, k->fails);
    }
    fputc(']', out);
}

/* Each threshold's verdict; value in the metric's unit (latencies in us,
 * as everywhere in the document). */
static void json_thresholds(FILE *out, const bench_opts_t *o,
                            const bench_result_t *r)
{
    fprintf(out, ",\n\"thresholds\":[");
    for (size_t i = 0; i < o->nthresholds; i++) {
        const bench_threshold_t *t = &o->thresholds[i];
        double v;
        bool ok = bench_threshold_eval(t, r, &v);
        bool latency = t->metric == BENCH_T_PERCENTILE ||
                       t->metric == BENCH_T_MEAN || t->metric == BENCH_T_MAX ||
                       t->metric == BENCH_T_STDEV;
        fprintf(out, "%s{\"text\":", i ? ",\n " : "");
        json_string(out, t->text);
        fprintf(out, ",\"ok\":%s,\"value\":", ok ? "true" : "false");
        json_number(out, latency ? v / 1e3 : v, 3);
        fputc('}', out);
    }
    fprintf(out, "]}\n");
}

/* The directory part of path, in buf ("." for a bare name). */
static const char *dir_of(const char *path, char *buf, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return ".";
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= len)
        n = len - 1;
    memcpy(buf, path, n);
    buf[n] = 0;
    return buf;
}

int bench_output_writable(const char *flag, const char *path, bool dir_too,
                          char *err, size_t errlen)
{
    struct stat st;
    char buf[4096];
    const char *dir = dir_of(path, buf, sizeof buf);
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s %s: is a directory", flag, path);
            return -1;
        }
        if (access(path, W_OK) != 0) {
            snprintf(err, errlen, "%s %s: cannot write it: %s", flag, path,
                     strerror(errno));
            return -1;
        }
        if (!dir_too)
            return 0;
    } else if (errno != ENOENT) {
        snprintf(err, errlen, "%s %s: %s", flag, path, strerror(errno));
        return -1;
    }
    const char *why = NULL;
    if (stat(dir, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "not a directory";
    else if (access(dir, W_OK | X_OK) != 0)
        why = strerror(errno);
    if (why)
        snprintf(err, errlen, "%s %s: cannot create files in %s: %s", flag,
                 path, dir, why);
    return why ? -1 : 0;
}

int bench_report_json(const char *path, const bench_opts_t *o,
                      const bench_result_t *r)
{
    bool to_stdout = strcmp(path, "-") == 0;
    FILE *out = to_stdout ? stdout : fopen(path, "w");
    if (out == NULL)
        return -1;
    json_run(out, o, r);
    json_spectrum(out, r->latency);
    json_series(out, r);
    json_checks(out, r);
    json_thresholds(out, o, r);
    int failed = fflush(out) != 0 || ferror(out);
    int saved = errno;
    if (!to_stdout && fclose(out) != 0 && !failed) {
        failed = 1;
        saved = errno;
    }
    if (failed)
        errno = saved ? saved : EIO;
    return failed ? -1 : 0;
}
