/*
 * lua/bench/bench_cli.c — `moonflow bench` flags into bench_opts_t: wrk's flags
 * (-c -d -t -s -H --latency --timeout, "-- args" for init), wrk2's -R, and
 * ours (--json --plot --label --warmup --no-keepalive --requests-per-conn
 * --threshold --progress/--no-progress, several URLs), and --help.
 *
 * Every value is checked here, at start, and refused with a message naming
 * the flag; nothing is clamped or dropped silently. Owns bench_opts_t's
 * strings (bench_opts_free). May call: bench_threshold_parse
 * (bench_threshold.c) for --threshold, and libc.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moonflow/common.h>

#include "bench.h"
#include "bench_url.h"

#define MAX_THREADS 1024
#define MAX_CONNECTIONS 1000000
#define NS_PER_S 1000000000.0

const char bench_usage[] =
    "usage: moonflow bench [OPTIONS] URL... [-- SCRIPT ARGS]\n"
    "       moonflow bench [OPTIONS] [-s] SCENARIO.lua [-- SCRIPT ARGS]\n"
    "\n"
    "Load-tests HTTP URLs with wrk's flags, output and Lua scripts; with -R\n"
    "at a constant rate (wrk2: latency counted from each request's due\n"
    "time); or runs a scenario script (one defining iteration(ctx)) that\n"
    "loads Redis, MySQL, Kafka or HTTP with moonflow's task API.\n"
    "\n"
    "wrk's options:\n"
    "  -c, --connections N   connections (scenario: virtual users) in all,\n"
    "                        spread over the threads (default 10; at least\n"
    "                        the threads, at most 1000000; 1k = 1000)\n"
    "  -d, --duration T      duration of the measured run (default 10s)\n"
    "  -t, --threads N       threads, each its own event loop (default 2;\n"
    "                        1..1024)\n"
    "  -s, --script FILE     a wrk Lua script (setup, init, request,\n"
    "                        response, delay, done) or a scenario\n"
    "  -H, --header \"K: V\"   a header for every request (repeatable)\n"
    "  -L, --latency         print the latency percentile spectrum\n"
    "  -T, --timeout T       a response not complete in T is a timeout\n"
    "                        error (default 2s)\n"
    "  -v, --version         print the version\n"
    "moonflow's options:\n"
    "  -R, --rate N          constant rate: N requests (iterations) per\n"
    "                        second in all, free of coordinated omission\n"
    "      --warmup T        send load for T first, not measured\n"
    "      --no-keepalive    one request per connection (Connection: close)\n"
    "      --requests-per-conn N  reconnect after N requests\n"
    "      --threshold EXPR  a check on the result that fails the run (exit\n"
    "                        99): p99<50ms, p99.9<=200ms, mean<10ms,\n"
    "                        max<1s, stdev<5ms, rps>=1000, errors==0,\n"
    "                        error_rate<1 (%), checks>99 (%); repeatable\n"
    "      --json FILE       write the result as JSON (\"-\": stdout, with\n"
    "                        the report on stderr)\n"
    "      --plot FILE.svg   add this run's latency by percentile to FILE\n"
    "                        (runs already in it are kept)\n"
    "      --label NAME      this run's name in JSON and the plot\n"
    "      --progress        a live line on stderr (default: when stderr is\n"
    "      --no-progress     a terminal)\n"
    "  -h, --help            this help\n"
    "\n"
    "T is a number and a unit: 500ms, 10s, 2m, 1h (us ms s m h; a bare\n"
    "number is seconds, as wrk). Several URLs share the connections round\n"
    "robin and are reported one by one. Arguments after \"--\" reach the\n"
    "script's init(args) as args[1]...; args[0] is the first URL.\n"
    "\n"
    "Exit code: 0 done, 1 the run could not be made or nothing succeeded,\n"
    "2 bad flags or an output path that cannot be written (both checked\n"
    "before the run), 99 a threshold failed.\n"
    "\n"
    "Examples:\n"
    "  # wrk's first command, as is\n"
    "  moonflow bench -t2 -c100 -d30s --latency http://127.0.0.1:8080/\n"
    "  # 20000 requests/s for a minute; exit 99 if p99 or errors go over\n"
    "  moonflow bench -t4 -c200 -d1m -R 20000 --threshold 'p99<20ms' \\\n"
    "      --threshold 'error_rate<0.1' --json run.json --plot runs.svg \\\n"
    "      --label v2 http://127.0.0.1:8080/api\n"
    "  # a wrk script with arguments for its init(args)\n"
    "  moonflow bench -c10 -d10s -s ids.lua http://127.0.0.1:8080/ -- 1000\n"
    "  # a scenario: Redis GETs, 16 pipelined, from 50 virtual users\n"
    "  moonflow bench -t1 -c50 -d20s bench/load/redis_get.lua \\\n"
    "      -- redis://127.0.0.1:6379 16\n";

/* ---- values ---------------------------------------------------------- */

/* Copies of flag values: small, so out of memory aborts (mf_xmalloc);
 * freed with free() by bench_opts_free. */
static char *copy_strn(const char *s, size_t n)
{
    char *d = mf_xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static char *copy_str(const char *s)
{
    return copy_strn(s, strlen(s));
}

/* wrk's metric suffixes: 1k = 1000, 1M, 1G. */
static int parse_count(const char *s, uint64_t *out)
{
    char *end;
    if (!isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    uint64_t scale = 1;
    if (*end == 'k' || *end == 'K')
        scale = 1000, end++;
    else if (*end == 'M')
        scale = 1000000, end++;
    else if (*end == 'G')
        scale = 1000000000, end++;
    if (errno || *end || v > UINT64_MAX / scale)
        return -1;
    *out = v * scale;
    return 0;
}

/* A number and a unit (us ms s m h); a bare number is seconds (wrk). */
static int parse_duration(const char *s, uint64_t *ns)
{
    static const struct {
        const char *unit;
        double ns;
    } units[] = {{"us", 1e3}, {"ms", 1e6},   {"s", 1e9},
                 {"m", 60e9}, {"h", 3600e9}, {"", 1e9}};
    char *end;
    if (!isdigit((unsigned char)*s) && *s != '.')
        return -1;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) != 0)
            continue;
        double total = v * units[i].ns;
        if (total > 1e18)
            return -1;
        *ns = (uint64_t)total;
        return 0;
    }
    return -1;
}

/* ---- the options table ------------------------------------------------ */

typedef struct parse_state {
    bench_opts_t *o;
    char *err;
    size_t errlen;
    const char *flag; /* as typed, for messages */
} parse_state_t;

typedef int (*flag_fn)(parse_state_t *ps, const char *value);

typedef struct flag {
    char short_name; /* 0: long only */
    const char *long_name;
    bool takes_value;
    flag_fn set;
} flag_t;

static int fail(parse_state_t *ps, const char *fmt, const char *value)
{
    char msg[192];
    snprintf(msg, sizeof msg, fmt, value);
    snprintf(ps->err, ps->errlen, "%s: %s", ps->flag, msg);
    return -1;
}

static int set_threads(parse_state_t *ps, const char *v)
{
    uint64_t n;
    if (parse_count(v, &n) < 0 || n < 1 || n > MAX_THREADS)
        return fail(ps, "threads must be 1..1024, not '%s'", v);
    ps->o->threads = (unsigned)n;
    return 0;
}

static int set_connections(parse_state_t *ps, const char *v)
{
    uint64_t n;
    if (parse_count(v, &n) < 0 || n < 1)
        return fail(ps, "connections must be a count of at least 1, not '%s'",
                    v);
    if (n > MAX_CONNECTIONS)
        return fail(ps, "connections must be at most 1000000, not '%s'", v);
    ps->o->connections = (unsigned)n;
    return 0;
}

static int check_duration(parse_state_t *ps, const char *v, uint64_t *ns,
                          bool zero_ok)
{
    if (parse_duration(v, ns) < 0)
        return fail(ps,
                    "'%s' is not a duration (a number and a unit: 500ms, "
                    "10s, 2m, 1h)",
                    v);
    if (!zero_ok && *ns == 0)
        return fail(ps, "must be more than zero, not '%s'", v);
    return 0;
}

static int set_duration(parse_state_t *ps, const char *v)
{
    return check_duration(ps, v, &ps->o->duration_ns, false);
}

static int set_timeout(parse_state_t *ps, const char *v)
{
    return check_duration(ps, v, &ps->o->timeout_ns, false);
}

static int set_warmup(parse_state_t *ps, const char *v)
{
    return check_duration(ps, v, &ps->o->warmup_ns, true);
}

static int set_rate(parse_state_t *ps, const char *v)
{
    char *end;
    errno = 0;
    double r = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(r) || r <= 0 || r > 1e9)
        return fail(ps, "rate must be requests per second above 0, not '%s'",
                    v);
    ps->o->rate = r;
    return 0;
}

static int set_requests_per_conn(parse_state_t *ps, const char *v)
{
    uint64_t n;
    if (parse_count(v, &n) < 0 || n < 1)
        return fail(ps, "must be a count of at least 1, not '%s'", v);
    ps->o->requests_per_conn = n;
    return 0;
}

static int set_string(parse_state_t *ps, char **dst, const char *v)
{
    if (!*v)
        return fail(ps, "must not be empty%s", "");
    free(*dst);
    *dst = copy_str(v);
    return 0;
}

static int set_script(parse_state_t *ps, const char *v)
{
    if (access(v, R_OK) != 0)
        return fail(ps, "cannot read script '%s'", v);
    return set_string(ps, &ps->o->script, v);
}

static int set_json(parse_state_t *ps, const char *v)
{
    return set_string(ps, &ps->o->json, v);
}

static int set_plot(parse_state_t *ps, const char *v)
{
    return set_string(ps, &ps->o->plot, v);
}

static int set_label(parse_state_t *ps, const char *v)
{
    return set_string(ps, &ps->o->label, v);
}

/* "Name: value" with a token name (wrk sends what it is given; a line
 * without a colon would be a broken request, so it is refused). */
static int add_header(parse_state_t *ps, const char *v)
{
    const char *colon = strchr(v, ':');
    if (!colon || colon == v || strpbrk(v, "\r\n"))
        return fail(ps, "header must be \"Name: value\", not '%s'", v);
    for (const char *c = v; c < colon; c++)
        if (!isgraph((unsigned char)*c))
            return fail(ps, "header must be \"Name: value\", not '%s'", v);
    if (ps->o->nheaders == MF_BENCH_MAX_HEADERS)
        return fail(ps, "at most 64 headers%s", "");
    ps->o->headers[ps->o->nheaders++] = copy_str(v);
    return 0;
}

static int add_threshold(parse_state_t *ps, const char *v)
{
    bench_opts_t *o = ps->o;
    if (o->nthresholds == MF_BENCH_MAX_THRESHOLDS)
        return fail(ps, "at most 32 thresholds%s", "");
    char msg[160];
    bench_threshold_t *t = &o->thresholds[o->nthresholds];
    memset(t, 0, sizeof *t);
    if (bench_threshold_parse(v, t, msg, sizeof msg) < 0) {
        snprintf(ps->err, ps->errlen, "%s", msg); /* names the flag */
        return -1;
    }
    o->nthresholds++;
    return 0;
}

static int set_latency(parse_state_t *ps, const char *v)
{
    (void)v;
    ps->o->latency = true;
    return 0;
}

static int set_no_keepalive(parse_state_t *ps, const char *v)
{
    (void)v;
    ps->o->keepalive = false;
    return 0;
}

static int set_progress(parse_state_t *ps, const char *v)
{
    (void)v;
    ps->o->progress = 1;
    return 0;
}

static int set_no_progress(parse_state_t *ps, const char *v)
{
    (void)v;
    ps->o->progress = 0;
    return 0;
}

static const flag_t flags[] = {
    {'c', "connections", true, set_connections},
    {'d', "duration", true, set_duration},
    {'t', "threads", true, set_threads},
    {'s', "script", true, set_script},
    {'H', "header", true, add_header},
    {'L', "latency", false, set_latency},
    {'T', "timeout", true, set_timeout},
    {'R', "rate", true, set_rate},
    {0, "warmup", true, set_warmup},
    {0, "no-keepalive", false, set_no_keepalive},
    {0, "requests-per-conn", true, set_requests_per_conn},
    {0, "threshold", true, add_threshold},
    {0, "json", true, set_json},
    {0, "plot", true, set_plot},
    {0, "label", true, set_label},
    {0, "progress", false, set_progress},
    {0, "no-progress", false, set_no_progress},
};

/* ---- the walk over argv ------------------------------------------------ */

static const flag_t *find_long(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (strlen(flags[i].long_name) == len &&
            !strncmp(flags[i].long_name, name, len))
            return &flags[i];
    return NULL;
}

static const flag_t *find_short(char c)
{
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (flags[i].short_name == c)
            return &flags[i];
    return NULL;
}

static void defaults(bench_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->threads = 2;
    o->connections = 10;
    o->duration_ns = 10 * (uint64_t)NS_PER_S;
    o->timeout_ns = 2 * (uint64_t)NS_PER_S;
    o->keepalive = true;
    o->progress = -1;
}

static int add_url(parse_state_t *ps, const char *arg)
{
    bench_url_t u;
    char msg[192];
    /* A scenario script may stand where the URL would: a readable file
     * that is no URL (-s FILE otherwise). */
    if (!ps->o->script && !strstr(arg, "://") && access(arg, R_OK) == 0) {
        ps->o->script = copy_str(arg);
        return 0;
    }
    if (bench_url_parse(arg, &u, msg, sizeof msg) < 0) {
        snprintf(ps->err, ps->errlen, "URL %s", msg);
        return -1;
    }
    ps->flag = "URL";
    bench_url_free(&u);
    if (ps->o->nurls == MF_BENCH_MAX_URLS)
        return fail(ps, "at most 64 URLs%s", "");
    ps->o->urls[ps->o->nurls++] = copy_str(arg);
    return 0;
}

/* One flag at argv[*i]: "-c10", "-c 10", "--connections 10",
 * "--connections=10". */
static int parse_flag(parse_state_t *ps, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const flag_t *f;
    const char *value = NULL;
    char name[48];
    if (arg[1] == '-') {
        const char *eq = strchr(arg + 2, '=');
        size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        f = find_long(arg + 2, len);
        value = eq ? eq + 1 : NULL;
        snprintf(name, sizeof name, "--%.*s", (int)len, arg + 2);
    } else {
        f = find_short(arg[1]);
        value = arg[2] ? arg + 2 : NULL;
        snprintf(name, sizeof name, "-%c", arg[1]);
    }
    ps->flag = name;
    if (!f) {
        snprintf(ps->err, ps->errlen, "unknown flag '%s'", arg);
        return -1;
    }
    if (!f->takes_value && value)
        return fail(ps, "takes no value, not '%s'", value);
    if (f->takes_value && !value) {
        if (*i + 1 >= argc)
            return fail(ps, "missing value%s", "");
        value = argv[++*i];
    }
    return f->set(ps, value);
}

static int check_together(parse_state_t *ps)
{
    bench_opts_t *o = ps->o;
    if (o->connections < o->threads) {
        ps->flag = "-c";
        char n[16];
        snprintf(n, sizeof n, "%u", o->threads);
        return fail(ps, "connections must be at least the threads (%s)", n);
    }
    if (o->nurls == 0 && !o->script) {
        snprintf(ps->err, ps->errlen, "missing URL");
        return -1;
    }
    return 0;
}

static int parse_args(parse_state_t *ps, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--")) {
            bench_opts_t *o = ps->o;
            o->nscript_args = (size_t)(argc - i - 1);
            o->script_args = mf_xcalloc(o->nscript_args + 1, sizeof(char *));
            for (size_t k = 0; k < o->nscript_args; k++)
                o->script_args[k] = copy_str(argv[i + 1 + (int)k]);
            break;
        }
        int rc = arg[0] == '-' && arg[1] ? parse_flag(ps, argc, argv, &i)
                                         : add_url(ps, arg);
        if (rc < 0)
            return -1;
    }
    return check_together(ps);
}

int bench_parse_args(int argc, char **argv, bench_opts_t *o, char *err,
                     size_t errlen)
{
    defaults(o);
    parse_state_t ps = {.o = o, .err = err, .errlen = errlen, .flag = ""};
    if (parse_args(&ps, argc, argv) < 0) {
        bench_opts_free(o);
        return -1;
    }
    return 0;
}

void bench_opts_free(bench_opts_t *o)
{
    free(o->script);
    for (size_t i = 0; i < o->nscript_args; i++)
        free(o->script_args[i]);
    free(o->script_args);
    for (size_t i = 0; i < o->nheaders; i++)
        free(o->headers[i]);
    for (size_t i = 0; i < o->nurls; i++)
        free(o->urls[i]);
    for (size_t i = 0; i < o->nthresholds; i++)
        free(o->thresholds[i].text);
    free(o->json);
    free(o->plot);
    free(o->label);
    memset(o, 0, sizeof *o);
}

/* ---- URLs ------------------------------------------------------------- */

static int url_fail(char *err, size_t errlen, const char *text, const char *why)
{
    snprintf(err, errlen, "'%s': %s", text, why);
    return -1;
}

/* host[:port] or [v6][:port] of the authority [a, end). */
static int url_authority(const char *a, const char *end, bench_url_t *u)
{
    const char *host = a, *host_end, *port = NULL;
    if (*a == '[') {
        host = a + 1;
        host_end = memchr(a, ']', (size_t)(end - a));
        if (!host_end)
            return -1;
        if (host_end + 1 < end && host_end[1] != ':')
            return -1;
        if (host_end + 1 < end)
            port = host_end + 2;
    } else {
        host_end = memchr(a, ':', (size_t)(end - a));
        if (host_end)
            port = host_end + 1;
        else
            host_end = end;
    }
    if (host_end == host || memchr(host, '@', (size_t)(host_end - host)))
        return -1;
    u->host = copy_strn(host, (size_t)(host_end - host));
    if (port) {
        char *p_end;
        long n = strtol(port, &p_end, 10);
        if (port == end || p_end != end || n < 1 || n > 65535)
            return -1;
        u->port = copy_strn(port, (size_t)(end - port));
    }
    return 0;
}

int bench_url_parse(const char *text, bench_url_t *u, char *err, size_t errlen)
{
    memset(u, 0, sizeof *u);
    const char *sep = strstr(text, "://");
    if (!sep)
        return url_fail(err, errlen, text,
                        "not a URL (http://HOST[:PORT]/PATH)");
    size_t slen = (size_t)(sep - text);
    if (!(slen == 4 && !strncasecmp(text, "http", 4)) &&
        !(slen == 5 && !strncasecmp(text, "https", 5))) {
        char why[96];
        snprintf(why, sizeof why, "bad URL scheme '%.*s' (http or https)",
                 (int)(slen > 16 ? 16 : slen), text);
        return url_fail(err, errlen, text, why);
    }
    const char *a = sep + 3;
    const char *end = a + strcspn(a, "/?#");
    if (url_authority(a, end, u) < 0) {
        bench_url_free(u);
        return url_fail(err, errlen, text, "bad host or port");
    }
    u->scheme = copy_strn(text, slen);
    for (char *c = u->scheme; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    u->tls = slen == 5;
    if (*end == '/') {
        u->path = copy_str(end);
    } else { /* "http://h" or "http://h?q": the path starts with '/' */
        size_t n = strlen(end);
        u->path = mf_xmalloc(n + 2);
        u->path[0] = '/';
        memcpy(u->path + 1, end, n + 1);
    }
    if (strpbrk(u->path, " \r\n")) {
        bench_url_free(u);
        return url_fail(err, errlen, text, "a space or line break in the path");
    }
    return 0;
}

void bench_url_free(bench_url_t *u)
{
    free(u->scheme);
    free(u->host);
    free(u->port);
    free(u->path);
    memset(u, 0, sizeof *u);
}
