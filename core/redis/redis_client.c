/*
 * redis_client.c — clients: options, the redis:// URL, the client as the
 * data of the loop's "redis" endpoint for that URL and options, and which
 * connection serves a task: a shared pipelined one, or a dedicated one
 * from the endpoint pool (idle, new, or a place in its line). Its
 * connections tell it of their end through the owner ops given at open.
 *
 * Ownership: the endpoint pool owns the endpoint and frees the client with
 * it at the loop's end (after closing the dedicated connections), with the
 * shared connections and the subscribers. Client memory comes from
 * mf_xcalloc once per URL, options and loop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "moonflow/upstream.h"
#include "net/net.h"
#include "redis_int.h"

void mf_redis_opts_init(mf_redis_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->connect_timeout_ms = 5000;
    o->response_timeout_ms = 30000;
    o->idle_timeout_ms = 60000;
    o->pipeline_connections = 1;
    o->max_connections = 64;
    o->max_reply = 512u << 20;
    o->tls_verify = true;
}

/* ---- URL -----------------------------------------------------------------
 */

/* [[user]:password@] */
static int mf__parse_userinfo(mf_redis_client_t *c, const char *s, size_t n)
{
    const char *colon = memchr(s, ':', n);
    if (!colon)
        return MF_EINVAL; /* a bare user name: Redis wants a password */
    size_t ulen = (size_t)(colon - s);
    if (ulen && !(c->user = mf__net_pct_decode(s, ulen, true)))
        return MF_EINVAL;
    c->password = mf__net_pct_decode(colon + 1, n - ulen - 1, true);
    return c->password ? 0 : MF_EINVAL;
}

/* redis[s]://[[user]:password@]host[:port][/db] */
static int mf__parse_url(mf_redis_client_t *c, const char *url)
{
    size_t skip;
    if (strncasecmp(url, "redis://", 8) == 0)
        skip = 8;
    else if (strncasecmp(url, "rediss://", 9) == 0)
        skip = 9;
    else
        return MF_EINVAL;
    c->tls = skip == 9;
    const char *auth = url + skip;
    size_t alen = strcspn(auth, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
        if (auth[i] == '@')
            at = auth + i; /* the last one: a password may hold '@' */
    if (at && mf__parse_userinfo(c, auth, (size_t)(at - auth)) < 0)
        return MF_EINVAL;
    const char *hp = at ? at + 1 : auth;
    c->port = 6379;
    if (mf__net_parse_hostport(hp, (size_t)(auth + alen - hp), c->host,
                               &c->port) < 0)
        return MF_EINVAL;
    const char *rest = auth + alen;
    if (*rest == '/') {
        uint64_t db = 0;
        size_t n = strlen(rest + 1);
        if (n && !mf__net_parse_decimal(rest + 1, n, 1u << 30, &db))
            return MF_EINVAL;
        c->db = (long)db;
    } else if (*rest) {
        return MF_EINVAL;
    }
    return 0;
}

/* ---- the endpoint -------------------------------------------------------
 */

static void mf__client_free(void *data);
static void mf__pool_open(mf_endpoint_t *ep, mf_pwaiter_t *w);
static void mf__pool_close(mf_pconn_t *pc);
static void mf__endpoint_describe(const mf_endpoint_t *ep,
                                  mf_endpoint_stats_t *st, char *label,
                                  size_t cap);

/* Dedicated connections in the loop's endpoint pool. An idle one whose
 * socket fires is dropped (the server closed it, or sent what nobody asked
 * for); one that is still open is healthy. */
static const mf_endpoint_ops_t mf__redis_endpoint_ops = {
    .protocol = "redis",
    .open = mf__pool_open,
    .close = mf__pool_close,
    .free_data = mf__client_free,
    .describe = mf__endpoint_describe,
};

/* Zero fields of the caller's opts mean the default. */
void mf__redis_opts_normalize(mf_redis_opts_t *o, const mf_redis_opts_t *in)
{
    mf_redis_opts_init(o);
    if (!in)
        return;
    mf_redis_opts_t d = *o;
    *o = *in;
    if (!o->connect_timeout_ms)
        o->connect_timeout_ms = d.connect_timeout_ms;
    if (!o->idle_timeout_ms)
        o->idle_timeout_ms = d.idle_timeout_ms;
    if (!o->pipeline_connections)
        o->pipeline_connections = d.pipeline_connections;
    if (!o->max_connections)
        o->max_connections = d.max_connections;
    if (!o->max_reply)
        o->max_reply = d.max_reply;
}

static int mf__key_print(char *buf, size_t size, const char *url,
                         const mf_redis_opts_t *o)
{
    return snprintf(buf, size, "%s c%u r%u i%u p%u m%u x%llu v%d o%d%d %s%s",
                    url, o->connect_timeout_ms, o->response_timeout_ms,
                    o->idle_timeout_ms, o->pipeline_connections,
                    o->max_connections, (unsigned long long)o->max_reply,
                    o->tls_verify ? 1 : 0, o->readonly ? 1 : 0,
                    o->read_from_replica ? 1 : 0, o->ca_file ? "ca=" : "",
                    o->ca_file ? o->ca_file : "");
}

/* The endpoint key: the URL and every option, since two clients that
 * differ in any of them behave differently (timeouts, how many shared
 * connections, the pool's size, TLS). The CA file comes last: it may hold
 * any character. Written into buf (size bytes) when it fits, else into
 * memory the caller frees (*heap); NULL when it cannot be written (a URL
 * of gigabytes). */
static const char *mf__client_key(char *buf, size_t size, const char *url,
                                  const mf_redis_opts_t *o, char **heap)
{
    *heap = NULL;
    int n = mf__key_print(buf, size, url, o);
    if (n < 0)
        return NULL;
    if ((size_t)n < size)
        return buf;
    *heap = mf_xmalloc((size_t)n + 1);
    mf__key_print(*heap, (size_t)n + 1, url, o);
    return *heap;
}

static mf_redis_client_t *mf__client_new(mf_loop_t *loop, const char *url,
                                         const mf_redis_opts_t *opts)
{
    mf_redis_client_t *c = mf_xcalloc(1, sizeof(*c));
    c->loop = loop;
    mf_list_init(&c->subs);
    if (mf__parse_url(c, url) < 0) {
        mf__client_free(c);
        return NULL;
    }
    c->url = mf_xmalloc(strlen(url) + 1);
    strcpy(c->url, url);
    c->opts = *opts;
    if (opts->ca_file) {
        c->ca_copy = mf_xmalloc(strlen(opts->ca_file) + 1);
        strcpy(c->ca_copy, opts->ca_file);
        c->opts.ca_file = c->ca_copy;
    }
    c->shared = mf_xcalloc(c->opts.pipeline_connections, sizeof(*c->shared));
    /* Once per client, not per task: a group's tasks have their own kind. */
    mf_upstream_t *up = mf_upstream_find(c->host, MF_UPSTREAM_NUL);
    if (MF_UNLIKELY(up != NULL))
        mf__redis_group_attach(c, up);
    return c;
}

/* The client of (url, opts) on the loop: found by its endpoint's key, or
 * made with its endpoint. NULL for a malformed URL (no endpoint made). */
mf_redis_client_t *mf__redis_client_get(mf_loop_t *loop, const char *url,
                                        const mf_redis_opts_t *o)
{
    char buf[512], *heap;
    const char *key = mf__client_key(buf, sizeof buf, url, o, &heap);
    if (!key)
        return NULL;
    mf_endpoint_t *ep = mf_endpoint_find(loop, &mf__redis_endpoint_ops, key);
    mf_redis_client_t *c = ep ? mf_endpoint_data(ep) : NULL;
    if (!c && (c = mf__client_new(loop, url, o)) != NULL) {
        mf_endpoint_limits_t limits = {o->max_connections, 0, 0,
                                       o->idle_timeout_ms};
        c->ep = mf_endpoint_get(loop, &mf__redis_endpoint_ops, key, &limits);
        mf_endpoint_set_data(c->ep, c);
    }
    mf_free(heap);
    return c;
}

mf_redis_client_t *mf_redis_client(mf_loop_t *loop, const char *url,
                                   const mf_redis_opts_t *opts, int *error)
{
    mf_redis_client_t *c = NULL;
    if (url) {
        mf_redis_opts_t o;
        mf__redis_opts_normalize(&o, opts);
        c = mf__redis_client_get(loop, url, &o);
    }
    if (error)
        *error = c ? 0 : MF_EINVAL;
    return c;
}

uint64_t mf_redis_client_connects(const mf_redis_client_t *client)
{
    if (client->kind)
        return client->kind->connects(client);
    return client->connects;
}

typedef struct mf__stats_walk {
    mf_redis_client_stats_fn fn;
    void *ud;
} mf__stats_walk_t;

/* A client for people (host:port/db, never its password), and what it counts
 * beside the pool: every connection it opened (shared and subscribers
 * too) and the batching of its shared connections. */
static void mf__endpoint_describe(const mf_endpoint_t *ep,
                                  mf_endpoint_stats_t *st, char *label,
                                  size_t cap)
{
    const mf_redis_client_t *c = mf_endpoint_data(ep);
    snprintf(label, cap, "%s:%u/%ld", c->host, c->port, c->db);
    st->label = label;
    st->connects = c->connects;
    st->requests = c->commands;
    st->writes = c->writes;
}

static void mf__endpoint_stats(void *ud, const mf_endpoint_stats_t *st)
{
    const mf__stats_walk_t *walk = ud;
    const mf_redis_client_t *c = st->data;
    mf_redis_client_stats_t out = {
        c->host,     c->port,     c->db,        (unsigned)st->connections,
        st->idle,    st->waiters, st->connects, st->writes,
        st->requests};
    walk->fn(walk->ud, &out);
}

void mf_redis_clients_stats(mf_loop_t *loop, mf_redis_client_stats_fn fn,
                            void *ud)
{
    mf__stats_walk_t walk = {fn, ud};
    mf_endpoint_stats(loop, mf__redis_endpoint_ops.protocol, mf__endpoint_stats,
                      &walk);
}

/* ---- routing -------------------------------------------------------------
 */

/* A dedicated connection, idle or freed by another task, is the task's. */
static void mf__pool_granted(mf_pwaiter_t *w, mf_pconn_t *pc)
{
    mf__redis_conn_attach(mf_container_of(pc, mf_redis_conn_t, pc),
                          mf_container_of(w, mf_redis_task_t, waiter));
}

/* A dedicated connection closed: the session holding it learns why, and
 * its slot goes to the oldest waiter. */
static void mf__pooled_closed(mf_redis_conn_t *conn, int error)
{
    if (conn->pin) {
        conn->pin->conn = NULL;
        conn->pin->error = error ? error : MF_ECLOSED;
        conn->pin = NULL;
    }
    mf_pconn_remove(&conn->pc);
}

static const mf_redis_conn_owner_t mf__pooled_owner = {NULL, NULL,
                                                       mf__pooled_closed};

/* A shared connection closed: the next task opens another. */
static void mf__shared_closed(mf_redis_conn_t *conn, int error)
{
    mf_redis_client_t *c = conn->client;
    (void)error;
    if (c->shared[conn->slot] == conn)
        c->shared[conn->slot] = NULL;
}

static const mf_redis_conn_owner_t mf__shared_owner = {NULL, NULL,
                                                       mf__shared_closed};

/* The pool has room: a new dedicated connection, the waiter's from now
 * (a task's, attached while it opens, or a session's). */
static void mf__pool_open(mf_endpoint_t *ep, mf_pwaiter_t *w)
{
    mf_redis_conn_t *conn = mf__redis_conn_open(
        mf_endpoint_data(ep), MF_RCONN_POOLED, &mf__pooled_owner, NULL);
    mf_pconn_add(ep, &conn->pc, &conn->io);
    w->granted(w, &conn->pc);
}

/* The pool drops a connection: idle (timed out, closed by the server) or,
 * at the loop's end, any; its tasks then go with the loop. */
static void mf__pool_close(mf_pconn_t *pc)
{
    mf__redis_conn_drop(mf_container_of(pc, mf_redis_conn_t, pc));
}

/* A session's task goes on the session's connection, behind its earlier
 * ones; the connection's error once it closed. */
static int mf__route_pinned(mf_redis_task_t *t)
{
    if (!t->pin->conn)
        return t->pin->error ? t->pin->error : MF_ECLOSED;
    mf__redis_conn_attach(t->pin->conn, t);
    return 0;
}

int mf__redis_client_route(mf_redis_task_t *t)
{
    if (t->pin)
        return mf__route_pinned(t);
    return mf__redis_client_route_to(t->client, t);
}

int mf__redis_client_route_to(mf_redis_client_t *c, mf_redis_task_t *t)
{
    if (t->dedicated || t->forced) {
        t->phase = MF_RT_WAITING; /* unless served at once */
        mf_pwaiter_init(&t->waiter, mf__pool_granted);
        return mf_endpoint_acquire(c->ep, &t->waiter);
    }
    unsigned i = c->next_shared++ % c->opts.pipeline_connections;
    if (!c->shared[i]) {
        c->shared[i] =
            mf__redis_conn_open(c, MF_RCONN_SHARED, &mf__shared_owner, NULL);
        c->shared[i]->slot = i;
    }
    mf__redis_conn_attach(c->shared[i], t);
    return 0;
}

void mf__redis_client_release(mf_redis_conn_t *conn, bool reuse)
{
    if (!reuse || conn->state != MF_RCONN_READY) {
        mf__redis_conn_close(conn, MF_STATE_SUCCESS, 0);
        return;
    }
    mf__redis_conn_set_busy(conn, false);
    mf_endpoint_release(&conn->pc); /* to the oldest waiter, or idle */
}

void mf__redis_client_unwait(mf_redis_task_t *t)
{
    mf_pwaiter_cancel(&t->waiter);
}

int mf__redis_client_acquire(mf_redis_client_t *client, mf_pwaiter_t *w)
{
    return mf_endpoint_acquire(client->ep, w);
}

/* ---- teardown (the loop is being destroyed) ------------------------------
 */

/* The endpoint's end: its dedicated connections are closed already. */
static void mf__client_free(void *data)
{
    mf_redis_client_t *c = data;
    if (c->shared)
        for (unsigned i = 0; i < c->opts.pipeline_connections; i++)
            if (c->shared[i])
                mf__redis_conn_drop(c->shared[i]); /* tasks go with the loop */
    mf_list_t *node;
    while ((node = mf_list_pop_front(&c->subs)) != NULL)
        mf__redis_sub_free(mf_container_of(node, mf_redis_subscriber_t, link));
    mf__redis_group_free(c->group);
    mf_free(c->shared);
    mf_free(c->url);
    mf_free(c->ca_copy);
    mf_free(c->user);
    mf_free(c->password);
    mf_free(c);
}
