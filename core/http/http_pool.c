/*
 * http_pool.c — the client's per-loop connection pool: endpoints, idle
 * keep-alive connections, the wait queue, and opening connections (resolve,
 * non-blocking connect, TLS handshake).
 */
#include <errno.h>
#include <openssl/err.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http_client_int.h"
#include "net/net.h"

static void mf__client_conn_on_io(mf_io_t *io, unsigned events);

/* ---- the pool --------------------------------------------------------------
 */

static void mf__client_conn_destroy_now(mf_http_client_conn_t *conn);

static void mf__pool_free(mf_loop_t *loop, void *ext)
{
    mf_http_pool_t *pool = ext;
    (void)loop;
    mf_list_t *node;
    while ((node = mf_list_pop_front(&pool->endpoints)) != NULL) {
        mf_http_endpoint_t *ep =
            mf_container_of(node, mf_http_endpoint_t, link);
        mf_list_t *c;
        while ((c = mf_list_pop_front(&ep->conns)) != NULL)
            mf__client_conn_destroy_now(
                mf_container_of(c, mf_http_client_conn_t, link));
        free(ep->ca_file);
        mf_free(ep);
    }
    mf_free(pool);
}

/* Among the protocol clients' state, the last to go (loop.h). */
#define MF_HTTP_POOL_LOOP_RANK 20
static mf_loop_key_t mf__http_pool_key =
    MF_LOOP_KEY_INIT(MF_HTTP_POOL_LOOP_RANK, mf__pool_free);

mf_http_pool_t *mf__http_pool(mf_loop_t *loop)
{
    mf_http_pool_t *pool = mf_loop_get(loop, &mf__http_pool_key);
    if (pool)
        return pool;
    pool = mf_xcalloc(1, sizeof(*pool));
    pool->loop = loop;
    mf_list_init(&pool->endpoints);
    pool->config.max_connections_per_endpoint = 64;
    pool->config.idle_timeout_ms = 60000;
    mf_loop_set(loop, &mf__http_pool_key, pool);
    return pool;
}

void mf_http_pool_configure(mf_loop_t *loop,
                            const mf_http_pool_config_t *config)
{
    mf_http_pool_t *pool = mf__http_pool(loop);
    pool->config = *config;
    if (!pool->config.max_connections_per_endpoint)
        pool->config.max_connections_per_endpoint = 64;
}

uint64_t mf_http_pool_connects(mf_loop_t *loop)
{
    mf_http_pool_t *pool = mf_loop_get(loop, &mf__http_pool_key);
    return pool ? pool->connects : 0;
}

static bool mf__same_ca(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

mf_http_endpoint_t *mf__http_endpoint(mf_http_pool_t *pool, const char *host,
                                      uint16_t port, bool tls, bool verify,
                                      const char *ca_file)
{
    if (!tls || !verify)
        ca_file = NULL; /* irrelevant: do not split the pool on it */
    mf_list_t *node;
    mf_list_foreach(node, &pool->endpoints)
    {
        mf_http_endpoint_t *ep =
            mf_container_of(node, mf_http_endpoint_t, link);
        if (ep->port == port && ep->tls == tls && ep->verify == verify &&
            mf__same_ca(ep->ca_file, ca_file) &&
            strcasecmp(ep->host, host) == 0)
            return ep;
    }
    mf_http_endpoint_t *ep = mf_xcalloc(1, sizeof(*ep));
    strcpy(ep->host, host);
    ep->port = port;
    ep->tls = tls;
    ep->verify = verify;
    ep->ca_file = ca_file ? strdup(ca_file) : NULL;
    mf_list_init(&ep->conns);
    mf_list_init(&ep->idle);
    mf_list_init(&ep->waiters);
    mf_list_push_back(&pool->endpoints, &ep->link);
    return ep;
}

/* ---- connections -----------------------------------------------------------
 */

static void mf__client_conn_free(mf_post_t *post)
{
    mf_http_client_conn_t *conn = post->data;
    mf_loop_free(conn->loop, conn, sizeof(*conn));
}

/* Closes the socket at once; the memory goes from a deferred post. */
static void mf__client_conn_shut(mf_http_client_conn_t *conn)
{
    mf_io_stop(conn->loop, &conn->io);
    mf_timer_stop(conn->loop, &conn->idle_timer);
    mf__tls_close(conn->ssl);
    conn->ssl = NULL;
    if (conn->io.fd >= 0)
        close(conn->io.fd);
    conn->io.fd = -1;
    conn->closed = true;
}

static void mf__client_conn_destroy_now(mf_http_client_conn_t *conn)
{
    mf__client_conn_shut(conn);
    mf_loop_free(conn->loop, conn, sizeof(*conn));
}

static void mf__endpoint_serve_waiter(mf_http_endpoint_t *ep);

static void mf__client_conn_close(mf_http_client_conn_t *conn)
{
    if (conn->closed)
        return;
    mf_http_endpoint_t *ep = conn->ep;
    mf__client_conn_shut(conn);
    mf_list_remove(&conn->link);
    if (mf_list_linked(&conn->idle_link))
        mf_list_remove(&conn->idle_link);
    ep->nconns--;
    mf_post_init(&conn->free_post, mf__client_conn_free, conn);
    mf_loop_defer(conn->loop, &conn->free_post);
    mf__endpoint_serve_waiter(ep); /* a slot is free now */
}

static void mf__client_conn_idle_expired(mf_timer_t *timer)
{
    mf_http_client_conn_t *conn = timer->data;
    conn->ep->evictions++;
    mf__client_conn_close(conn);
}

void mf_http_pool_stats(mf_loop_t *loop, mf_http_endpoint_stats_fn fn, void *ud)
{
    mf_http_pool_t *pool = mf_loop_get(loop, &mf__http_pool_key);
    mf_list_t *node, *n;
    if (!pool)
        return;
    mf_list_foreach(node, &pool->endpoints)
    {
        mf_http_endpoint_t *ep =
            mf_container_of(node, mf_http_endpoint_t, link);
        mf_http_endpoint_stats_t st = {
            ep->host, ep->port, ep->tls, ep->nconns, 0, 0, ep->evictions};
        mf_list_foreach(n, &ep->idle) st.idle++;
        mf_list_foreach(n, &ep->waiters) st.waiters++;
        fn(ud, &st);
    }
}

static mf_http_client_conn_t *mf__client_conn_new(mf_http_client_task_t *t)
{
    mf_loop_t *loop = t->base._loop;
    mf_http_client_conn_t *conn = mf_loop_alloc(loop, sizeof(*conn));
    memset(conn, 0, sizeof(*conn));
    conn->loop = loop;
    conn->ep = t->ep;
    mf_io_init(&conn->io, -1, mf__client_conn_on_io, conn);
    mf__client_open_init(&conn->opener, loop, &conn->io, &conn->ssl);
    mf_timer_init(&conn->idle_timer, mf__client_conn_idle_expired, conn);
    mf_timer_set_ref(loop, &conn->idle_timer, false);
    mf_list_init(&conn->idle_link);
    mf_list_push_back(&t->ep->conns, &conn->link);
    t->ep->nconns++;
    conn->task = t;
    t->conn = conn;
    return conn;
}

void mf__http_release(mf_http_client_conn_t *conn, bool reuse)
{
    mf_http_endpoint_t *ep = conn->ep;
    mf_http_pool_t *pool = mf__http_pool(conn->loop);
    conn->task = NULL;
    if (!reuse || pool->config.idle_timeout_ms == 0) {
        mf__client_conn_close(conn);
        return;
    }
    conn->requests++;
    mf_io_set_ref(conn->loop, &conn->io, false); /* idle: no keep-alive of
                                                    the loop itself */
    mf_list_push_front(&ep->idle, &conn->idle_link);
    mf_timer_start(conn->loop, &conn->idle_timer, pool->config.idle_timeout_ms);
    mf__endpoint_serve_waiter(ep);
}

/* Whether an idle connection still has nothing to read. A byte (sent after
 * the last response: it belongs to no request) or the server's close makes
 * it unusable. Through TLS, records that carry no data (session tickets)
 * are consumed and read as nothing. */
static bool mf__client_conn_quiet(mf_http_client_conn_t *conn)
{
    char byte;
    return mf__sock_read(conn->io.fd, conn->ssl, &byte, 1) == MF_EAGAIN;
}

/* An idle connection became readable: the server closed it (or sent bytes
 * nobody asked for). Either way it cannot be reused. */
static void mf__client_conn_idle_event(mf_http_client_conn_t *conn)
{
    if (!mf__client_conn_quiet(conn)) {
        conn->ep->evictions++;
        mf__client_conn_close(conn);
    }
}

static void mf__client_conn_on_io(mf_io_t *io, unsigned events)
{
    mf_http_client_conn_t *conn = io->data;
    if (conn->task)
        mf__client_task_on_io(conn->task, events);
    else if (!conn->closed)
        mf__client_conn_idle_event(conn);
}

/* ---- acquiring -------------------------------------------------------------
 */

static void mf__client_task_take_idle(mf_http_client_task_t *t,
                                      mf_http_client_conn_t *conn)
{
    mf_list_remove(&conn->idle_link);
    mf_timer_stop(conn->loop, &conn->idle_timer);
    mf_io_set_ref(conn->loop, &conn->io, true);
    conn->task = t;
    t->conn = conn;
    mf__client_task_send(t);
}

static void mf__http_open(mf_http_client_task_t *t);

/* The most recent idle connection that is still quiet, closing the others
 * on the way: what arrived on them since their last response (the loop may
 * not have polled since) is checked here, before a request can be sent. */
static mf_http_client_conn_t *mf__endpoint_quiet_idle(mf_http_endpoint_t *ep)
{
    while (!mf_list_empty(&ep->idle)) {
        mf_http_client_conn_t *conn =
            mf_container_of(ep->idle.next, mf_http_client_conn_t, idle_link);
        if (mf__client_conn_quiet(conn))
            return conn;
        ep->evictions++;
        mf__client_conn_close(conn);
    }
    return NULL;
}

void mf__http_acquire(mf_http_client_task_t *t)
{
    mf_http_endpoint_t *ep = t->ep;
    mf_http_pool_t *pool = mf__http_pool(t->base._loop);
    mf_http_client_conn_t *idle = mf__endpoint_quiet_idle(ep);
    if (idle) {
        mf__client_task_take_idle(t, idle);
        return;
    }
    if (ep->nconns < pool->config.max_connections_per_endpoint) {
        mf__http_open(t);
        return;
    }
    t->phase = MF_CT_WAITING;
    mf_list_push_back(&ep->waiters, &t->wait_link);
}

static void mf__endpoint_serve_waiter(mf_http_endpoint_t *ep)
{
    if (mf_list_empty(&ep->waiters))
        return;
    mf_http_pool_t *pool = NULL;
    mf_http_client_task_t *t =
        mf_container_of(ep->waiters.next, mf_http_client_task_t, wait_link);
    pool = mf__http_pool(t->base._loop);
    if (mf_list_empty(&ep->idle) &&
        ep->nconns >= pool->config.max_connections_per_endpoint)
        return;
    mf_list_remove(&t->wait_link);
    mf__http_acquire(t);
}

void mf__http_abandon(mf_http_client_task_t *t)
{
    if (t->phase == MF_CT_WAITING && mf_list_linked(&t->wait_link))
        mf_list_remove(&t->wait_link);
    if (t->resolving)
        mf_dns_query_cancel(&t->dns);
    if (t->conn) {
        mf_http_client_conn_t *conn = t->conn;
        t->conn = NULL;
        conn->task = NULL;
        mf__client_conn_close(conn);
    }
}

/* ---- opening: resolve, connect, TLS ------------------------------------- */

static void mf__client_conn_fail_open(mf_http_client_task_t *t, int state,
                                      int error)
{
    mf_http_client_conn_t *conn = t->conn;
    t->conn = NULL;
    if (conn) {
        conn->task = NULL;
        mf__client_conn_close(conn);
    }
    mf__client_task_open_failed(t, state, error);
}

static void mf__client_conn_on_resolved(mf_dns_query_t *q, int status)
{
    mf_http_client_task_t *t = q->data;
    t->resolving = false;
    if (status == MF_ECANCELED) {
        mf_task_complete(&t->base, MF_STATE_CANCELED, MF_ECANCELED);
        return;
    }
    if (status < 0) {
        int state =
            status == MF_ETIMEDOUT ? MF_STATE_TIMEOUT : MF_STATE_DNS_ERROR;
        mf__client_conn_fail_open(t, state, status);
        return;
    }
    mf__client_task_mark(t, &t->timings.resolved);
    int rc = mf__client_open_start(&t->conn->opener, &t->dns);
    if (rc < 0)
        mf__client_conn_fail_open(t, MF_STATE_SYS_ERROR, rc);
}

static void mf__http_open(mf_http_client_task_t *t)
{
    mf__http_pool(t->base._loop)->connects++;
    mf__client_conn_new(t);
    t->phase = MF_CT_OPENING;
    t->resolving = true;
    mf_dns_query_start(t->base._loop, &t->dns, t->origin.host, t->origin.port,
                       mf__client_conn_on_resolved, t);
}

void mf__http_opening_event(mf_http_client_task_t *t, unsigned events)
{
    mf_client_tls_t tls = {t->origin.host, t->opts.tls_verify, t->opts.ca_file};
    bool was_connecting = t->conn->opener.connecting;
    int rc = mf__client_open_event(&t->conn->opener, events,
                                   t->origin.tls ? &tls : NULL);
    /* The connect ended well: open now, or its TLS handshake under way
     * (a failed address goes on connecting to the next one). */
    if (was_connecting && !t->conn->opener.connecting &&
        (rc >= 0 || t->conn->opener.handshaking))
        mf__client_task_mark(t, &t->timings.connected);
    if (rc == MF_EAGAIN)
        return;
    if (rc < 0) {
        mf__client_conn_fail_open(
            t, rc == MF_ETLS ? MF_STATE_TLS_ERROR : MF_STATE_SYS_ERROR, rc);
        return;
    }
    if (t->origin.tls)
        mf__client_task_mark(t, &t->timings.opened);
    else /* nothing between: the same moment */
        t->timings.opened = t->timings.connected;
    mf__client_task_send(t);
}
