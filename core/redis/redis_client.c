/*
 * redis_client.c — clients: options, the redis:// URL, the per-loop
 * registry (one client per URL and options), and which connection serves
 * a task: a shared pipelined one, or one of the dedicated pool (idle, new,
 * or a place in the wait queue).
 *
 * Ownership: the registry lives under the loop's Redis key and
 * is freed with the loop, with every client, connection and subscriber in
 * it. Client memory comes from mf_xcalloc once per URL and loop.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* ---- registry ------------------------------------------------------------
 */

static void mf__client_free(mf_redis_client_t *c);

static void mf__registry_free(mf_loop_t *loop, void *ext)
{
    mf_redis_registry_t *reg = ext;
    (void)loop;
    mf_list_t *node;
    while ((node = mf_list_pop_front(&reg->clients)) != NULL)
        mf__client_free(mf_container_of(node, mf_redis_client_t, link));
    mf_free(reg);
}

/* A protocol client's state (loop.h). */
#define MF_REDIS_LOOP_RANK 22
static mf_loop_key_t mf__redis_loop_key =
    MF_LOOP_KEY_INIT(MF_REDIS_LOOP_RANK, mf__registry_free);

static mf_redis_registry_t *mf__registry(mf_loop_t *loop)
{
    mf_redis_registry_t *reg = mf_loop_get(loop, &mf__redis_loop_key);
    if (reg)
        return reg;
    reg = mf_xcalloc(1, sizeof(*reg));
    reg->loop = loop;
    mf_list_init(&reg->clients);
    mf_loop_set(loop, &mf__redis_loop_key, reg);
    return reg;
}

/* Zero fields of the caller's opts mean the default. */
static void mf__opts_normalize(mf_redis_opts_t *o, const mf_redis_opts_t *in)
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

static bool mf__opts_equal(const mf_redis_opts_t *a, const mf_redis_opts_t *b)
{
    bool same_ca =
        a->ca_file == b->ca_file ||
        (a->ca_file && b->ca_file && !strcmp(a->ca_file, b->ca_file));
    return same_ca && a->connect_timeout_ms == b->connect_timeout_ms &&
           a->response_timeout_ms == b->response_timeout_ms &&
           a->idle_timeout_ms == b->idle_timeout_ms &&
           a->pipeline_connections == b->pipeline_connections &&
           a->max_connections == b->max_connections &&
           a->max_reply == b->max_reply && a->tls_verify == b->tls_verify;
}

static mf_redis_client_t *mf__client_new(mf_loop_t *loop, const char *url,
                                         const mf_redis_opts_t *opts)
{
    mf_redis_client_t *c = mf_xcalloc(1, sizeof(*c));
    c->loop = loop;
    mf_list_init(&c->pooled);
    mf_list_init(&c->idle);
    mf_list_init(&c->waiters);
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
    return c;
}

mf_redis_client_t *mf_redis_client(mf_loop_t *loop, const char *url,
                                   const mf_redis_opts_t *opts, int *error)
{
    if (!url) {
        if (error)
            *error = MF_EINVAL;
        return NULL;
    }
    mf_redis_opts_t o;
    mf__opts_normalize(&o, opts);
    mf_redis_registry_t *reg = mf__registry(loop);
    mf_list_t *node;
    mf_list_foreach(node, &reg->clients)
    {
        mf_redis_client_t *c = mf_container_of(node, mf_redis_client_t, link);
        if (strcmp(c->url, url) == 0 && mf__opts_equal(&c->opts, &o)) {
            if (error)
                *error = 0;
            return c;
        }
    }
    mf_redis_client_t *c = mf__client_new(loop, url, &o);
    if (error)
        *error = c ? 0 : MF_EINVAL;
    if (c)
        mf_list_push_back(&reg->clients, &c->link);
    return c;
}

uint64_t mf_redis_client_connects(const mf_redis_client_t *client)
{
    return client->connects;
}

void mf_redis_clients_stats(mf_loop_t *loop, mf_redis_client_stats_fn fn,
                            void *ud)
{
    mf_redis_registry_t *reg = mf_loop_get(loop, &mf__redis_loop_key);
    mf_list_t *node, *n;
    if (!reg)
        return;
    mf_list_foreach(node, &reg->clients)
    {
        const mf_redis_client_t *c =
            mf_container_of(node, mf_redis_client_t, link);
        mf_redis_client_stats_t st = {c->host,     c->port,   c->db,
                                      c->npooled,  0,         0,
                                      c->connects, c->writes, c->commands};
        mf_list_foreach(n, &c->idle) st.idle++;
        mf_list_foreach(n, &c->waiters) st.waiters++;
        fn(ud, &st);
    }
}

/* ---- routing -------------------------------------------------------------
 */

static void mf__client_serve_waiter(mf_redis_client_t *c)
{
    if (mf_list_empty(&c->waiters))
        return;
    if (mf_list_empty(&c->idle) && c->npooled >= c->opts.max_connections)
        return;
    mf_redis_task_t *t =
        mf_container_of(mf_list_pop_front(&c->waiters), mf_redis_task_t, link);
    mf__redis_client_route(t);
}

static void mf__client_route_pooled(mf_redis_client_t *c, mf_redis_task_t *t)
{
    if (!mf_list_empty(&c->idle)) {
        mf_redis_conn_t *conn = mf_container_of(mf_list_pop_front(&c->idle),
                                                mf_redis_conn_t, idle_link);
        mf__redis_conn_attach(conn, t);
        return;
    }
    if (c->npooled < c->opts.max_connections) {
        mf_redis_conn_t *conn = mf__redis_conn_open(c, MF_RCONN_POOLED);
        mf_list_push_back(&c->pooled, &conn->link);
        c->npooled++;
        mf__redis_conn_attach(conn, t);
        return;
    }
    t->phase = MF_RT_WAITING;
    mf_list_push_back(&c->waiters, &t->link);
}

void mf__redis_client_route(mf_redis_task_t *t)
{
    mf_redis_client_t *c = t->client;
    if (t->dedicated || t->forced) {
        mf__client_route_pooled(c, t);
        return;
    }
    unsigned i = c->next_shared++ % c->opts.pipeline_connections;
    if (!c->shared[i]) {
        c->shared[i] = mf__redis_conn_open(c, MF_RCONN_SHARED);
        c->shared[i]->slot = i;
    }
    mf__redis_conn_attach(c->shared[i], t);
}

void mf__redis_client_release(mf_redis_conn_t *conn, bool reuse)
{
    mf_redis_client_t *c = conn->client;
    if (!reuse || conn->state != MF_RCONN_READY) {
        mf__redis_conn_close(conn, MF_STATE_SUCCESS, 0);
        return;
    }
    mf__redis_conn_set_busy(conn, false);
    mf_list_push_front(&c->idle, &conn->idle_link);
    mf__client_serve_waiter(c);
}

void mf__redis_client_forget(mf_redis_conn_t *conn)
{
    mf_redis_client_t *c = conn->client;
    switch (conn->kind) {
    case MF_RCONN_SHARED:
        if (c->shared[conn->slot] == conn)
            c->shared[conn->slot] = NULL;
        return;
    case MF_RCONN_POOLED:
        mf_list_remove(&conn->link);
        if (mf_list_linked(&conn->idle_link))
            mf_list_remove(&conn->idle_link);
        c->npooled--;
        mf__client_serve_waiter(c);
        return;
    default:
        return;
    }
}

void mf__redis_client_unwait(mf_redis_task_t *t)
{
    if (mf_list_linked(&t->link))
        mf_list_remove(&t->link);
}

/* ---- teardown (the loop is being destroyed) ------------------------------
 */

static void mf__redis_client_drop_conn(mf_redis_conn_t *conn)
{
    if (conn->state != MF_RCONN_CLOSED) {
        mf_list_init(&conn->queue); /* tasks go with the loop */
        conn->sub = NULL;
        conn->kind = MF_RCONN_SUB; /* forget nothing: we are tearing down */
        mf__redis_conn_close(conn, MF_STATE_CANCELED, MF_ECANCELED);
    }
}

static void mf__client_free(mf_redis_client_t *c)
{
    mf_list_init(&c->waiters);
    if (c->shared)
        for (unsigned i = 0; i < c->opts.pipeline_connections; i++)
            if (c->shared[i])
                mf__redis_client_drop_conn(c->shared[i]);
    mf_list_t *node;
    while ((node = mf_list_pop_front(&c->pooled)) != NULL)
        mf__redis_client_drop_conn(
            mf_container_of(node, mf_redis_conn_t, link));
    while ((node = mf_list_pop_front(&c->subs)) != NULL)
        mf__redis_sub_free(mf_container_of(node, mf_redis_subscriber_t, link));
    mf_free(c->shared);
    mf_free(c->url);
    mf_free(c->ca_copy);
    mf_free(c->user);
    mf_free(c->password);
    mf_free(c);
}
