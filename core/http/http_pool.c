/*
 * http_pool.c — the client's connections in the loop's endpoint pool
 * (moonflow/endpoint.h): the HTTP endpoint (its key, its data, its ops),
 * opening a connection with the dial (resolve, connect, TLS), keep-alive
 * reuse after a health check, and the public pool calls
 * (mf_http_pool_configure, _connects, _stats) as walks of the pool.
 *
 * Owns the connections' memory. Knows no task: a connection reports to
 * its user through the ops the user registered (http_client_int.h).
 * A connection that speaks h2 becomes http2_client.c's to drive (many
 * users, one stream each); the pool still counts and closes it.
 *
 * May call: the endpoint pool, the dial, the socket and TLS helpers,
 * http2_client.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http_client_int.h"
#include "net/net.h"

#define MF_HTTP_DEFAULT_MAX_CONNS 64
#define MF_HTTP_DEFAULT_IDLE_MS 60000

static const mf_endpoint_ops_t mf__http_endpoint_ops;

static const mf_endpoint_limits_t mf__http_default_limits = {
    .max_conns = MF_HTTP_DEFAULT_MAX_CONNS,
    .idle_timeout_ms = MF_HTTP_DEFAULT_IDLE_MS};

static mf_http_client_conn_t *mf__conn_of(mf_pconn_t *pc)
{
    return mf_container_of(pc, mf_http_client_conn_t, pc);
}

/* ---- the public pool calls: walks of the endpoint pool ------------------ */

void mf_http_pool_configure(mf_loop_t *loop,
                            const mf_http_pool_config_t *config)
{
    size_t max = config->max_connections_per_endpoint;
    mf_endpoint_limits_t limits = {.max_conns = max ? (unsigned)max
                                                    : MF_HTTP_DEFAULT_MAX_CONNS,
                                   .idle_timeout_ms = config->idle_timeout_ms};
    mf_endpoint_set_protocol_limits(loop, &mf__http_endpoint_ops, &limits);
}

static void mf__http_count_connects(void *ud, const mf_endpoint_stats_t *st)
{
    *(uint64_t *)ud += st->connects;
}

uint64_t mf_http_pool_connects(mf_loop_t *loop)
{
    uint64_t n = 0;
    mf_endpoint_stats(loop, mf__http_endpoint_ops.protocol,
                      mf__http_count_connects, &n);
    return n;
}

typedef struct mf_http_stats_walk {
    mf_http_endpoint_stats_fn fn;
    void *ud;
} mf_http_stats_walk_t;

static void mf__http_endpoint_stat(void *ud, const mf_endpoint_stats_t *st)
{
    const mf_http_stats_walk_t *walk = ud;
    const mf_http_endpoint_t *e = st->data;
    mf_http_endpoint_stats_t out = {e->host,         e->port,  e->tls,
                                    st->connections, st->idle, st->waiters,
                                    st->evictions};
    walk->fn(walk->ud, &out);
}

void mf_http_pool_stats(mf_loop_t *loop, mf_http_endpoint_stats_fn fn, void *ud)
{
    mf_http_stats_walk_t walk = {fn, ud};
    mf_endpoint_stats(loop, mf__http_endpoint_ops.protocol,
                      mf__http_endpoint_stat, &walk);
}

/* ---- endpoints ------------------------------------------------------------
 */

static void mf__http_endpoint_free(void *data)
{
    mf_http_endpoint_t *e = data;
    free(e->ca_file);
    mf_free(e);
}

/* The key: what makes two connections interchangeable. The host's case
 * does not matter; the CA file only when it is used. Longer than buf
 * (a long CA path): in memory of its own, which the caller frees. */
static char *mf__http_key(char *buf, size_t size, const mf_http_origin_t *o,
                          bool verify, const char *ca_file, int http2)
{
    const char *fmt = "%s %u %d %d %d %s"; /* no host holds a space */
    unsigned port = o->port;
    int tls = o->tls, check = verify;
    const char *ca = ca_file ? ca_file : "";
    int n = snprintf(buf, size, fmt, o->host, port, tls, check, http2, ca);
    if (n >= 0 && (size_t)n >= size) {
        size = (size_t)n + 1;
        buf = mf_xmalloc(size);
        snprintf(buf, size, fmt, o->host, port, tls, check, http2, ca);
    }
    for (char *p = buf; *p && *p != ' '; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    return buf;
}

/* The HTTP/2 mode as it applies to an origin: ALPN needs TLS, prior
 * knowledge over TLS is ALPN (the server still says what it speaks). */
static int mf__http2_mode(const mf_http_origin_t *o, int http2)
{
    if (http2 == MF_HTTP2_ALPN && !o->tls)
        return MF_HTTP2_OFF;
    if (http2 == MF_HTTP2_PRIOR_KNOWLEDGE && o->tls)
        return MF_HTTP2_ALPN;
    return http2;
}

mf_endpoint_t *mf__http_endpoint(mf_loop_t *loop, const mf_http_origin_t *o,
                                 bool verify, const char *ca_file, int http2)
{
    if (!o->tls || !verify)
        ca_file = NULL; /* irrelevant: do not split the pool on it */
    http2 = mf__http2_mode(o, http2);
    char buf[512];
    char *key = mf__http_key(buf, sizeof buf, o, verify, ca_file, http2);
    mf_endpoint_t *ep = mf_endpoint_find(loop, &mf__http_endpoint_ops, key);
    if (!ep) {
        ep = mf_endpoint_get(loop, &mf__http_endpoint_ops, key,
                             &mf__http_default_limits);
        mf_http_endpoint_t *e = mf_xcalloc(1, sizeof(*e));
        strcpy(e->host, o->host);
        e->port = o->port;
        e->tls = o->tls;
        e->verify = verify;
        e->ca_file = ca_file ? strdup(ca_file) : NULL;
        mf__h2c_endpoint_init(&e->h2, http2);
        mf_endpoint_set_data(ep, e);
    }
    if (key != buf)
        mf_free(key);
    return ep;
}

/* ---- connections ---------------------------------------------------------
 */

static void mf__http_conn_free(mf_post_t *post)
{
    mf_http_client_conn_t *conn = post->data;
    mf_loop_free(conn->loop, conn, sizeof(*conn));
}

static void mf__http_conn_free_later(mf_http_client_conn_t *conn)
{
    mf_post_init(&conn->free_post, mf__http_conn_free, conn);
    mf_loop_defer(conn->loop, &conn->free_post);
}

/* Closes the socket at once; the memory goes from a deferred post, or
 * after the dial's canceled DNS query has called back. */
static void mf__http_conn_shut(mf_http_client_conn_t *conn)
{
    bool dns_due = mf__dial_cancel(&conn->dial);
    mf__h2c_free(conn);
    mf_io_stop(conn->loop, &conn->io);
    mf__tls_close(conn->ssl);
    conn->ssl = NULL;
    if (conn->io.fd >= 0)
        close(conn->io.fd);
    conn->io.fd = -1;
    conn->closed = true;
    if (!dns_due)
        mf__http_conn_free_later(conn);
}

/* The pool dropped it (idle timeout, the peer's close, the loop's end). */
static void mf__http_conn_pool_close(mf_pconn_t *pc)
{
    mf__http_conn_shut(mf__conn_of(pc));
}

/* The client closes it: out of its endpoint (its slot serves a waiter). */
static void mf__http_conn_close(mf_http_client_conn_t *conn)
{
    if (conn->closed)
        return;
    mf__http_conn_shut(conn);
    mf_pconn_remove(&conn->pc);
}

/* Whether an idle connection still has nothing to read. A byte (sent after
 * the last response: it belongs to no request) or the server's close makes
 * it unusable. Through TLS, records that carry no data (session tickets)
 * are consumed and read as nothing. */
static bool mf__http_conn_quiet(mf_pconn_t *pc)
{
    mf_http_client_conn_t *conn = mf__conn_of(pc);
    char byte;
    return mf__sock_read(conn->io.fd, conn->ssl, &byte, 1) == MF_EAGAIN;
}

/* An idle connection became readable: the server closed it (or sent bytes
 * nobody asked for). Either way it cannot be reused. */
static bool mf__http_conn_idle_event(mf_pconn_t *pc)
{
    return !mf__http_conn_quiet(pc);
}

static void mf__http_conn_on_io(mf_io_t *io, unsigned events)
{
    mf_http_client_conn_t *conn = io->data;
    if (conn->closed)
        return;
    if (mf__dial_active(&conn->dial))
        mf__dial_event(&conn->dial, events);
    else if (conn->h2)
        mf__h2c_event(conn, events);
    else if (conn->user)
        conn->user->ops->event(conn->user, events);
    else
        mf_pconn_idle_fired(&conn->pc);
}

/* ---- users: acquire, release, abandon ------------------------------------
 */

static void mf__http_conn_bind(mf_http_client_conn_t *conn,
                               mf_http_conn_user_t *u)
{
    conn->user = u;
    u->conn = conn;
}

/* An idle connection, or one a releasing user handed over. */
static void mf__http_conn_granted(mf_pwaiter_t *w, mf_pconn_t *pc)
{
    mf_http_conn_user_t *u = mf_container_of(w, mf_http_conn_user_t, waiter);
    mf__http_conn_bind(mf__conn_of(pc), u);
    u->ops->ready(u, NULL);
}

void mf__http_pool_user_init(mf_http_conn_user_t *u,
                             const mf_http_conn_user_ops_t *ops)
{
    mf_pwaiter_init(&u->waiter, mf__http_conn_granted);
    u->ops = ops;
    u->conn = NULL;
    u->traced = false;
    u->h2 = u->h2_waiting = false;
    mf_list_init(&u->h2_link);
}

/* The dial ended: the user has its open connection, or learns it failed
 * once the connection is closed (its slot may serve a waiter first). */
static void mf__http_conn_dialed(mf_dial_t *d, int state, int error)
{
    mf_http_client_conn_t *conn = d->data;
    if (conn->closed) { /* the canceled DNS query of a closed one */
        mf__http_conn_free_later(conn);
        return;
    }
    mf_http_conn_user_t *u = conn->user;
    mf_dial_times_t times = d->times;
    int h2 = state == MF_STATE_SUCCESS
                 ? mf__h2c_dialed(conn, u, &times, mf__http_conn_close)
                 : 0;
    if (state == MF_STATE_SUCCESS && h2 >= 0) {
        if (h2 == 0)
            u->ops->ready(u, &times);
        return;
    }
    if (h2 < 0) { /* h2 without a session: no HTTP/1.1 on it either */
        state = MF_STATE_SYS_ERROR;
        error = h2;
    }
    mf__h2c_dial_failed(conn, state, error); /* those that waited for it */
    conn->user = NULL;
    u->conn = NULL;
    u->verify_result = state == MF_STATE_TLS_ERROR && conn->ssl
                           ? SSL_get_verify_result(conn->ssl)
                           : X509_V_OK;
    mf__http_conn_close(conn);
    u->ops->failed(u, &times, state, error);
}

/* ops->open: a new connection for w's user, dialed to the endpoint. */
static void mf__http_conn_open(mf_endpoint_t *ep, mf_pwaiter_t *w)
{
    mf_http_conn_user_t *u = mf_container_of(w, mf_http_conn_user_t, waiter);
    const mf_http_endpoint_t *e = mf_endpoint_data(ep);
    mf_loop_t *loop = mf_endpoint_loop(ep);
    mf_http_client_conn_t *conn = mf_loop_alloc(loop, sizeof(*conn));
    memset(conn, 0, sizeof(*conn));
    conn->loop = loop;
    mf_io_init(&conn->io, -1, mf__http_conn_on_io, conn);
    mf__dial_init(&conn->dial, loop, &conn->io, &conn->ssl,
                  mf__http_conn_dialed, conn);
    mf_pconn_add(ep, &conn->pc, &conn->io);
    mf__http_conn_bind(conn, u);
    mf_client_tls_t tls = {e->host, e->verify, e->ca_file,
                           e->h2.mode != MF_HTTP2_OFF};
    mf_dial_opts_t opts = {.tls = e->tls ? &tls : NULL, .traced = u->traced};
    mf__dial_start(&conn->dial, e->host, e->port, &opts);
}

void mf__http_pool_acquire(mf_endpoint_t *ep, mf_http_conn_user_t *u)
{
    if (mf__h2c_acquire(ep, u)) /* a stream, or a wait for one */
        return;
    mf_endpoint_acquire(ep, &u->waiter); /* no waiter limit: never busy */
    mf__h2c_opening(ep, u);
}

void mf__http_pool_release(mf_http_conn_user_t *u, bool reuse)
{
    if (mf__h2c_detach(u))
        return;
    mf_http_client_conn_t *conn = u->conn;
    if (!conn)
        return;
    u->conn = NULL;
    conn->user = NULL;
    const mf_endpoint_t *ep = conn->pc.ep;
    if (!reuse || !mf_endpoint_limits(ep)->idle_timeout_ms) {
        mf__http_conn_close(conn);
        return;
    }
    conn->requests++;
    mf_endpoint_release(&conn->pc);
}

void mf__http_pool_abandon(mf_http_conn_user_t *u)
{
    if (mf__h2c_detach(u))
        return;
    mf_pwaiter_cancel(&u->waiter);
    mf_http_client_conn_t *conn = u->conn;
    if (!conn)
        return;
    u->conn = NULL;
    conn->user = NULL;
    mf__http_conn_close(conn);
}

/* An endpoint for people: its scheme, host and port. */
static void mf__http_endpoint_describe(const mf_endpoint_t *ep,
                                       mf_endpoint_stats_t *st, char *label,
                                       size_t cap)
{
    const mf_http_endpoint_t *e = mf_endpoint_data(ep);
    snprintf(label, cap, "%s://%s:%u", e->tls ? "https" : "http", e->host,
             e->port);
    st->label = label;
}

static const mf_endpoint_ops_t mf__http_endpoint_ops = {
    .protocol = "http",
    .open = mf__http_conn_open,
    .healthy = mf__http_conn_quiet,
    .idle_event = mf__http_conn_idle_event,
    .close = mf__http_conn_pool_close,
    .free_data = mf__http_endpoint_free,
    .describe = mf__http_endpoint_describe,
};
