/*
 * bench/http/rate.c — a constant-rate HTTP/1.1 load generator: latency at a
 * fixed request rate, corrected for coordinated omission.
 *
 * wrk is closed-loop: a connection sends its next request when the last
 * answer arrives, so a server that stalls is simply asked less, and the
 * requests it delayed are never counted (coordinated omission). Here the
 * schedule is fixed before the run: request i is due at t0 + i / rate and
 * goes out on connection i % conns (each connection sends every conns / rate
 * seconds, staggered, as in wrk2). A request that is due while its
 * connection still waits for an answer is owed and sent as soon as the
 * answer comes; its latency is counted from the time it was due, not from
 * the time it left. One thread, level-triggered epoll, no pipelining.
 *
 * Usage: bench_rate --connect 127.0.0.1:PORT --rate R --conns C
 *                   --duration S [--warmup S] [--path /]
 * Prints two lines: "rate-summary key=value ..." (latencies in µs; also
 * late_sends, requests that left over 1 ms after they were due although
 * their connection was free: the generator's own lag) and
 * "rate-cdf p=µs ..." (latency at percentiles spaced evenly on a log scale
 * of 1 / (1 - p), up to 99.999 %, and the max). Exits 1 on any connect,
 * socket or protocol error or non-200 answer: such a run is not a number.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE 16384 /* one answer; bodies here are at most a few KiB */
#define MAX_EVENTS 256
#define DRAIN_NS 2000000000ull /* after the schedule ends, wait this long */
#define SPIN_NS 200000ull      /* shorter waits poll without blocking */
#define LATE_NS 1000000ull     /* a send this late is the generator's fault */

typedef struct conn {
    int fd;
    int busy;         /* a request is in flight */
    uint64_t idx;     /* schedule index of the request in flight */
    uint32_t owed;    /* requests due but not sent: the answer is late */
    size_t len;       /* bytes of the answer read so far */
    char buf[BUF_SIZE];
} conn_t;

typedef struct run {
    const char *host, *path;
    int port;
    double rate, duration_s, warmup_s;
    unsigned nconns;
    conn_t *conns;
    int epfd;
    uint64_t t0, first_kept, total; /* schedule start (ns), indices */
    double interval_ns;
    uint64_t next_idx;                           /* next index to fall due */
    char request[256];
    size_t request_len;
    uint64_t *lat; /* latency (ns) of each kept request, in order of answer */
    size_t nlat, sent, done;
    size_t late;          /* kept sends on an idle connection, > LATE_NS late */
    uint64_t late_max_ns; /* the latest such send */
} run_t;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fail(const char *what)
{
    fprintf(stderr, "bench_rate: %s: %s\n", what, errno ? strerror(errno) : "");
    exit(1);
}

static uint64_t due_at(const run_t *r, uint64_t idx)
{
    return r->t0 + (uint64_t)((double)idx * r->interval_ns);
}

/* ---- the answer ---------------------------------------------------------- */

/* The value of header name (lowercase, with ':') in head, or NULL. */
static const char *header(const char *head, size_t len, const char *name)
{
    size_t n = strlen(name);
    const char *p = head, *end = head + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            return NULL;
        if ((size_t)(eol - p) > n && strncasecmp(p, name, n) == 0)
            return p + n;
        p = eol + 1;
    }
    return NULL;
}

/* Bytes of a chunked body at b[0, len) when complete, 0 if more are needed,
 * -1 if malformed. No trailers: the peers here send none. */
static long chunked_length(const char *b, size_t len)
{
    size_t at = 0;
    for (;;) {
        const char *eol = memchr(b + at, '\n', len - at);
        if (!eol)
            return 0;
        char *hex_end;
        unsigned long size = strtoul(b + at, &hex_end, 16);
        if (hex_end == b + at)
            return -1;
        at = (size_t)(eol - b) + 1 + size + 2; /* data, then CRLF */
        if (at > len)
            return 0;
        if (b[at - 2] != '\r' || b[at - 1] != '\n')
            return -1;
        if (size == 0)
            return (long)at;
    }
}

/* Length of the complete answer at buf[0, len), 0 if more bytes are needed,
 * -1 if it is not a framed 200. */
static long response_length(const char *buf, size_t len)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end)
        return len == BUF_SIZE ? -1 : 0;
    size_t head = (size_t)(end - buf) + 4;
    if (head < 12 || memcmp(buf, "HTTP/1.1 200", 12) != 0)
        return -1;
    const char *cl = header(buf, head, "content-length:");
    if (cl) {
        size_t body = strtoul(cl, NULL, 10);
        return len >= head + body ? (long)(head + body) : 0;
    }
    if (!header(buf, head, "transfer-encoding:"))
        return -1; /* a keep-alive answer must be framed */
    long body = chunked_length(buf + head, len - head);
    return body <= 0 ? body : (long)head + body;
}

/* ---- sending and receiving -------------------------------------------- */

static void send_request(run_t *r, conn_t *c, uint64_t idx)
{
    /* A fresh request on an idle connection fits its socket buffer: a
     * short write would be a broken connection. */
    if (write(c->fd, r->request, r->request_len) != (ssize_t)r->request_len)
        fail("write");
    c->busy = 1;
    c->idx = idx;
    c->len = 0;
    r->sent++;
}

static void record(run_t *r, conn_t *c, uint64_t now)
{
    if (c->idx >= r->first_kept) /* warm-up answers are not kept */
        r->lat[r->nlat++] = now - due_at(r, c->idx);
    r->done++;
    c->busy = 0;
    if (c->owed > 0) { /* late: the next one was due already */
        c->owed--;
        send_request(r, c, c->idx + r->nconns);
    }
}

static void on_readable(run_t *r, conn_t *c)
{
    ssize_t n = read(c->fd, c->buf + c->len, BUF_SIZE - c->len);
    if (n == 0)
        errno = 0;
    if (n <= 0) {
        if (n < 0 && errno == EAGAIN)
            return;
        fail(n == 0 ? "server closed a connection" : "read");
    }
    c->len += (size_t)n;
    long whole = response_length(c->buf, c->len);
    if (whole < 0 || (whole > 0 && (size_t)whole != c->len) || !c->busy) {
        errno = 0;
        fail("not a single framed 200 answer");
    }
    if (whole > 0)
        record(r, c, now_ns());
}

/* A request whose connection was idle when it fell due and still left
 * late was delayed by this generator (descheduled, or too slow), not by the
 * server: counted, so that such a run can be told apart. */
static void note_lateness(run_t *r, uint64_t idx)
{
    if (idx < r->first_kept)
        return;
    uint64_t late = now_ns() - due_at(r, idx);
    if (late > r->late_max_ns)
        r->late_max_ns = late;
    if (late > LATE_NS)
        r->late++;
}

/* Sends (or owes) every request that has fallen due. */
static void send_due(run_t *r, uint64_t now)
{
    while (r->next_idx < r->total && due_at(r, r->next_idx) <= now) {
        conn_t *c = &r->conns[r->next_idx % r->nconns];
        if (c->busy) {
            c->owed++;
        } else {
            note_lateness(r, r->next_idx);
            send_request(r, c, r->next_idx);
        }
        r->next_idx++;
    }
}

/* ---- the run -------------------------------------------------------------- */

static void connect_all(run_t *r)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)r->port)};
    if (inet_pton(AF_INET, r->host, &sa.sin_addr) != 1)
        fail("--connect wants IPV4:PORT");
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    for (unsigned i = 0; i < r->nconns; i++) {
        conn_t *c = &r->conns[i];
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0 || connect(c->fd, (void *)&sa, sizeof sa) < 0)
            fail("connect");
        int one = 1; /* requests must leave at once, as wrk's do */
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
            fail("epoll_ctl");
    }
}

/* Waits for answers until the next request falls due (ns precision:
 * epoll_wait's milliseconds would bunch the schedule up). A wait shorter
 * than SPIN_NS is a poll that does not block: a timer wake-up costs the
 * generator a few µs and lands late by as much, which at tens of thousands
 * of requests per second would make it, not the server, the bottleneck. So
 * at such rates bench_rate spins on its core (core 1, its own). */
static void poll_until(run_t *r, uint64_t deadline)
{
    struct epoll_event evs[MAX_EVENTS];
    uint64_t now = now_ns();
    uint64_t wait = deadline > now + SPIN_NS ? deadline - now : 0;
    struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ull),
                          .tv_nsec = (long)(wait % 1000000000ull)};
    int n = epoll_pwait2(r->epfd, evs, MAX_EVENTS, &ts, NULL);
    if (n < 0 && errno != EINTR)
        fail("epoll_pwait2");
    for (int i = 0; i < n; i++)
        on_readable(r, evs[i].data.ptr);
}

static uint64_t owed_total(const run_t *r)
{
    uint64_t owed = 0;
    for (unsigned i = 0; i < r->nconns; i++)
        owed += r->conns[i].owed + (uint64_t)r->conns[i].busy;
    return owed;
}

static void run_schedule(run_t *r)
{
    r->t0 = now_ns() + 1000000; /* 1 ms: time to get into the loop */
    while (r->next_idx < r->total) {
        send_due(r, now_ns());
        if (r->next_idx < r->total)
            poll_until(r, due_at(r, r->next_idx));
    }
    uint64_t give_up = now_ns() + DRAIN_NS;
    while (owed_total(r) > 0 && now_ns() < give_up)
        poll_until(r, give_up);
}

/* ---- output -------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_us(const run_t *r, double p)
{
    if (r->nlat == 0)
        return 0;
    size_t rank = (size_t)ceil(p / 100.0 * (double)r->nlat);
    return (double)r->lat[rank > 0 ? rank - 1 : 0] / 1000.0;
}

static void report(run_t *r, uint64_t elapsed_ns)
{
    qsort(r->lat, r->nlat, sizeof *r->lat, cmp_u64);
    uint64_t kept_due = r->total - r->first_kept;
    printf("rate-summary rate=%.0f conns=%u scheduled=%llu kept=%zu "
           "unanswered=%llu sent=%zu done=%zu elapsed_us=%llu late_sends=%zu "
           "late_max_us=%.1f",
           r->rate, r->nconns, (unsigned long long)kept_due, r->nlat,
           (unsigned long long)owed_total(r), r->sent, r->done,
           (unsigned long long)(elapsed_ns / 1000), r->late,
           (double)r->late_max_ns / 1000.0);
    static const double ps[] = {50, 75, 90, 99, 99.9, 99.99};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        printf(" p%g_us=%.1f", ps[i], pct_us(r, ps[i]));
    printf(" max_us=%.1f\nrate-cdf", pct_us(r, 100));
    /* 1 / (1 - p) = 10^(k/10): ten points per decade, 0 % to 99.999 %. */
    for (int k = 0; k <= 50; k++) {
        double p = 100.0 * (1.0 - pow(10.0, -k / 10.0));
        printf(" %.5f=%.1f", p, pct_us(r, p));
    }
    printf(" 100=%.1f\n", pct_us(r, 100));
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_rate --connect IPV4:PORT --rate R "
                    "--conns C --duration S [--warmup S] [--path /]\n");
    exit(2);
}

static void parse_args(int argc, char **argv, run_t *r)
{
    static char host[64];
    *r = (run_t){.path = "/", .nconns = 64, .duration_s = 10};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--connect")) {
            if (sscanf(v, "%63[^:]:%d", host, &r->port) != 2)
                usage();
            r->host = host;
        } else if (!strcmp(a, "--rate"))
            r->rate = atof(v);
        else if (!strcmp(a, "--conns"))
            r->nconns = (unsigned)atoi(v);
        else if (!strcmp(a, "--duration"))
            r->duration_s = atof(v);
        else if (!strcmp(a, "--warmup"))
            r->warmup_s = atof(v);
        else if (!strcmp(a, "--path"))
            r->path = v;
        else
            usage();
    }
    if (argc % 2 == 0 || !r->host || r->rate <= 0 || r->nconns == 0 ||
        r->duration_s <= 0 || r->warmup_s < 0)
        usage();
}

int main(int argc, char **argv)
{
    run_t r;
    parse_args(argc, argv, &r);
    r.interval_ns = 1e9 / r.rate;
    r.first_kept = (uint64_t)(r.warmup_s * r.rate);
    r.total = r.first_kept + (uint64_t)(r.duration_s * r.rate);
    r.request_len = (size_t)snprintf(r.request, sizeof r.request,
                                     "GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n",
                                     r.path, r.host, r.port);
    r.conns = calloc(r.nconns, sizeof *r.conns);
    r.lat = malloc((r.total + 1) * sizeof *r.lat);
    if (!r.conns || !r.lat)
        fail("out of memory");
    connect_all(&r);
    uint64_t start = now_ns();
    run_schedule(&r);
    report(&r, now_ns() - start);
    return owed_total(&r) > 0 ? 1 : 0;
}
