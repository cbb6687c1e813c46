/*
 * load.c — the HTTP load generator of one loop (moonflow/load.h): the
 * configuration, the run's phases (warm-up, the measured window, the end),
 * the 100 ms tick (Req/Sec samples, response timeouts, live progress) and
 * the stats. The connections are load_conn.c's.
 *
 * May call: the loop, the histogram, load_record.c and load_conn.c through
 * load_int.h (neither calls back here: a connection that must end the run
 * does it through load->stop). Owns mf_load_t.
 */
#include <math.h>
#include <string.h>

#include "load_int.h"
#include "moonflow/error.h"

#define MF_LOAD_TICK_MS 100
#define MF_LOAD_DEFAULT_TIMEOUT_NS 2000000000u

/* ---- creation ------------------------------------------------------------ */

static bool mf__load_config_valid(const mf_load_config_t *cfg)
{
    if (!cfg->targets || !cfg->ntargets || !cfg->connections ||
        !cfg->duration_ns || !(cfg->rate >= 0) || isinf(cfg->rate))
        return false;
    for (size_t i = 0; i < cfg->ntargets; i++)
        if (!cfg->targets[i].request || !cfg->targets[i].request_len)
            return false;
    return true;
}

static char *mf__load_strndup(const char *s, size_t n)
{
    char *p = mf_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* The targets, their request bytes and pipeline depth. */
static int mf__load_copy_targets(mf_load_t *load)
{
    size_t n = load->cfg.ntargets;
    load->targets = mf_xcalloc(n, sizeof(*load->targets));
    load->target_depth = mf_xcalloc(n, sizeof(size_t));
    load->target_head_mask = mf_xcalloc(n, sizeof(uint64_t));
    for (size_t i = 0; i < n; i++) {
        const mf_load_target_t *t = &load->cfg.targets[i];
        load->targets[i] = *t;
        load->targets[i].host = t->host ? strdup(t->host) : NULL;
        load->targets[i].request = mf__load_strndup(t->request, t->request_len);
        if (t->host && !load->targets[i].host)
            return MF_ENOMEM;
        load->target_depth[i] = mf__load_scan_requests(
            t->request, t->request_len, &load->target_head_mask[i]);
        if (!load->target_depth[i])
            return MF_EINVAL; /* not complete HTTP/1.1 requests */
    }
    load->cfg.targets = load->targets;
    return 0;
}

static int mf__load_make_stats(mf_load_t *load)
{
    mf_load_stats_t *s = &load->stats;
    size_t n = load->cfg.ntargets;
    s->ntargets = n;
    s->latency = mf_hdr_create();
    s->rate = mf_hdr_create();
    s->target_requests = mf_xcalloc(n, sizeof(uint64_t));
    s->target_errors = mf_xcalloc(n, sizeof(uint64_t));
    s->target_latency = mf_xcalloc(n, sizeof(mf_hdr_t *));
    if (!s->latency || !s->rate)
        return MF_ENOMEM;
    /* One target: its histogram is the whole one (no second record). */
    for (size_t i = 0; i < n; i++) {
        s->target_latency[i] = n == 1 ? s->latency : mf_hdr_create();
        if (!s->target_latency[i])
            return MF_ENOMEM;
    }
    return 0;
}

static int mf__load_make_conns(mf_load_t *load)
{
    unsigned n = load->cfg.connections;
    load->rbuf_shared = mf_try_malloc(MF_LOAD_READ_BUF);
    load->conns = mf_try_malloc(n * sizeof(*load->conns));
    if (!load->conns || !load->rbuf_shared)
        return MF_ENOMEM;
    /* nconns: those made (a failed one is safe to close and free too). */
    for (; load->nconns < n; load->nconns++)
        if (!mf__load_conn_init(&load->conns[load->nconns], load,
                                load->nconns % load->cfg.ntargets)) {
            load->nconns++;
            return MF_ENOMEM;
        }
    return 0;
}

static void mf__load_phase(mf_timer_t *timer);
static void mf__load_tick(mf_timer_t *timer);
static void mf__load_finish(mf_post_t *post);

static uint64_t mf__load_interval(const mf_load_config_t *cfg)
{
    if (!(cfg->rate > 0))
        return 0; /* closed loop */
    /* Each connection's share of the rate. */
    double ns = 1e9 * cfg->connections / cfg->rate + 0.5;
    return ns < 1      ? 1
           : ns > 1e18 ? UINT64_C(1000000000000000000)
                       : (uint64_t)ns;
}

mf_load_t *mf_load_create(mf_loop_t *loop, const mf_load_config_t *cfg,
                          const mf_load_hooks_t *hooks, int *err)
{
    if (!loop || !cfg || !mf__load_config_valid(cfg)) {
        *err = MF_EINVAL;
        return NULL;
    }
    mf_load_t *load = mf_xcalloc(1, sizeof(*load));
    load->loop = loop;
    load->cfg = *cfg;
    if (!load->cfg.timeout_ns)
        load->cfg.timeout_ns = MF_LOAD_DEFAULT_TIMEOUT_NS;
    if (hooks)
        load->hooks = *hooks;
    load->interval_ns = mf__load_interval(cfg);
    load->stop = mf_load_stop;
    mf_timer_init(&load->phase_timer, mf__load_phase, load);
    mf_timer_init(&load->tick_timer, mf__load_tick, load);
    mf_post_init(&load->done_post, mf__load_finish, load);
    int rc = mf__load_copy_targets(load);
    if (!rc)
        rc = mf__load_make_stats(load);
    if (!rc)
        rc = mf__load_make_conns(load);
    if (rc) {
        mf_load_destroy(load);
        *err = rc;
        return NULL;
    }
    *err = 0;
    return load;
}

void mf_load_destroy(mf_load_t *load)
{
    if (!load)
        return;
    mf_timer_stop(load->loop, &load->phase_timer);
    mf_timer_stop(load->loop, &load->tick_timer);
    for (unsigned i = 0; i < load->nconns; i++) {
        mf__load_conn_close(&load->conns[i]);
        mf__load_conn_free(&load->conns[i]);
    }
    mf_free(load->conns);
    mf_free(load->rbuf_shared);
    mf_load_stats_t *s = &load->stats;
    for (size_t i = 0; s->target_latency && i < s->ntargets; i++)
        if (s->target_latency[i] != s->latency)
            mf_hdr_destroy(s->target_latency[i]);
    mf_hdr_destroy(s->latency);
    mf_hdr_destroy(s->rate);
    mf_free(s->target_latency);
    mf_free(s->target_requests);
    mf_free(s->target_errors);
    for (size_t i = 0; load->targets && i < load->cfg.ntargets; i++) {
        free((char *)load->targets[i].host);
        mf_free((char *)load->targets[i].request);
    }
    mf_free(load->targets);
    mf_free(load->target_depth);
    mf_free(load->target_head_mask);
    mf_free(load);
}

/* ---- the run ------------------------------------------------------------ */

static uint64_t mf__load_ms(uint64_t ns)
{
    return (ns + 999999) / 1000000;
}

static void mf__load_begin_window(mf_load_t *load)
{
    load->window_ns = mf__load_now_ns();
    load->last_tick_ns = load->window_ns;
    load->last_tick_requests = 0;
    load->measuring = true;
    atomic_store_explicit(&load->live_warming, false, memory_order_relaxed);
    mf_timer_start(load->loop, &load->phase_timer,
                   mf__load_ms(load->cfg.duration_ns));
}

/* The loop's timers count whole milliseconds of a truncated clock: one
 * may fire up to a millisecond early, so the phase waits out the rest. */
static void mf__load_phase(mf_timer_t *timer)
{
    mf_load_t *load = timer->data;
    uint64_t now = mf__load_now_ns();
    uint64_t end = load->measuring ? load->window_ns + load->cfg.duration_ns
                                   : load->start_ns + load->cfg.warmup_ns;
    if (now < end)
        mf_timer_start(load->loop, timer, mf__load_ms(end - now));
    else if (!load->measuring)
        mf__load_begin_window(load);
    else
        mf_load_stop(load);
}

void mf_load_start(mf_load_t *load, void (*done)(mf_load_t *, void *),
                   void *user)
{
    load->done = done;
    load->done_user = user;
    load->started = true;
    load->start_ns = mf__load_now_ns();
    mf_timer_start(load->loop, &load->tick_timer, MF_LOAD_TICK_MS);
    if (load->cfg.warmup_ns) {
        atomic_store_explicit(&load->live_warming, true, memory_order_relaxed);
        mf_timer_start(load->loop, &load->phase_timer,
                       mf__load_ms(load->cfg.warmup_ns));
    } else {
        mf__load_begin_window(load);
    }
    for (unsigned i = 0; i < load->cfg.connections && !load->stopping; i++)
        mf__load_conn_open(&load->conns[i]);
}

static void mf__load_publish(mf_load_t *load)
{
    const mf_load_errors_t *e = &load->stats.errors;
    atomic_store_explicit(&load->live_requests, load->stats.requests,
                          memory_order_relaxed);
    atomic_store_explicit(&load->live_errors,
                          e->connect + e->read + e->write + e->status +
                              e->timeout,
                          memory_order_relaxed);
    atomic_store_explicit(&load->live_p99,
                          mf_hdr_percentile(load->stats.latency, 99),
                          memory_order_relaxed);
}

/* Every 100 ms: this loop's requests/s since the last tick (wrk's
 * RECORD_INTERVAL), the response timeouts, the live counters. */
static void mf__load_tick(mf_timer_t *timer)
{
    mf_load_t *load = timer->data;
    uint64_t now = mf__load_now_ns();
    if (load->measuring && now > load->last_tick_ns) {
        uint64_t n = load->stats.requests - load->last_tick_requests;
        mf_hdr_record(
            load->stats.rate,
            (uint64_t)((double)n * 1e9 / (double)(now - load->last_tick_ns)));
        load->last_tick_ns = now;
        load->last_tick_requests = load->stats.requests;
    }
    for (unsigned i = 0; i < load->cfg.connections && !load->stopping; i++)
        mf__load_conn_check_timeout(&load->conns[i], now, load->cfg.timeout_ns);
    mf__load_publish(load);
    if (!load->stopping)
        mf_timer_start(load->loop, &load->tick_timer, MF_LOAD_TICK_MS);
}

void mf_load_stop(mf_load_t *load)
{
    if (!load->started || load->stopping)
        return;
    load->stopping = true;
    if (load->measuring)
        load->stats.duration_ns = mf__load_now_ns() - load->window_ns;
    load->measuring = false;
    mf_timer_stop(load->loop, &load->phase_timer);
    mf_timer_stop(load->loop, &load->tick_timer);
    /* Connections close from the loop, never under a hook's feet. */
    mf_loop_defer(load->loop, &load->done_post);
}

static void mf__load_finish(mf_post_t *post)
{
    mf_load_t *load = post->data;
    for (unsigned i = 0; i < load->cfg.connections; i++)
        mf__load_conn_close(&load->conns[i]);
    mf__load_publish(load);
    atomic_store_explicit(&load->live_warming, false, memory_order_relaxed);
    load->done_called = true;
    if (load->done)
        load->done(load, load->done_user);
}

int mf_load_error(const mf_load_t *load)
{
    return load->error;
}

const mf_load_stats_t *mf_load_stats(const mf_load_t *load)
{
    return &load->stats;
}

void mf_load_progress(const mf_load_t *load, mf_load_progress_t *out)
{
    out->requests =
        atomic_load_explicit(&load->live_requests, memory_order_relaxed);
    out->errors =
        atomic_load_explicit(&load->live_errors, memory_order_relaxed);
    out->p99_ns = atomic_load_explicit(&load->live_p99, memory_order_relaxed);
    out->warming_up =
        atomic_load_explicit(&load->live_warming, memory_order_relaxed);
}
