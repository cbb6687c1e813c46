/*
 * lua/serve/trace.c — per-request task traces (config: trace = { file =,
 * sample =, token = }): for a sampled request (one in `sample` on each
 * worker, or any request whose X-Moonflow-Trace header is the token),
 * every task its handler's Lua code starts is a span with its start, its
 * end, its kind, its result and its parent (the parallel or graph it is a
 * branch of, else the request); the request is the root span; an HTTP
 * call's steps (resolved, connected, TLS done, request started and sent, first
 * byte of the response) are its span's events. When the last of them is
 * released, the whole tree is one line of the trace file in OTLP's JSON form
 * (resourceSpans → scopeSpans → spans), which `moonflow trace FILE` draws as a
 * waterfall.
 *
 * A trace is a task trace context (moonflow/task.h): the request holds one
 * count until its handler's coroutine ends, every task made by that
 * coroutine one until the task is released, so the record outlives every
 * span it may be told about. Spans are kept in an array grown by doubling;
 * a span that finds no memory is counted (moonflow.dropped_spans on the
 * root), never silently lost. Workers append whole lines to the file
 * (O_APPEND), one write per trace; a trace that cannot be made or written
 * is counted and reported on the error log when it happens.
 *
 * Owns: the file descriptor of each worker (a dup) and the trace records.
 * May call: the engine's task and loop API, libc.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <moonflow/error.h>
#include <moonflow/http_client.h>
#include <moonflow/task.h>

#include "request.h"

#define MF_TRACE_FIRST_SPANS 16

typedef struct mf_trace_span {
    const mf_task_t *task; /* NULL once released (its address may return) */
    const char *kind;
    int parent; /* index; 0: the request */
    int state, error;
    uint64_t start_ns, end_ns; /* monotonic; end 0: never finished */
    mf_http_timings_t http;    /* an HTTP call's steps (span events) */
} mf_trace_span_t;

struct mf_serve_trace {
    mf_task_trace_t base;
    mf_serve_worker_t *w;
    uint64_t serial;
    int64_t wall_minus_mono; /* ns: CLOCK_REALTIME - CLOCK_MONOTONIC */
    uint64_t start_ns, end_ns;
    int status;
    size_t dropped;
    char id[MF_SERVE_ID_MAX + 1];
    char name[160]; /* "GET /path" */
    size_t n, cap;  /* spans[0] is the request */
    mf_trace_span_t *spans;
};

static uint64_t mf__wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the worker's file -------------------------------------------------- */

int mf_serve_trace_open(mf_serve_worker_t *w)
{
    const mf_serve_config_t *c = w->config;
    w->trace_fd = -1;
    if (!c->trace_file)
        return 0;
    int fd =
        open(c->trace_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return mf_err_from_errno(errno);
    w->trace_fd = fd;
    return 0;
}

void mf_serve_trace_close(mf_serve_worker_t *w)
{
    if (w->trace_fd >= 0)
        close(w->trace_fd);
    w->trace_fd = -1;
    if (w->trace_lost)
        fprintf(stderr, "moonflow: trace file %s: %zu traces lost\n",
                w->config->trace_file, w->trace_lost);
}

/* ---- spans -------------------------------------------------------------- */

static mf_trace_span_t *mf__span_new(mf_serve_trace_t *t)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : MF_TRACE_FIRST_SPANS;
        mf_trace_span_t *s = mf_try_malloc(cap * sizeof *s);
        if (!s) {
            t->dropped++;
            return NULL;
        }
        if (t->n)
            memcpy(s, t->spans, t->n * sizeof *s);
        mf_free(t->spans);
        t->spans = s;
        t->cap = cap;
    }
    mf_trace_span_t *s = &t->spans[t->n++];
    memset(s, 0, sizeof *s);
    return s;
}

/* The span of a live task: the latest with that address. */
static int mf__span_of(const mf_serve_trace_t *t, const mf_task_t *task)
{
    for (size_t i = t->n; i-- > 1;)
        if (t->spans[i].task == task)
            return (int)i;
    return -1;
}

void mf_serve_trace_started(mf_task_t *task)
{
    mf_serve_trace_t *t = (mf_serve_trace_t *)mf_task_trace(task);
    const mf_task_t *parent = mf_task_parent(task);
    int p = parent ? mf__span_of(t, parent) : 0;
    mf_trace_span_t *s = mf__span_new(t);
    if (!s)
        return;
    s->task = task;
    s->kind = mf_task_kind(task);
    s->parent = p < 0 ? 0 : p;
    s->start_ns = mf_monotonic_ns();
}

/* ns: the task's life as the observer measured it (no second clock read). */
void mf_serve_trace_finished(mf_task_t *task, uint64_t ns)
{
    mf_serve_trace_t *t = (mf_serve_trace_t *)mf_task_trace(task);
    int i = mf__span_of(t, task);
    if (i < 0)
        return; /* its start found no memory: counted then */
    mf_trace_span_t *s = &t->spans[i];
    s->end_ns = s->start_ns + ns;
    s->state = mf_task_state(task);
    s->error = mf_task_error(task);
    if (!strcmp(s->kind, "http"))
        mf_task_http_timings(task, &s->http);
    s->task = NULL;
}

/* ---- the line ------------------------------------------------------------ */

typedef struct mf_trace_out {
    char *p;
    size_t len, cap;
    bool failed;
} mf_trace_out_t;

static void mf__put(mf_trace_out_t *o, const char *s, size_t n)
{
    if (o->failed)
        return;
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n + 1)
            cap *= 2;
        char *p = mf_try_malloc(cap);
        if (!p) {
            o->failed = true;
            return;
        }
        if (o->len)
            memcpy(p, o->p, o->len);
        mf_free(o->p);
        o->p = p;
        o->cap = cap;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void mf__puts(mf_trace_out_t *o, const char *s)
{
    mf__put(o, s, strlen(s));
}

static void mf__printf(mf_trace_out_t *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void mf__printf(mf_trace_out_t *o, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        mf__put(o, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* A JSON string of bytes that may come from a client (the path). */
static void mf__put_string(mf_trace_out_t *o, const char *s)
{
    char esc[6];
    mf__put(o, "\"", 1);
    for (; *s; s++)
        mf__put(o, esc, mf_serve_json_byte((unsigned char)*s, esc));
    mf__put(o, "\"", 1);
}

static uint64_t mf__fnv(const char *s, uint64_t h)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* OTLP's ids: the trace's from the request id (itself when it is 32 hex
 * digits, as the ids moonflow makes are), a span's from the trace. */
static void mf__trace_id(const mf_serve_trace_t *t, char out[33])
{
    size_t n = strlen(t->id);
    if (n == 32 && strspn(t->id, "0123456789abcdef") == 32) {
        memcpy(out, t->id, 33);
        return;
    }
    snprintf(out, 33, "%016llx%016llx",
             (unsigned long long)mf__fnv(t->id, 1469598103934665603ULL),
             (unsigned long long)mf__fnv(t->id, 7809847782465536322ULL));
}

static void mf__span_id(const mf_serve_trace_t *t, size_t i, char out[17])
{
    uint64_t id = (t->w->id_prefix ^ (t->serial << 20)) + i + 1;
    snprintf(out, 17, "%016llx", (unsigned long long)id);
}

static void mf__attr(mf_trace_out_t *o, bool first, const char *key,
                     const char *value)
{
    mf__printf(o, "%s{\"key\":\"%s\",\"value\":{\"stringValue\":",
               first ? "" : ",", key);
    mf__put_string(o, value);
    mf__put(o, "}}", 2);
}

static void mf__put_root(mf_trace_out_t *o, const mf_serve_trace_t *t,
                         const char *trace_id)
{
    char span_id[17];
    mf__span_id(t, 0, span_id);
    mf__printf(o, "{\"traceId\":\"%s\",\"spanId\":\"%s\",\"name\":", trace_id,
               span_id);
    mf__put_string(o, t->name);
    mf__printf(o,
               ",\"kind\":2,\"startTimeUnixNano\":\"%llu\","
               "\"endTimeUnixNano\":\"%llu\",\"attributes\":[",
               (unsigned long long)(t->start_ns + t->wall_minus_mono),
               (unsigned long long)(t->end_ns + t->wall_minus_mono));
    mf__attr(o, true, "moonflow.request_id", t->id);
    mf__printf(o,
               ",{\"key\":\"http.response.status_code\",\"value\":"
               "{\"intValue\":\"%d\"}}",
               t->status);
    if (t->dropped)
        mf__printf(o,
                   ",{\"key\":\"moonflow.dropped_spans\",\"value\":"
                   "{\"intValue\":\"%zu\"}}",
                   t->dropped);
    mf__printf(o, "],\"status\":{\"code\":%d}}", t->status >= 500 ? 2 : 1);
}

/* An HTTP call's steps as OTLP span events: ,"events":[...] */
static void mf__put_events(mf_trace_out_t *o, const mf_serve_trace_t *t,
                           const mf_http_timings_t *h)
{
    const struct {
        const char *name;
        uint64_t at;
    } steps[] = {
        {"dns.resolved", h->resolved},
        {"connection.connected", h->connected},
        {"tls.handshake_done", h->opened != h->connected ? h->opened : 0},
        {"request.start", h->sending},
        {"request.sent", h->sent},
        {"response.first_byte", h->first_byte}};
    bool any = false;
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        if (!steps[k].at)
            continue;
        mf__printf(o, "%s{\"timeUnixNano\":\"%llu\",\"name\":\"%s\"}",
                   any ? "," : ",\"events\":[",
                   (unsigned long long)(steps[k].at + t->wall_minus_mono),
                   steps[k].name);
        any = true;
    }
    if (any)
        mf__put(o, "]", 1);
}

static void mf__put_span(mf_trace_out_t *o, const mf_serve_trace_t *t, size_t i,
                         const char *trace_id)
{
    const mf_trace_span_t *s = &t->spans[i];
    char span_id[17], parent_id[17];
    mf__span_id(t, i, span_id);
    mf__span_id(t, (size_t)s->parent, parent_id);
    bool done = s->end_ns != 0;
    uint64_t end = done ? s->end_ns : t->end_ns;
    bool http = !strcmp(s->kind, "http");
    mf__printf(o,
               ",{\"traceId\":\"%s\",\"spanId\":\"%s\",\"parentSpanId\":\"%s\","
               "\"name\":\"%s\",\"kind\":%d,\"startTimeUnixNano\":\"%llu\","
               "\"endTimeUnixNano\":\"%llu\",\"attributes\":[",
               trace_id, span_id, parent_id, s->kind, http ? 3 : 1,
               (unsigned long long)(s->start_ns + t->wall_minus_mono),
               (unsigned long long)(end + t->wall_minus_mono));
    mf__attr(o, true, "moonflow.task.kind", s->kind);
    mf__attr(o, false, "moonflow.request_id", t->id);
    mf__attr(o, false, "moonflow.task.state",
             done ? mf_state_name(s->state) : "unfinished");
    if (done && s->state != MF_STATE_SUCCESS)
        mf__attr(o, false, "moonflow.task.error", mf_strerror(s->error));
    mf__put(o, "]", 1);
    mf__put_events(o, t, &s->http);
    if (done && s->state != MF_STATE_SUCCESS) {
        mf__puts(o, ",\"status\":{\"code\":2,\"message\":");
        mf__put_string(o, mf_state_name(s->state));
        mf__put(o, "}}", 2);
        return;
    }
    mf__printf(o, ",\"status\":{\"code\":%d}}", done ? 1 : 0);
}

static void mf__trace_write(mf_serve_trace_t *t)
{
    mf_serve_worker_t *w = t->w;
    char trace_id[33];
    mf__trace_id(t, trace_id);
    mf_trace_out_t o = {0};
    mf__puts(&o,
             "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":"
             "\"service.name\",\"value\":{\"stringValue\":\"moonflow\"}}]},"
             "\"scopeSpans\":[{\"scope\":{\"name\":\"moonflow\"},\"spans\":[");
    mf__put_root(&o, t, trace_id);
    for (size_t i = 1; i < t->n; i++)
        mf__put_span(&o, t, i, trace_id);
    mf__puts(&o, "]}]}]}\n");
    ssize_t n = o.failed ? -1 : write(w->trace_fd, o.p, o.len);
    if (n != (ssize_t)o.len) {
        w->trace_lost++;
        fprintf(stderr, "moonflow: trace file %s: trace %s not written: %s\n",
                w->config->trace_file, t->id,
                o.failed ? "out of memory" : strerror(n < 0 ? errno : ENOSPC));
    }
    mf_free(o.p);
}

/* The last count is gone: every span is known. */
static void mf__trace_release(mf_task_trace_t *base)
{
    mf_serve_trace_t *t = (mf_serve_trace_t *)base;
    if (!t->end_ns)
        t->end_ns = mf_monotonic_ns();
    mf__trace_write(t);
    mf_free(t->spans);
    mf_free(t);
}

/* ---- the request's side ------------------------------------------------- */

/* Sampled: one request in `sample` on this worker, or the token asked. */
static bool mf__trace_wanted(mf_serve_worker_t *w,
                             const mf_http_request_t *head)
{
    const mf_serve_config_t *c = w->config;
    if (c->trace_token) {
        const mf_http_header_t *h = mf_http_find_header(
            head->headers, head->num_headers, "x-moonflow-trace");
        size_t n = strlen(c->trace_token);
        if (h && h->value_len == n && !memcmp(h->value, c->trace_token, n))
            return true;
    }
    return c->trace_sample && ++w->trace_count % c->trace_sample == 0;
}

/* A sampled request that cannot be traced: counted, and said. */
static mf_serve_trace_t *mf__trace_lost(mf_serve_worker_t *w,
                                        mf_serve_request_t *request)
{
    w->trace_lost++;
    fprintf(stderr, "moonflow: trace file %s: request %s not traced: %s\n",
            w->config->trace_file, mf_serve_request_id(request),
            mf_strerror(MF_ENOMEM));
    return NULL;
}

mf_serve_trace_t *mf_serve_trace_begin(mf_serve_request_t *request,
                                       const mf_http_request_t *head)
{
    mf_serve_worker_t *w = request->w;
    if (w->trace_fd < 0 || !mf__trace_wanted(w, head))
        return NULL;
    mf_serve_trace_t *t = mf_try_malloc(sizeof *t);
    if (!t)
        return mf__trace_lost(w, request);
    memset(t, 0, sizeof *t);
    t->base.refs = 1; /* the request's, until its coroutine ends */
    t->base.release = mf__trace_release;
    t->w = w;
    t->serial = request->serial;
    t->start_ns = mf_monotonic_ns();
    t->wall_minus_mono = (int64_t)(mf__wall_ns() - t->start_ns);
    snprintf(t->id, sizeof t->id, "%s", mf_serve_request_id(request));
    char path[128];
    mf_http_log_escape(path, sizeof path, head->path, head->path_len);
    snprintf(t->name, sizeof t->name, "%.*s %s",
             (int)(head->method_len < 16 ? head->method_len : 16), head->method,
             path);
    if (!mf__span_new(t)) { /* spans[0]: the request itself */
        mf_free(t);
        return mf__trace_lost(w, request);
    }
    return t;
}

void mf_serve_trace_answered(mf_serve_trace_t *t, int status)
{
    if (t->end_ns)
        return;
    t->end_ns = mf_monotonic_ns();
    t->status = status;
}

void mf_serve_trace_end(mf_serve_trace_t *t)
{
    mf_task_trace_unref(&t->base);
}

mf_task_trace_t *mf_serve_trace_context(mf_serve_trace_t *t)
{
    return &t->base;
}
