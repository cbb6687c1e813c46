/*
 * lua/serve/metrics.c — the server's own metrics and the /metrics page
 * (config: metrics = { path = "/metrics" }).
 *
 * Every finished request (answered, refused by the parser, or left by its
 * client: 499) counts in moonflow_http_requests_total{route, method,
 * status}, moonflow_http_request_duration_seconds{route} and the body
 * bytes in and out by route. route is the path of the script that ran, ""
 * when none did (no script: 404, a refused request), so its values are
 * bounded by the site's scripts; method is one of the standard ones or
 * "other". Each worker writes its own shard of the process's registry
 * (moonflow/metrics.h) through a small direct-mapped cache of series by
 * (route, method, status): a request takes no lock, allocates nothing and
 * makes no syscall beyond the clock reads it shares with the access log.
 * Every task the worker runs counts in moonflow_tasks_total{kind, state}
 * and moonflow_task_duration_seconds{kind}, told by the worker's task
 * observer (observe.c), through a cache by kind and state. A timer sets,
 * once a second, the worker's Lua memory, its open and idle connections,
 * its loop's lag (how late that timer fired), the route scripts it loaded
 * again (and those that failed), the pools of its HTTP, Redis and MySQL
 * clients by endpoint (connections, idle ones, waiters, evictions; Redis writes
 * and commands: the batching), and on worker 0 the compute pool's
 * threads, queue, running and completed jobs. The page adds the workers'
 * shards up, with every user metric of mf.metrics.
 *
 * Owns: the worker's cache (freed with the worker). May call: the registry,
 * the HTTP server's exchange, the Lua host.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <moonflow/endpoint.h>
#include <moonflow/error.h>
#include <moonflow/metrics.h>
#include <moonflow/pool.h>
#include <moonflow/task.h>
#include <moonflow/upstream.h>

#include "serve.h"

#define MF_METRICS_CACHE 512 /* entries, a power of two */
#define MF_METRICS_ROUTE 96  /* route bytes kept in an entry */

/* The methods a label may name; the rest count as "other". */
static const char *const mf__methods[] = {
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "other"};
#define MF_METHOD_OTHER 7

typedef struct mf_metrics_entry {
    uint64_t hash; /* 0: empty */
    uint16_t status;
    uint8_t method;
    uint8_t route_len;
    char route[MF_METRICS_ROUTE];
    mf_metric_t *requests; /* NULL in a keyed entry: refused (mf__fill) */
    mf_metric_t *duration;
    mf_metric_t *bytes_in, *bytes_out;
} mf_metrics_entry_t;

/* A task kind's series for one final state; kind is the kind's name
 * pointer (mf_task_ops_t.name, a constant), NULL: empty. count NULL: the
 * registry refused the series (reported then; not asked again until the
 * entry is taken by another key). */
typedef struct mf_task_entry {
    const char *kind;
    int state;
    mf_metric_t *count, *duration;
} mf_task_entry_t;

#define MF_TASK_CACHE 64 /* entries, a power of two */

/* What one protocol's endpoints export, by {worker, endpoint}: a family
 * per number of mf_endpoint_stats_t it exports, NULL for those it doesn't. */
typedef struct mf_endpoint_families {
    const char *protocol; /* mf_endpoint_ops_t.protocol */
    mf_metric_family_t *conns, *idle, *waiters, *connects, *evictions,
        *requests, *writes;
} mf_endpoint_families_t;

/* HTTP/2's counts of mf_http_server_stats_t, exported as
 * moonflow_http2_events_total{event=...}. */
#define MF_H2_EVENTS 7
static const char *const mf__h2_events[MF_H2_EVENTS] = {
    "connections", "streams",         "resets_received", "calm_goaways",
    "floods",      "headers_refused", "protocol_errors"};

static void mf__h2_counts(const mf_http_server_stats_t *st,
                          uint64_t out[MF_H2_EVENTS])
{
    out[0] = st->h2_connections;
    out[1] = st->h2_streams;
    out[2] = st->h2_resets_received;
    out[3] = st->h2_calm_goaways;
    out[4] = st->h2_floods;
    out[5] = st->h2_headers_refused;
    out[6] = st->h2_protocol_errors;
}

enum {
    MF_ENDPOINT_HTTP,
    MF_ENDPOINT_REDIS,
    MF_ENDPOINT_MYSQL,
    MF_ENDPOINT_PROTOCOLS
};

typedef struct mf_serve_metrics {
    mf_metric_family_t *requests, *duration, *bytes_in, *bytes_out;
    mf_metric_family_t *tasks, *task_duration;
    /* set once a second (mf__tick): this worker's ... */
    mf_metric_t *lua_memory, *connections, *idle, *loop_lag;
    mf_metric_t *reloads_ok, *reloads_failed;
    uint64_t reloads_seen, reload_failures_seen;
    /* HTTP/2's counts (mf__h2_events), as last read */
    mf_metric_t *h2[MF_H2_EVENTS];
    uint64_t h2_seen[MF_H2_EVENTS];
    uint64_t tick_due_ns; /* when the tick should fire: its lateness */
    bool tick_refused;    /* this tick has said a series was refused */
    /* ... and the process's compute pool (worker 0 only) */
    mf_metric_t *pool_threads, *pool_queued, *pool_active, *pool_completed;
    uint64_t pool_completed_seen;
    /* by {worker, endpoint}: the clients' endpoints, a protocol each */
    mf_endpoint_families_t endpoints[MF_ENDPOINT_PROTOCOLS];
    /* by {upstream, server}: the process's groups (worker 0 sets them) */
    mf_metric_family_t *up_live, *up_active, *up_requests, *up_failures,
        *up_downs, *up_latency;
    mf_task_entry_t task_cache[MF_TASK_CACHE];
    mf_timer_t timer;
    /* the entry the last request was counted in: the next one, most
     * often of the same key, is checked against it before any hashing */
    mf_metrics_entry_t *last;
    mf_metrics_entry_t cache[MF_METRICS_CACHE];
} mf_serve_metrics_t;

static int mf__family(mf_serve_worker_t *w, mf_metric_family_t **out,
                      const char *name, const char *help, mf_metric_type_t type,
                      const char *const *labels, size_t n)
{
    mf_metric_spec_t spec = {name, help, type, labels, n, NULL, 0};
    char why[200];
    int rc = mf_metrics_family(w->metrics, &spec, out, why, sizeof why);
    if (rc)
        fprintf(stderr, "moonflow serve: metrics: %s\n",
                rc == MF_ENOMEM ? mf_strerror(rc) : why);
    return rc;
}

/* One series of a family with at most one label: the worker's gauges and
 * the reload counters (value: the label's), or the pool's (no label). */
static int mf__one(mf_serve_worker_t *w, mf_metric_t **out, const char *name,
                   const char *help, mf_metric_type_t type, const char *label,
                   const char *value)
{
    mf_metric_family_t *f;
    const char *const labels[] = {label};
    int rc = mf__family(w, &f, name, help, type, labels, label ? 1 : 0);
    const char *const values[] = {value};
    return rc ? rc : mf_metric_series(f, values, label ? 1 : 0, out);
}

static void mf__tick_pool(mf_serve_worker_t *w, mf_serve_metrics_t *m)
{
    mf_pool_t *pool = mf_loop_pool(w->loop);
    if (!pool || !m->pool_threads)
        return;
    mf_pool_stats_t st;
    mf_pool_stats(pool, &st);
    mf_metric_set(m->pool_threads, w->id, st.threads);
    mf_metric_set(m->pool_queued, w->id, (double)st.queued);
    mf_metric_set(m->pool_active, w->id, st.active);
    mf_metric_add(m->pool_completed, w->id,
                  (double)(st.completed - m->pool_completed_seen));
    m->pool_completed_seen = st.completed;
}

/* A series by worker and endpoint, looked up at each tick (a lock per
 * series a second, not per request): family f's {worker, endpoint}. A
 * refusal is said once a tick. */
static void mf__set_by_endpoint(mf_serve_worker_t *w, mf_metric_family_t *f,
                                const char *endpoint, double v)
{
    char id[16];
    snprintf(id, sizeof id, "%u", w->id);
    const char *values[] = {id, endpoint};
    mf_metric_t *s;
    int rc = mf_metric_series(f, values, 2, &s);
    if (!rc) {
        mf_metric_set(s, w->id, v);
    } else if (!w->mstate->tick_refused) {
        w->mstate->tick_refused = true;
        fprintf(stderr,
                "moonflow serve: metrics: the pool series of %s not set: "
                "%s\n",
                endpoint, mf_strerror(rc));
    }
}

/* A family's series for st's endpoint, when the protocol exports it. */
static void mf__set_endpoint_number(mf_serve_worker_t *w, mf_metric_family_t *f,
                                    const mf_endpoint_stats_t *st, double v)
{
    if (f)
        mf__set_by_endpoint(w, f, st->label, v);
}

/* One endpoint of the walk: the numbers its protocol exports. */
static void mf__tick_endpoint(void *ud, const mf_endpoint_stats_t *st)
{
    mf_serve_worker_t *w = ud;
    const mf_endpoint_families_t *f = NULL;
    for (size_t i = 0; !f && i < MF_ENDPOINT_PROTOCOLS; i++)
        if (w->mstate->endpoints[i].protocol &&
            strcmp(w->mstate->endpoints[i].protocol, st->protocol) == 0)
            f = &w->mstate->endpoints[i];
    if (!f)
        return; /* streams and load runs: not exported */
    mf__set_endpoint_number(w, f->conns, st, (double)st->connections);
    mf__set_endpoint_number(w, f->idle, st, (double)st->idle);
    mf__set_endpoint_number(w, f->waiters, st, (double)st->waiters);
    mf__set_endpoint_number(w, f->connects, st, (double)st->connects);
    mf__set_endpoint_number(w, f->evictions, st, (double)st->evictions);
    mf__set_endpoint_number(w, f->requests, st, (double)st->requests);
    mf__set_endpoint_number(w, f->writes, st, (double)st->writes);
}

/* One server of an upstream group: process-wide numbers, set by worker 0
 * alone (the other workers' shards stay 0, so the sum is the number). */
static void mf__tick_upstream(void *ud, const mf_upstream_server_stats_t *st)
{
    mf_serve_worker_t *w = ud;
    mf_serve_metrics_t *m = w->mstate;
    const char *values[] = {st->group, st->address};
    const struct {
        mf_metric_family_t *f;
        double v;
    } nums[] = {
        {m->up_live, strcmp(st->state, "up") == 0 ? 1 : 0},
        {m->up_active, st->active},
        {m->up_requests, (double)st->requests},
        {m->up_failures, (double)st->failures},
        {m->up_downs, (double)st->downs},
        {m->up_latency, st->latency_ms / 1e3},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        mf_metric_t *s;
        if (nums[i].f && mf_metric_series(nums[i].f, values, 2, &s) == 0)
            mf_metric_set(s, w->id, nums[i].v);
    }
}

/* Once a second: what is read rather than counted. The loop's lag is how
 * late this timer fired (a handler that hogs the loop delays it). */
static void mf__tick(mf_timer_t *timer)
{
    mf_serve_worker_t *w = timer->data;
    mf_serve_metrics_t *m = w->mstate;
    uint64_t now = mf_monotonic_ns();
    m->tick_refused = false;
    if (m->tick_due_ns)
        mf_metric_set(
            m->loop_lag, w->id,
            now > m->tick_due_ns ? (double)(now - m->tick_due_ns) / 1e9 : 0);
    mf_metric_set(m->lua_memory, w->id, (double)mf_lua_host_memory(w->host));
    if (w->server) {
        mf_http_server_stats_t st;
        mf_http_server_stats(w->server, &st);
        mf_metric_set(m->connections, w->id, (double)st.connections);
        mf_metric_set(m->idle, w->id, (double)st.idle);
        uint64_t h2[MF_H2_EVENTS];
        mf__h2_counts(&st, h2);
        for (int i = 0; i < MF_H2_EVENTS; i++) {
            mf_metric_add(m->h2[i], w->id, (double)(h2[i] - m->h2_seen[i]));
            m->h2_seen[i] = h2[i];
        }
    }
    uint64_t done, failed;
    mf_serve_routes_reloads(w->routes, &done, &failed);
    mf_metric_add(m->reloads_ok, w->id,
                  (double)((done - failed) -
                           (m->reloads_seen - m->reload_failures_seen)));
    mf_metric_add(m->reloads_failed, w->id,
                  (double)(failed - m->reload_failures_seen));
    m->reloads_seen = done;
    m->reload_failures_seen = failed;
    mf__tick_pool(w, m);
    mf_endpoint_stats(w->loop, NULL, mf__tick_endpoint, w);
    if (w->id == 0)
        mf_upstream_stats(NULL, mf__tick_upstream, w);
    m->tick_due_ns = now + 1000000000u;
    mf_timer_start(w->loop, timer, 1000);
}

/* The families by worker and endpoint of the clients' pools. */
static int mf__open_clients(mf_serve_worker_t *w, mf_serve_metrics_t *m)
{
    static const char *const we[] = {"worker", "endpoint"};
    const mf_metric_type_t G = MF_METRIC_GAUGE, C = MF_METRIC_COUNTER;
    mf_endpoint_families_t *http = &m->endpoints[MF_ENDPOINT_HTTP],
                           *redis = &m->endpoints[MF_ENDPOINT_REDIS],
                           *mysql = &m->endpoints[MF_ENDPOINT_MYSQL];
    http->protocol = "http";
    redis->protocol = "redis";
    mysql->protocol = "mysql";
    const struct {
        mf_metric_family_t **out;
        const char *name, *help;
        mf_metric_type_t type;
    } fams[] = {
        {&http->conns, "moonflow_http_client_connections",
         "HTTP client connections open to each endpoint.", G},
        {&http->idle, "moonflow_http_client_connections_idle",
         "HTTP client connections kept for the next request.", G},
        {&http->waiters, "moonflow_http_client_waiters",
         "HTTP requests waiting for a connection slot.", G},
        {&http->evictions, "moonflow_http_client_evictions_total",
         "Idle HTTP client connections closed (timed out, or by the "
         "server).",
         C},
        {&redis->conns, "moonflow_redis_dedicated_connections",
         "Dedicated Redis connections (transactions, blocking commands).", G},
        {&redis->idle, "moonflow_redis_dedicated_connections_idle",
         "Idle dedicated Redis connections.", G},
        {&redis->waiters, "moonflow_redis_waiters",
         "Redis tasks waiting for a dedicated connection.", G},
        {&redis->connects, "moonflow_redis_connects_total",
         "Redis connections opened.", C},
        {&redis->writes, "moonflow_redis_writes_total",
         "Writes of Redis commands (commands / writes: the batching).", C},
        {&redis->requests, "moonflow_redis_commands_total",
         "Redis commands sent.", C},
        {&mysql->conns, "moonflow_mysql_connections",
         "Pooled MySQL connections, opening included.", G},
        {&mysql->idle, "moonflow_mysql_connections_idle",
         "Idle pooled MySQL connections.", G},
        {&mysql->waiters, "moonflow_mysql_waiters",
         "MySQL tasks waiting for a connection.", G},
        {&mysql->connects, "moonflow_mysql_connects_total",
         "MySQL connections opened.", C},
        {&mysql->evictions, "moonflow_mysql_evictions_total",
         "Idle MySQL connections closed (timed out, or by the server).", C},
    };
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof fams / sizeof fams[0]; i++)
        rc = mf__family(w, fams[i].out, fams[i].name, fams[i].help,
                        fams[i].type, we, 2);
    return rc;
}

/* The families by {upstream, server} of the upstream groups. */
static int mf__open_upstreams(mf_serve_worker_t *w, mf_serve_metrics_t *m)
{
    static const char *const us[] = {"upstream", "server"};
    const mf_metric_type_t G = MF_METRIC_GAUGE, C = MF_METRIC_COUNTER;
    const struct {
        mf_metric_family_t **out;
        const char *name, *help;
        mf_metric_type_t type;
    } fams[] = {
        {&m->up_live, "moonflow_upstream_server_up",
         "1 while an upstream server takes requests (not down, unhealthy, "
         "probing or draining).",
         G},
        {&m->up_active, "moonflow_upstream_server_active",
         "Requests in flight to an upstream server.", G},
        {&m->up_requests, "moonflow_upstream_server_requests_total",
         "Attempts sent to an upstream server.", C},
        {&m->up_failures, "moonflow_upstream_server_failures_total",
         "Attempts to an upstream server that failed.", C},
        {&m->up_downs, "moonflow_upstream_server_downs_total",
         "Times an upstream server was taken out (passive or active).", C},
        {&m->up_latency, "moonflow_upstream_server_latency_seconds",
         "The moving average of an upstream server's answer time.", G},
    };
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof fams / sizeof fams[0]; i++)
        rc = mf__family(w, fams[i].out, fams[i].name, fams[i].help,
                        fams[i].type, us, 2);
    return rc;
}

/* The series the tick sets. */
static int mf__open_gauges(mf_serve_worker_t *w, mf_serve_metrics_t *m)
{
    char id[16];
    snprintf(id, sizeof id, "%u", w->id);
    const mf_metric_type_t G = MF_METRIC_GAUGE, C = MF_METRIC_COUNTER;
    int rc = mf__one(w, &m->lua_memory, "moonflow_lua_memory_bytes",
                     "Bytes held by each worker's Lua state.", G, "worker", id);
    if (!rc)
        rc =
            mf__one(w, &m->connections, "moonflow_http_connections",
                    "Open client connections of each worker.", G, "worker", id);
    if (!rc)
        rc = mf__one(w, &m->idle, "moonflow_http_connections_idle",
                     "Keep-alive connections waiting for a request.", G,
                     "worker", id);
    if (!rc)
        rc = mf__one(w, &m->loop_lag, "moonflow_loop_lag_seconds",
                     "How late each worker's once-a-second timer fired last.",
                     G, "worker", id);
    if (!rc)
        rc = mf__one(w, &m->reloads_ok, "moonflow_reloads_total",
                     "Route scripts loaded again after a change, by result "
                     "(failed: the previous version kept serving).",
                     C, "result", "ok");
    if (!rc)
        rc = mf__one(w, &m->reloads_failed, "moonflow_reloads_total", NULL, C,
                     "result", "failed");
    for (int i = 0; !rc && i < MF_H2_EVENTS; i++)
        rc = mf__one(w, &m->h2[i], "moonflow_http2_events_total",
                     i ? NULL
                       : "HTTP/2 connections, streams, RST_STREAMs received, "
                         "and connections ended for ENHANCE_YOUR_CALM (rapid "
                         "reset), a flood, a header block refused or a "
                         "protocol error.",
                     C, "event", mf__h2_events[i]);
    if (rc || w->id != 0 || !mf_loop_pool(w->loop))
        return rc;
    rc = mf__one(w, &m->pool_threads, "moonflow_pool_threads",
                 "Threads of the compute pool (mf.go).", G, NULL, NULL);
    if (!rc)
        rc = mf__one(w, &m->pool_queued, "moonflow_pool_queued_jobs",
                     "Jobs waiting for a pool thread.", G, NULL, NULL);
    if (!rc)
        rc = mf__one(w, &m->pool_active, "moonflow_pool_active_jobs",
                     "Jobs running on the pool.", G, NULL, NULL);
    if (!rc)
        rc =
            mf__one(w, &m->pool_completed, "moonflow_pool_jobs_completed_total",
                    "Jobs the pool has run.", C, NULL, NULL);
    return rc;
}

/* "success", "timeout", "system error" ... as label values: words with _ */
static void mf__state_label(int state, char *out, size_t cap)
{
    snprintf(out, cap, "%s", mf_state_name(state));
    for (char *p = out; *p; p++)
        if (*p == ' ')
            *p = '_';
}

/* One count and one duration per finished task. */
void mf_serve_metrics_task(mf_serve_worker_t *w, mf_task_t *task, uint64_t ns)
{
    mf_serve_metrics_t *m = w->mstate;
    const char *kind = mf_task_kind(task);
    int state = mf_task_state(task);
    uintptr_t h = ((uintptr_t)kind >> 3) * 31 + (unsigned)state;
    mf_task_entry_t *e = &m->task_cache[h & (MF_TASK_CACHE - 1)];
    if (e->kind != kind || e->state != state) {
        char label[32];
        mf__state_label(state, label, sizeof label);
        const char *values[] = {kind, label};
        e->kind = kind;
        e->state = state;
        int rc = mf_metric_series(m->tasks, values, 2, &e->count);
        if (!rc)
            rc = mf_metric_series(m->task_duration, values, 1, &e->duration);
        if (rc) {
            fprintf(stderr,
                    "moonflow serve: metrics: %s tasks ending %s not "
                    "counted: %s\n",
                    kind, label, mf_strerror(rc));
            e->count = NULL;
        }
    }
    if (!e->count)
        return;
    mf_metric_add(e->count, w->id, 1);
    mf_metric_observe(e->duration, w->id, (double)ns / 1e9);
}

int mf_serve_metrics_open(mf_serve_worker_t *w)
{
    if (!w->config->metrics_path)
        return 0;
    mf_serve_metrics_t *m = mf_try_malloc(sizeof *m);
    if (!m)
        return MF_ENOMEM;
    memset(m, 0, sizeof *m);
    /* Initialised first: a failed open still ends in
     * mf_serve_metrics_close, which stops it. */
    mf_timer_init(&m->timer, mf__tick, w);
    w->mstate = m;
    if (!w->config->metrics_listen) /* else served there instead */
        w->metrics_page_len = strlen(w->config->metrics_path);
    static const char *const rms[] = {"route", "method", "status"};
    static const char *const route[] = {"route"};
    static const char *const kind_state[] = {"kind", "state"};
    int rc = mf__family(w, &m->requests, "moonflow_http_requests_total",
                        "HTTP requests finished, by route (the script's "
                        "path, \"\" for none), method and status.",
                        MF_METRIC_COUNTER, rms, 3);
    if (!rc)
        rc = mf__family(w, &m->duration,
                        "moonflow_http_request_duration_seconds",
                        "Time from the request's head to its answer.",
                        MF_METRIC_HISTOGRAM, route, 1);
    if (!rc)
        rc = mf__family(
            w, &m->bytes_in, "moonflow_http_request_body_bytes_total",
            "Request body bytes received.", MF_METRIC_COUNTER, route, 1);
    if (!rc)
        rc = mf__family(
            w, &m->bytes_out, "moonflow_http_response_body_bytes_total",
            "Response body bytes sent.", MF_METRIC_COUNTER, route, 1);
    if (!rc)
        rc = mf__family(w, &m->tasks, "moonflow_tasks_total",
                        "Tasks finished, by kind (http, redis, mysql, "
                        "kafka_produce, timer, go, lua, parallel ...) and "
                        "final state.",
                        MF_METRIC_COUNTER, kind_state, 2);
    if (!rc)
        rc = mf__family(w, &m->task_duration, "moonflow_task_duration_seconds",
                        "Time from a task's start to its result.",
                        MF_METRIC_HISTOGRAM, kind_state, 1);
    if (!rc)
        rc = mf__open_gauges(w, m);
    if (!rc)
        rc = mf__open_clients(w, m);
    if (!rc)
        rc = mf__open_upstreams(w, m);
    if (rc)
        return rc;
    mf_timer_set_ref(w->loop, &m->timer, false);
    mf__tick(&m->timer);
    return 0;
}

void mf_serve_metrics_close(mf_serve_worker_t *w)
{
    if (!w->mstate)
        return;
    mf_timer_stop(w->loop, &w->mstate->timer);
    mf_free(w->mstate);
    w->mstate = NULL;
    w->metrics_page_len = 0;
}

/* The label of a method: GET found at once (most requests). */
static unsigned mf__method(const mf_http_request_t *req)
{
    if (req && req->method_len == 3 && !memcmp(req->method, "GET", 3))
        return 0;
    for (unsigned i = 1; req && i < MF_METHOD_OTHER; i++)
        if (strlen(mf__methods[i]) == req->method_len &&
            memcmp(mf__methods[i], req->method, req->method_len) == 0)
            return i;
    return MF_METHOD_OTHER;
}

static uint64_t mf__key(const char *route, size_t len, unsigned method,
                        int status)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a, then the small parts */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)route[i]) * 1099511628211ULL;
    h = (h ^ method) * 1099511628211ULL;
    h = (h ^ (unsigned)status) * 1099511628211ULL;
    return h | 1; /* never 0: the empty mark */
}

/* Fills entry e for its key from the registry (a lock, once per key and
 * worker). A refusal is reported once and leaves the entry keyed with no
 * series: its requests are not counted, and the registry is not asked
 * again until another key takes the entry. */
static void mf__fill(mf_serve_metrics_t *m, mf_metrics_entry_t *e)
{
    char route[MF_METRICS_ROUTE + 1], status[8];
    memcpy(route, e->route, e->route_len);
    route[e->route_len] = '\0';
    snprintf(status, sizeof status, "%d", e->status);
    const char *rms[] = {route, mf__methods[e->method], status};
    const char *r[] = {route};
    int rc = mf_metric_series(m->requests, rms, 3, &e->requests);
    if (!rc)
        rc = mf_metric_series(m->duration, r, 1, &e->duration);
    if (!rc)
        rc = mf_metric_series(m->bytes_in, r, 1, &e->bytes_in);
    if (!rc)
        rc = mf_metric_series(m->bytes_out, r, 1, &e->bytes_out);
    if (rc) {
        fprintf(stderr,
                "moonflow serve: metrics: request of route \"%s\" not "
                "counted: %s\n",
                route, mf_strerror(rc));
        e->requests = NULL;
    }
}

static bool mf__entry_is(const mf_metrics_entry_t *e, uint64_t h,
                         const char *route, size_t len, unsigned method,
                         int status)
{
    return e->hash == h && e->status == status && e->method == method &&
           e->route_len == len && memcmp(e->route, route, len) == 0;
}

/* The cache entry of a key, filled from the registry when new. Two keys
 * meeting in one slot both stay cached: the second lives in the next slot
 * (a third takes that one over). */
static mf_metrics_entry_t *mf__entry(mf_serve_metrics_t *m, uint64_t h,
                                     const char *route, size_t len,
                                     unsigned method, int status)
{
    size_t i = h & (MF_METRICS_CACHE - 1);
    mf_metrics_entry_t *e = &m->cache[i];
    mf_metrics_entry_t *next = &m->cache[(i + 1) & (MF_METRICS_CACHE - 1)];
    if (mf__entry_is(e, h, route, len, method, status))
        return e;
    if (mf__entry_is(next, h, route, len, method, status))
        return next;
    if (e->hash)
        e = next;
    e->hash = h;
    e->status = (uint16_t)status;
    e->method = (uint8_t)method;
    e->route_len = (uint8_t)len;
    memcpy(e->route, route, len);
    mf__fill(m, e);
    return e;
}

void mf_serve_metrics_request(mf_serve_worker_t *w,
                              const mf_http_request_t *req, bool routed,
                              int status, size_t bytes_in, size_t bytes_out,
                              double seconds)
{
    mf_serve_metrics_t *m = w->mstate;
    size_t len = routed && req ? req->path_len : 0;
    const char *route = routed && req ? req->path : "";
    if (len > MF_METRICS_ROUTE)
        len = MF_METRICS_ROUTE; /* a route this long: its first bytes */
    unsigned method = mf__method(req);
    mf_metrics_entry_t *e = m->last; /* its fields are its key, now */
    if (!e || e->status != status || e->method != method ||
        e->route_len != len || memcmp(e->route, route, len) != 0) {
        uint64_t h = mf__key(route, len, method, status);
        m->last = e = mf__entry(m, h, route, len, method, status);
    }
    if (!e->requests)
        return; /* refused when filled, and said so then */
    mf_metric_add(e->requests, w->id, 1);
    mf_metric_observe(e->duration, w->id, seconds);
    mf_metric_add(e->bytes_in, w->id, (double)bytes_in);
    mf_metric_add(e->bytes_out, w->id, (double)bytes_out);
}

void mf_serve_metrics_exchange(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                               bool routed, int status, size_t bytes_out,
                               double seconds)
{
    size_t in = 0;
    mf_http_exchange_body(ex, &in);
    mf_serve_metrics_request(w, mf_http_exchange_request(ex), routed, status,
                             in, bytes_out, seconds);
}

bool mf_serve_metrics_is_page(const mf_serve_worker_t *w,
                              const mf_http_request_t *req)
{
    const char *path = w->config->metrics_path;
    return w->metrics_page_len && /* else served elsewhere, or none */
           w->metrics_page_len == req->path_len &&
           memcmp(path, req->path, req->path_len) == 0;
}

void mf_serve_metrics_answer(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                             const struct timespec *start)
{
    static const char type[] =
        "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n";
    static const char refused[] = "503 no memory for the metrics\n";
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    size_t len;
    char *text = mf_metrics_text(w->metrics, &len);
    int status = text ? 200 : 503;
    if (!text)
        fprintf(stderr, "moonflow serve: metrics: no memory for the page\n");
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double seconds = (double)(now.tv_sec - start->tv_sec) +
                     (double)(now.tv_nsec - start->tv_nsec) / 1e9;
    size_t bytes = text ? len : sizeof refused - 1;
    char id[MF_SERVE_ID_MAX + 1];
    mf_serve_make_request_id(w, req, id);
    if (w->log_fd >= 0)
        mf_serve_log_request(w, req, mf_http_exchange_peer(ex), status, bytes,
                             seconds, id);
    mf_serve_metrics_request(w, req, true, status, 0, bytes, seconds);
    mf_http_exchange_set_status(ex, status);
    mf_http_exchange_add_header_static(ex, type, sizeof type - 1);
    mf_serve_add_request_id(w, ex, id);
    mf_http_exchange_send_body(ex, text ? text : refused, bytes);
    mf_free(text);
}
