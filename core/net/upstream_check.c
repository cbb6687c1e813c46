/*
 * upstream_check.c — the active health checker: one thread per process
 * with its own loop, probing every server of every group that asks for
 * checks, each at its group's interval (so a process's workers share one
 * checker instead of each running its own).
 *
 * A probe connects (a TCP check ends there), writes its question (an HTTP
 * request, Redis PING; MySQL speaks first) and reads until the answer can
 * be judged: an HTTP status line with an expected status, +PONG (or
 * -NOAUTH: a server that asks for a password is up), a MySQL greeting
 * (protocol 10, not an error packet). rise good probes in a row take an
 * unhealthy server back, fall bad ones take it out.
 *
 * Ownership: the checker owns its thread, loop and probes; a probe points
 * at its server, which lives until mf_upstream_shutdown stops the checker
 * first. The checker-only fields of a server are touched on its thread.
 *
 * May call: the loop, streams, upstream.c's registry walk and log, libc.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "moonflow/error.h"
#include "moonflow/loop.h"
#include "net/upstream_int.h"

#define MF_CHECK_TICK_MS 50

typedef struct mf_checker mf_checker_t;

typedef struct mf_probe {
    mf_list_t link; /* the checker's probes */
    mf_checker_t *ck;
    mf_upstream_server_t *server;
    mf_upstream_health_conf_t health; /* a copy: the set may change */
    mf_stream_t *stream;
    char out[640];
    struct iovec iov;
    char in[256];
    size_t in_len;
} mf_probe_t;

struct mf_checker {
    pthread_t thread;
    mf_loop_t *loop;
    mf_timer_t tick;
    mf_post_t stop_post;
    mf_list_t probes; /* in flight */
    bool stopping;    /* their streams are closed: free them as they end */
};

static pthread_mutex_t mf__check_lock = PTHREAD_MUTEX_INITIALIZER;
static mf_checker_t *mf__checker;

/* ---- verdicts ----------------------------------------------------------- */

typedef enum { MF_PROBE_MORE, MF_PROBE_GOOD, MF_PROBE_BAD } mf_verdict_t;

static mf_verdict_t mf__http_verdict(const mf_probe_t *p)
{
    const char *eol = memchr(p->in, '\n', p->in_len);
    if (!eol)
        return p->in_len == sizeof p->in ? MF_PROBE_BAD : MF_PROBE_MORE;
    int status = 0;
    if (sscanf(p->in, "HTTP/1.%*1[01] %3d", &status) != 1)
        return MF_PROBE_BAD;
    const mf_upstream_health_conf_t *h = &p->health;
    if (!h->nstatuses)
        return status >= 200 && status < 400 ? MF_PROBE_GOOD : MF_PROBE_BAD;
    for (unsigned i = 0; i < h->nstatuses; i++)
        if (h->statuses[i] == status)
            return MF_PROBE_GOOD;
    return MF_PROBE_BAD;
}

static mf_verdict_t mf__redis_verdict(const mf_probe_t *p)
{
    if (!memchr(p->in, '\n', p->in_len))
        return p->in_len == sizeof p->in ? MF_PROBE_BAD : MF_PROBE_MORE;
    bool pong = p->in_len >= 5 && memcmp(p->in, "+PONG", 5) == 0;
    bool noauth = p->in_len >= 7 && memcmp(p->in, "-NOAUTH", 7) == 0;
    return pong || noauth ? MF_PROBE_GOOD : MF_PROBE_BAD;
}

/* A MySQL packet: 3 bytes length, 1 sequence, then 10 (the handshake's
 * protocol version) or 0xff (an error: too many connections, blocked). */
static mf_verdict_t mf__mysql_verdict(const mf_probe_t *p)
{
    if (p->in_len < 5)
        return MF_PROBE_MORE;
    return (unsigned char)p->in[4] == 10 ? MF_PROBE_GOOD : MF_PROBE_BAD;
}

static mf_verdict_t mf__verdict(const mf_probe_t *p)
{
    switch (p->health.type) {
    case MF_UPSTREAM_CHECK_HTTP:
        return mf__http_verdict(p);
    case MF_UPSTREAM_CHECK_REDIS:
        return mf__redis_verdict(p);
    case MF_UPSTREAM_CHECK_MYSQL:
        return mf__mysql_verdict(p);
    default:
        return MF_PROBE_GOOD;
    }
}

/* ---- a probe ------------------------------------------------------------ */

/* A probe the stop closed calls back once more: freed, and the last one
 * lets the loop end. */
static bool mf__probe_stopped(mf_probe_t *p)
{
    mf_checker_t *ck = p->ck;
    if (!ck->stopping)
        return false;
    mf_list_remove(&p->link);
    free(p);
    if (mf_list_empty(&ck->probes))
        mf_loop_stop(ck->loop);
    return true;
}

static void mf__probe_end(mf_probe_t *p, bool good, const char *why)
{
    if (mf__probe_stopped(p))
        return;
    mf_upstream_server_t *s = p->server;
    const mf_upstream_health_conf_t *h = &p->health;
    if (good) {
        s->fail_run = 0;
        if (++s->ok_run >= h->rise && !atomic_load(&s->healthy)) {
            atomic_store(&s->healthy, true);
            mf__upstream_log(s, "healthy", "active check");
        }
        /* A server the requests took out answers again: back now, not
         * after its fail_timeout and a probe request. */
        int st = MF_UP_DOWN;
        if (s->ok_run >= h->rise &&
            (atomic_compare_exchange_strong(&s->pstate, &st, MF_UP_LIVE) ||
             (st = MF_UP_PROBING,
              atomic_compare_exchange_strong(&s->pstate, &st, MF_UP_LIVE)))) {
            atomic_store(&s->fails, 0);
            mf__upstream_log(s, "up", "active check");
        }
    } else {
        s->ok_run = 0;
        if (++s->fail_run >= h->fall && atomic_load(&s->healthy)) {
            atomic_store(&s->healthy, false);
            atomic_fetch_add(&s->downs, 1);
            mf__upstream_log(s, "unhealthy", why);
        }
    }
    s->checking = false;
    mf_stream_close(p->stream);
    mf_list_remove(&p->link);
    free(p);
}

static void mf__probe_read(mf_stream_t *st, ssize_t status, void *data);

static void mf__probe_more(mf_probe_t *p)
{
    mf_stream_read(p->stream, p->in + p->in_len, sizeof p->in - p->in_len,
                   mf__probe_read, p);
}

static void mf__probe_read(mf_stream_t *st, ssize_t status, void *data)
{
    (void)st;
    mf_probe_t *p = data;
    if (status < 0) {
        mf__probe_end(p, false, mf_strerror((int)status));
        return;
    }
    p->in_len += (size_t)status;
    mf_verdict_t v = mf__verdict(p);
    if (v == MF_PROBE_MORE)
        mf__probe_more(p);
    else
        mf__probe_end(p, v == MF_PROBE_GOOD,
                      v == MF_PROBE_GOOD ? NULL : "unexpected answer");
}

static void mf__probe_written(mf_stream_t *st, ssize_t status, void *data)
{
    (void)st;
    mf_probe_t *p = data;
    if (status < 0)
        mf__probe_end(p, false, mf_strerror((int)status));
    else
        mf__probe_more(p);
}

static void mf__probe_connected(mf_stream_t *st, ssize_t status, void *data)
{
    mf_probe_t *p = data;
    if (status < 0) {
        mf__probe_end(p, false, mf_strerror((int)status));
        return;
    }
    switch (p->health.type) {
    case MF_UPSTREAM_CHECK_TCP:
        mf__probe_end(p, true, NULL);
        return;
    case MF_UPSTREAM_CHECK_MYSQL:
        mf__probe_more(p);
        return;
    default:
        p->iov = (struct iovec){p->out, strlen(p->out)};
        mf_stream_writev(st, &p->iov, 1, mf__probe_written, p);
    }
}

static void mf__probe_question(mf_probe_t *p)
{
    const mf_upstream_server_t *s = p->server;
    if (p->health.type == MF_UPSTREAM_CHECK_HTTP)
        snprintf(p->out, sizeof p->out,
                 "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: "
                 "moonflow-health-check\r\nConnection: close\r\n\r\n",
                 p->health.path, p->health.host[0] ? p->health.host : s->host);
    else if (p->health.type == MF_UPSTREAM_CHECK_REDIS)
        snprintf(p->out, sizeof p->out, "PING\r\n");
}

static void mf__probe_start(mf_checker_t *ck, mf_upstream_server_t *s,
                            const mf_upstream_health_conf_t *h)
{
    mf_probe_t *p = calloc(1, sizeof(*p));
    if (!p)
        return; /* the next tick tries again */
    p->ck = ck;
    p->server = s;
    p->health = *h;
    mf_list_push_back(&ck->probes, &p->link);
    mf__probe_question(p);
    s->checking = true;
    p->stream = mf_stream_create(ck->loop, MF_STREAM_TCP);
    mf_stream_set_timeouts(p->stream, h->timeout_ms, h->timeout_ms,
                           h->timeout_ms);
    mf_stream_connect(p->stream, s->host, s->port, mf__probe_connected, p);
}

/* ---- the tick: start the probes that are due ---------------------------- */

static void mf__tier_due(mf_checker_t *ck, const mf_upstream_tier_t *tier,
                         const mf_upstream_health_conf_t *h, uint64_t now)
{
    for (size_t i = 0; i < tier->n; i++) {
        mf_upstream_server_t *s = tier->servers[i];
        if (s->checking || now < s->next_check_ms)
            continue;
        s->next_check_ms = now + h->interval_ms;
        mf__probe_start(ck, s, h);
    }
}

static void mf__group_due(void *ud, mf_upstream_t *up)
{
    mf_checker_t *ck = ud;
    const mf_upstream_set_t *set = atomic_load(&up->set);
    const mf_upstream_health_conf_t *h = &set->conf.health;
    if (h->type == MF_UPSTREAM_CHECK_NONE)
        return;
    uint64_t now = mf_loop_now(ck->loop);
    mf__tier_due(ck, &set->primary, h, now);
    mf__tier_due(ck, &set->backup, h, now);
}

static void mf__tick(mf_timer_t *timer)
{
    mf_checker_t *ck = timer->data;
    mf__upstream_walk_locked(mf__group_due, ck);
    mf_timer_start(ck->loop, &ck->tick, MF_CHECK_TICK_MS);
}

static void mf__stop_on_loop(mf_post_t *post)
{
    mf_checker_t *ck = post->data;
    mf_timer_stop(ck->loop, &ck->tick);
    ck->stopping = true;
    if (mf_list_empty(&ck->probes)) {
        mf_loop_stop(ck->loop);
        return;
    }
    mf_list_t *l;
    mf_list_foreach(l, &ck->probes)
        mf_stream_close(mf_container_of(l, mf_probe_t, link)->stream);
}

static void *mf__checker_main(void *arg)
{
    mf_checker_t *ck = arg;
    mf_loop_run(ck->loop, MF_RUN_FOREVER);
    return NULL;
}

void mf__upstream_check_start(void)
{
    pthread_mutex_lock(&mf__check_lock);
    if (!mf__checker) {
        mf_checker_t *ck = mf_xcalloc(1, sizeof(*ck));
        mf_list_init(&ck->probes);
        ck->loop = mf_loop_create();
        mf_timer_init(&ck->tick, mf__tick, ck);
        if (ck->loop)
            mf_timer_start(ck->loop, &ck->tick, 0);
        ck->stop_post.cb = mf__stop_on_loop;
        ck->stop_post.data = ck;
        if (ck->loop &&
            pthread_create(&ck->thread, NULL, mf__checker_main, ck) == 0) {
            mf__checker = ck;
        } else {
            fprintf(stderr, "moonflow: upstream: no health checker thread\n");
            if (ck->loop)
                mf_loop_destroy(ck->loop);
            free(ck);
        }
    }
    pthread_mutex_unlock(&mf__check_lock);
}

void mf__upstream_check_stop(void)
{
    pthread_mutex_lock(&mf__check_lock);
    mf_checker_t *ck = mf__checker;
    mf__checker = NULL;
    pthread_mutex_unlock(&mf__check_lock);
    if (!ck)
        return;
    mf_loop_post(ck->loop, &ck->stop_post);
    pthread_join(ck->thread, NULL);
    mf_loop_destroy(ck->loop);
    free(ck);
}
