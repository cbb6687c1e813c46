/*
 * lua/bench/bench_threshold.c — --threshold 'p99<50ms': parsing a check and
 * judging a result against it, for the exit code and the report.
 *
 * Syntax: METRIC CMP NUMBER[UNIT], spaces allowed between the parts.
 * METRIC is pNN[.N] (a latency percentile), mean, max, stdev (latencies:
 * the bound takes us, µs, ms or s), rps (requests/s), errors (a count),
 * error_rate (a share in %, the '%' optional) or checks (the share of a
 * scenario's bench.check checks that passed, in %; none ran: no number, so
 * every comparison fails); CMP is <, <=, >, >= or ==.
 *
 * Owns: the text of each threshold it parses (malloc'd; bench_opts_free
 * frees it). Calls: the histogram (hdr.h), bench_format_time_ns.
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const struct {
    const char *name;
    int metric;
} metric_names[] = {
    {"mean", BENCH_T_MEAN},     {"max", BENCH_T_MAX},
    {"stdev", BENCH_T_STDEV},   {"rps", BENCH_T_RPS},
    {"errors", BENCH_T_ERRORS}, {"error_rate", BENCH_T_ERROR_RATE},
    {"checks", BENCH_T_CHECKS},
};

static const char *skip_space(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

static bool is_latency(int metric)
{
    return metric == BENCH_T_PERCENTILE || metric == BENCH_T_MEAN ||
           metric == BENCH_T_MAX || metric == BENCH_T_STDEV;
}

/* The metric at *s (its end in *s): 0, or -1 with a message. */
static int parse_metric(const char **s, bench_threshold_t *t, const char *text,
                        char *err, size_t errlen)
{
    const char *p = *s, *end = p;
    while (isalnum((unsigned char)*end) || *end == '_' || *end == '.')
        end++;
    size_t n = (size_t)(end - p);
    if (n > 1 && p[0] == 'p' && (isdigit((unsigned char)p[1]) || p[1] == '.')) {
        char *num_end;
        t->metric = BENCH_T_PERCENTILE;
        t->percentile = strtod(p + 1, &num_end);
        if (num_end != end || !(t->percentile >= 0 && t->percentile <= 100)) {
            snprintf(err, errlen,
                     "--threshold '%s': a percentile is p followed by a number "
                     "from 0 to 100 (p50, p99.9)",
                     text);
            return -1;
        }
        *s = end;
        return 0;
    }
    for (size_t i = 0; i < MF_ARRAY_SIZE(metric_names); i++)
        if (strlen(metric_names[i].name) == n &&
            memcmp(metric_names[i].name, p, n) == 0) {
            t->metric = metric_names[i].metric;
            *s = end;
            return 0;
        }
    snprintf(err, errlen,
             "--threshold '%s': unknown metric '%.*s' (pNN, mean, max, "
             "stdev, rps, errors, error_rate, checks)",
             text, (int)n, p);
    return -1;
}

static int parse_cmp(const char **s, bench_threshold_t *t)
{
    const char *p = *s;
    if (p[0] == '=' && p[1] == '=') {
        t->cmp = BENCH_T_EQ;
        *s = p + 2;
        return 0;
    }
    if (p[0] != '<' && p[0] != '>')
        return -1;
    bool eq = p[1] == '=';
    t->cmp = p[0] == '<' ? (eq ? BENCH_T_LE : BENCH_T_LT)
                         : (eq ? BENCH_T_GE : BENCH_T_GT);
    *s = p + 1 + eq;
    return 0;
}

/* The nanoseconds in one unit, 0 when unit is not one. */
static double unit_ns(const char *unit)
{
    if (strcmp(unit, "us") == 0 || strcmp(unit, "\xc2\xb5s") == 0)
        return 1e3;
    if (strcmp(unit, "ms") == 0)
        return 1e6;
    if (strcmp(unit, "s") == 0)
        return 1e9;
    return 0;
}

/* The bound's unit (unit: the rest of the text, spaces trimmed). */
static int apply_unit(bench_threshold_t *t, const char *unit, const char *text,
                      char *err, size_t errlen)
{
    if (is_latency(t->metric)) {
        double scale = unit_ns(unit);
        if (*unit == 0) {
            snprintf(err, errlen,
                     "--threshold '%s': a latency needs a unit (us, ms, s)",
                     text);
            return -1;
        }
        if (scale == 0) {
            snprintf(err, errlen,
                     "--threshold '%s': unknown unit '%s' (us, ms, s)", text,
                     unit);
            return -1;
        }
        t->bound *= scale;
        return 0;
    }
    bool share = t->metric == BENCH_T_ERROR_RATE || t->metric == BENCH_T_CHECKS;
    if (*unit == 0 || (share && !strcmp(unit, "%")))
        return 0;
    snprintf(err, errlen, "--threshold '%s': %s takes no unit ('%s')", text,
             t->metric == BENCH_T_RPS      ? "rps"
             : t->metric == BENCH_T_ERRORS ? "errors"
             : t->metric == BENCH_T_CHECKS ? "checks (but %)"
                                           : "error_rate (but %)",
             unit);
    return -1;
}

static int parse_bound(const char *s, bench_threshold_t *t, const char *text,
                       char *err, size_t errlen)
{
    char *end, unit[16];
    t->bound = strtod(s, &end);
    if (end == s || !isfinite(t->bound) || t->bound < 0 || *s == '-') {
        snprintf(err, errlen,
                 "--threshold '%s': the bound is not a number of 0 or more",
                 text);
        return -1;
    }
    const char *u = skip_space(end);
    size_t n = strlen(u);
    while (n > 0 && (u[n - 1] == ' ' || u[n - 1] == '\t'))
        n--;
    if (n >= sizeof unit) {
        snprintf(err, errlen, "--threshold '%s': unknown unit '%s'", text, u);
        return -1;
    }
    memcpy(unit, u, n);
    unit[n] = 0;
    return apply_unit(t, unit, text, err, errlen);
}

int bench_threshold_parse(const char *text, bench_threshold_t *t, char *err,
                          size_t errlen)
{
    memset(t, 0, sizeof *t);
    const char *s = skip_space(text);
    if (parse_metric(&s, t, text, err, errlen) != 0)
        return -1;
    s = skip_space(s);
    if (parse_cmp(&s, t) != 0) {
        snprintf(err, errlen,
                 "--threshold '%s': needs a comparison (<, <=, >, >=, ==) "
                 "after the metric",
                 text);
        return -1;
    }
    if (parse_bound(skip_space(s), t, text, err, errlen) != 0)
        return -1;
    t->text = strdup(text);
    if (t->text == NULL) {
        snprintf(err, errlen, "--threshold '%s': out of memory", text);
        return -1;
    }
    return 0;
}

uint64_t bench_result_errors(const bench_result_t *r)
{
    const mf_load_errors_t *e = &r->errors;
    return e->connect + e->read + e->write + e->timeout + e->status;
}

double bench_result_error_rate(const bench_result_t *r)
{
    const mf_load_errors_t *e = &r->errors;
    uint64_t attempts =
        r->requests + e->connect + e->read + e->write + e->timeout;
    if (attempts == 0)
        return 0;
    return 100.0 * (double)bench_result_errors(r) / (double)attempts;
}

/* The share of check calls that passed, in %; NaN when none ran. */
static double checks_passed(const bench_result_t *r)
{
    uint64_t passes = 0, all = 0;
    for (size_t i = 0; i < r->checks.n; i++) {
        passes += r->checks.items[i].passes;
        all += r->checks.items[i].passes + r->checks.items[i].fails;
    }
    return all ? 100.0 * (double)passes / (double)all : NAN;
}

static double metric_value(const bench_threshold_t *t, const bench_result_t *r)
{
    switch (t->metric) {
    case BENCH_T_PERCENTILE:
        return (double)mf_hdr_percentile(r->latency, t->percentile);
    case BENCH_T_MEAN:
        return mf_hdr_mean(r->latency);
    case BENCH_T_MAX:
        return (double)mf_hdr_max(r->latency);
    case BENCH_T_STDEV:
        return mf_hdr_stdev(r->latency);
    case BENCH_T_RPS:
        return r->duration_ns
                   ? (double)r->requests * 1e9 / (double)r->duration_ns
                   : 0;
    case BENCH_T_ERRORS:
        return (double)bench_result_errors(r);
    case BENCH_T_CHECKS:
        return checks_passed(r);
    default:
        return bench_result_error_rate(r);
    }
}

bool bench_threshold_eval(const bench_threshold_t *t, const bench_result_t *r,
                          double *value)
{
    double v = metric_value(t, r);
    *value = v;
    switch (t->cmp) {
    case BENCH_T_LT:
        return v < t->bound;
    case BENCH_T_LE:
        return v <= t->bound;
    case BENCH_T_GT:
        return v > t->bound;
    case BENCH_T_GE:
        return v >= t->bound;
    default:
        return v == t->bound;
    }
}

/* "p99 12.31ms", "rps 1523.40", "errors 3", "error_rate 0.25%". */
static void describe(const bench_threshold_t *t, double v, char *buf,
                     size_t len)
{
    char num[32];
    const char *name = t->metric == BENCH_T_MEAN     ? "mean"
                       : t->metric == BENCH_T_MAX    ? "max"
                       : t->metric == BENCH_T_STDEV  ? "stdev"
                       : t->metric == BENCH_T_RPS    ? "rps"
                       : t->metric == BENCH_T_ERRORS ? "errors"
                       : t->metric == BENCH_T_CHECKS ? "checks"
                                                     : "error_rate";
    if (t->metric == BENCH_T_PERCENTILE) {
        snprintf(num, sizeof num, "p%g", t->percentile);
        name = num;
    }
    char value[32];
    if (is_latency(t->metric))
        bench_format_time_ns(value, sizeof value, v);
    else if (t->metric == BENCH_T_ERRORS)
        snprintf(value, sizeof value, "%.0f", v);
    else if (t->metric == BENCH_T_RPS)
        snprintf(value, sizeof value, "%.2f", v);
    else /* enough digits to tell 0.995% from 1% */
        snprintf(value, sizeof value, "%.4g%%", v);
    snprintf(buf, len, "%s %s", name, value);
}

size_t bench_thresholds_check(const bench_opts_t *o, const bench_result_t *r,
                              FILE *out)
{
    size_t failed = 0;
    for (size_t i = 0; i < o->nthresholds; i++) {
        const bench_threshold_t *t = &o->thresholds[i];
        double v;
        bool ok = bench_threshold_eval(t, r, &v);
        char what[64];
        describe(t, v, what, sizeof what);
        fprintf(out, "threshold %s: %s (%s)\n", t->text, ok ? "ok" : "FAILED",
                what);
        failed += !ok;
    }
    return failed;
}
