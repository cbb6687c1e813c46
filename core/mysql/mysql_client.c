/*
 * mysql_client.c — clients: options, and a client as the data of its
 * endpoint in the loop's endpoint pool (moonflow/endpoint.h), found by a
 * key made of the URL and the options; the MySQL side of the pool (the
 * ops: open, health, close), which routes between the pool, the
 * connections and the tasks: a connection opened for a waiter goes to it,
 * one a task is done with is reset first when dirty, then goes back; and
 * the KILL connection with its queue of thread ids.
 *
 * Calls down only: the pool, mysql_conn.c, mysql_quote.c, mysql_url.c.
 * Upward, a connection reports through the hooks registered here, and a
 * waiter is told through the ops its task registered.
 *
 * Ownership: the loop's endpoint pool owns the endpoint and frees the
 * client (ops->free_data) after closing its pooled connections; a client
 * owns its KILL connections and the sessions still open. Client memory
 * comes from mf_xcalloc once per URL, options and loop.
 */
#include <stdio.h>
#include <string.h>

#include "mysql_int.h"

void mf_mysql_opts_init(mf_mysql_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->connect_timeout_ms = 5000;
    o->query_timeout_ms = 30000;
    o->idle_timeout_ms = 60000;
    o->max_connections = 16;
    o->max_waiters = 1024;
    o->wait_timeout_ms = 5000;
    o->stmt_cache = 64;
    o->max_result = 512u << 20;
    o->pipeline = 1;
}

/* Zero fields of the caller's opts mean the default, except
 * query_timeout_ms (0: none). */
static void mf__opts_normalize(mf_mysql_opts_t *o, const mf_mysql_opts_t *in)
{
    mf_mysql_opts_init(o);
    if (!in)
        return;
    mf_mysql_opts_t d = *o;
    o->query_timeout_ms = in->query_timeout_ms;
#define MF__OPT(f) o->f = in->f ? in->f : d.f
    MF__OPT(connect_timeout_ms);
    MF__OPT(idle_timeout_ms);
    MF__OPT(max_connections);
    MF__OPT(max_waiters);
    MF__OPT(wait_timeout_ms);
    MF__OPT(stmt_cache);
    MF__OPT(max_result);
    MF__OPT(pipeline);
#undef MF__OPT
}

/* ---- the client as endpoint data ------------------------------------------
 */

static void mf__conn_drop(mf_pconn_t *pc);
static void mf__client_open(mf_endpoint_t *pool, mf_pwaiter_t *pw);
static bool mf__client_healthy(mf_pconn_t *pc);
static void mf__client_free(void *data);
static void mf__client_describe(const mf_endpoint_t *pool,
                                mf_endpoint_stats_t *st, char *label,
                                size_t cap);

static const mf_endpoint_ops_t mf__mysql_pool_ops = {
    .protocol = "mysql",
    .open = mf__client_open,
    .healthy = mf__client_healthy,
    .idle_event = NULL, /* anything on an idle connection drops it */
    .close = mf__conn_drop,
    .free_data = mf__client_free,
    .describe = mf__client_describe,
};

static void mf__client_free(void *data)
{
    mf_mysql_client_t *c = data;
    mf_list_t *node;
    /* The loop goes away with tasks in flight: they are dropped, not
     * completed. The pool closed the pooled connections already. */
    while ((node = mf_list_pop_front(&c->sessions)) != NULL) {
        mf_mysql_session_t *s = mf_container_of(node, mf_mysql_session_t, link);
        mf_loop_free(c->loop, s, sizeof(*s));
    }
    mf__mysql_pipes_free(c);
    while ((node = mf_list_pop_front(&c->killers)) != NULL)
        mf__mysql_conn_close(mf_container_of(node, mf_mysql_conn_t, link));
    mf__mysql_quoter_close(c);
    mf_free(c->kill_ids);
    mf__mysql_endpoint_free(&c->ep);
    mf_free(c->url);
    mf_free(c);
}

static mf_mysql_client_t *mf__client_new(mf_loop_t *loop, const char *url,
                                         const mf_mysql_opts_t *opts)
{
    mf_mysql_client_t *c = mf_xcalloc(1, sizeof(*c));
    c->loop = loop;
    c->opts = *opts;
    mf_list_init(&c->killers);
    mf_list_init(&c->sessions);
    mf_list_init(&c->pipes);
    size_t n = strlen(url) + 1;
    c->url = memcpy(mf_xmalloc(n), url, n);
    if (mf__mysql_endpoint_parse(&c->ep, url) < 0 ||
        !(c->charset_info = mariadb_get_charset_by_name(c->ep.charset))) {
        mf__client_free(c);
        return NULL;
    }
    mf__mysql_quoter_init(c);
    if (c->ep.connect_timeout_ms)
        c->opts.connect_timeout_ms = c->ep.connect_timeout_ms;
    return c;
}

/* The endpoint key: the URL and every option (two clients differing in any
 * of them are two pools), in buf when it fits, else in *heap. */
static const char *mf__client_key(char *buf, size_t cap, char **heap,
                                  const char *url, const mf_mysql_opts_t *o)
{
#define MF__KEY_ARGS                                                      \
    url, (unsigned)o->connect_timeout_ms, (unsigned)o->query_timeout_ms,  \
        (unsigned)o->idle_timeout_ms, o->max_connections, o->max_waiters, \
        (unsigned)o->wait_timeout_ms, o->stmt_cache,                      \
        (unsigned long long)o->max_result, o->pipeline
    static const char fmt[] = "%s %u,%u,%u,%u,%u,%u,%u,%llu,%u";
    int n = snprintf(buf, cap, fmt, MF__KEY_ARGS);
    *heap = NULL;
    if (n >= 0 && (size_t)n < cap)
        return buf;
    *heap = mf_xmalloc((size_t)n + 1);
    snprintf(*heap, (size_t)n + 1, fmt, MF__KEY_ARGS);
    return *heap;
#undef MF__KEY_ARGS
}

static mf_mysql_client_t *mf__client_get(mf_loop_t *loop, const char *url,
                                         const mf_mysql_opts_t *o,
                                         const char *key)
{
    mf_endpoint_t *pool = mf_endpoint_find(loop, &mf__mysql_pool_ops, key);
    if (pool)
        return mf_endpoint_data(pool);
    mf_mysql_client_t *c = mf__client_new(loop, url, o);
    if (!c)
        return NULL; /* a malformed URL makes no endpoint */
    mf_endpoint_limits_t lim = {.max_conns = o->max_connections,
                                .max_waiters = o->max_waiters,
                                .idle_timeout_ms = o->idle_timeout_ms};
    c->pool = mf_endpoint_get(loop, &mf__mysql_pool_ops, key, &lim);
    mf_endpoint_set_data(c->pool, c);
    return c;
}

mf_mysql_client_t *mf_mysql_client(mf_loop_t *loop, const char *url,
                                   const mf_mysql_opts_t *opts, int *error)
{
    mf_mysql_opts_t o;
    mf__opts_normalize(&o, opts);
    if (error)
        *error = 0;
    if (!url || o.pipeline > MF_MYSQL_PIPELINE_MAX) {
        if (error)
            *error = MF_EINVAL;
        return NULL;
    }
    char buf[512], *heap;
    const char *key = mf__client_key(buf, sizeof buf, &heap, url, &o);
    mf_mysql_client_t *c = mf__client_get(loop, url, &o, key);
    mf_free(heap);
    if (!c && error)
        *error = MF_EINVAL;
    return c;
}

uint64_t mf_mysql_client_connects(const mf_mysql_client_t *client)
{
    return client->connects;
}

/* A client for people (host:port/db or its socket, never the user or the
 * password), and what it counts beside the pool: tasks bound to a
 * connection being opened for them wait too. */
static void mf__client_describe(const mf_endpoint_t *pool,
                                mf_endpoint_stats_t *st, char *label,
                                size_t cap)
{
    const mf_mysql_client_t *c = mf_endpoint_data(pool);
    if (!c)
        return;
    const mf_mysql_endpoint_t *ep = &c->ep;
    snprintf(label, cap, "%s:%u/%s",
             ep->socket_path ? ep->socket_path : ep->host, ep->port,
             ep->db ? ep->db : "");
    st->label = label;
    st->waiters += c->nbound;
    st->connects = c->connects;
}

typedef struct mf__stats_walk {
    mf_mysql_client_stats_fn fn;
    void *ud;
} mf__stats_walk_t;

static void mf__stats_one(void *ud, const mf_endpoint_stats_t *st)
{
    const mf__stats_walk_t *walk = ud;
    const mf_mysql_client_t *c = st->data;
    if (!c)
        return;
    const mf_mysql_endpoint_t *ep = &c->ep;
    mf_mysql_client_stats_t out = {ep->socket_path ? ep->socket_path : ep->host,
                                   ep->port,
                                   ep->db ? ep->db : "",
                                   (unsigned)st->connections,
                                   st->idle,
                                   (unsigned)st->waiters, /* described */
                                   st->connects,
                                   st->evictions};
    walk->fn(walk->ud, &out);
}

void mf_mysql_clients_stats(mf_loop_t *loop, mf_mysql_client_stats_fn fn,
                            void *ud)
{
    mf__stats_walk_t walk = {fn, ud};
    mf_endpoint_stats(loop, mf__mysql_pool_ops.protocol, mf__stats_one, &walk);
}

unsigned mf_mysql_client_open(const mf_mysql_client_t *client)
{
    return (unsigned)mf_endpoint_count(client->pool) - client->nopening;
}

/* ---- waiters ----------------------------------------------------------------
 */

static mf_mysql_conn_t *mf__conn_of(mf_pconn_t *pc)
{
    return mf_container_of(pc, mf_mysql_conn_t, pconn);
}

static mf_mysql_waiter_t *mf__waiter_of(mf_pwaiter_t *pw)
{
    return mf_container_of(pw, mf_mysql_waiter_t, pw);
}

/* The pool hands an idle connection, or one released, to a waiter. */
static void mf__waiter_granted(mf_pwaiter_t *pw, mf_pconn_t *pc)
{
    mf_mysql_waiter_t *w = mf__waiter_of(pw);
    w->ops->granted(w, mf__conn_of(pc));
}

void mf__mysql_waiter_init(mf_mysql_waiter_t *w,
                           const mf_mysql_waiter_ops_t *ops)
{
    mf_pwaiter_init(&w->pw, mf__waiter_granted);
    w->opening = NULL;
    w->ops = ops;
}

int mf__mysql_client_acquire(mf_mysql_client_t *c, mf_mysql_waiter_t *w)
{
    return mf_endpoint_acquire(c->pool, &w->pw);
}

static void mf__unbind(mf_mysql_waiter_t *w)
{
    w->opening->opener = NULL;
    w->opening->client->nbound--;
    w->opening = NULL;
}

void mf__mysql_client_unwait(mf_mysql_waiter_t *w)
{
    if (w->opening) /* it opens on, for whoever waits then */
        mf__unbind(w);
    mf_pwaiter_cancel(&w->pw);
}

/* ---- pooled connections -----------------------------------------------------
 */

/* Out of the pool (its slot goes to the oldest waiter), then closed. */
static void mf__conn_remove(mf_mysql_conn_t *conn)
{
    mf_pconn_remove(&conn->pconn);
    mf__mysql_conn_close(conn);
}

/* The pool dropped it (idle too long, closed by the server, unhealthy, the
 * loop's end). */
static void mf__conn_drop(mf_pconn_t *pc)
{
    mf__mysql_conn_close(mf__conn_of(pc));
}

static bool mf__client_healthy(mf_pconn_t *pc)
{
    return mf__mysql_conn_alive(mf__conn_of(pc));
}

/* Open, clean and nobody's: the oldest waiter's, or idle. */
static void mf__conn_offer(mf_mysql_conn_t *conn)
{
    mf__mysql_conn_park(conn);
    mf_endpoint_release(&conn->pconn);
}

static void mf__pooled_opened(mf_mysql_conn_t *conn)
{
    mf_mysql_client_t *c = conn->client;
    c->nopening--;
    c->connects++;
    mf__mysql_client_learn_status(c, conn->mysql.server_status);
    mf_mysql_waiter_t *w = conn->opener;
    if (!w) { /* its waiter gave up */
        mf__conn_offer(conn);
        return;
    }
    mf__unbind(w);
    w->ops->granted(w, conn);
}

static void mf__pooled_open_failed(mf_mysql_conn_t *conn, int state, int error,
                                   unsigned code, const char *sqlstate,
                                   const char *message)
{
    conn->client->nopening--;
    mf_mysql_waiter_t *w = conn->opener;
    if (w) {
        mf__unbind(w);
        w->ops->failed(w, state, error, code, sqlstate, message);
    }
    conn->broken = true;
    mf__conn_remove(conn);
}

static void mf__pooled_reset_done(mf_mysql_conn_t *conn, bool ok)
{
    if (!ok) {
        conn->broken = true;
        mf__conn_remove(conn);
        return;
    }
    conn->dirty = false;
    mf__conn_offer(conn);
}

static const mf_mysql_conn_hooks_t mf__pooled_hooks = {
    .opened = mf__pooled_opened,
    .open_failed = mf__pooled_open_failed,
    .reset_done = mf__pooled_reset_done,
};

/* ops->open: a new connection for w, whose slot it is. */
static void mf__client_open(mf_endpoint_t *pool, mf_pwaiter_t *pw)
{
    mf_mysql_client_t *c = mf_endpoint_data(pool);
    mf_mysql_waiter_t *w = mf__waiter_of(pw);
    mf_mysql_conn_t *conn = mf__mysql_conn_create(c, &mf__pooled_hooks);
    mf_pconn_add(pool, &conn->pconn, &conn->io);
    c->nopening++;
    conn->opener = w;
    w->opening = conn;
    c->nbound++;
    mf__mysql_conn_connect(conn);
}

void mf__mysql_client_release(mf_mysql_conn_t *conn)
{
    conn->task = NULL;
    conn->session = NULL;
    if (conn->broken) {
        mf__conn_remove(conn);
        return;
    }
    if (!conn->dirty) {
        mf__conn_offer(conn);
        return;
    }
    /* A waiter waits for it rather than opening another connection. */
    mf_pconn_returning(&conn->pconn);
    mf__mysql_conn_reset(conn);
}

/* ---- KILL -------------------------------------------------------------------
 */

/* Queues id for the KILL connection already at work. Full or out of
 * memory: the statement runs on until the server notices the closed
 * socket; say so. */
static void mf__kill_enqueue(mf_mysql_client_t *c, unsigned long id)
{
    if (!c->kill_ids) {
        c->kill_cap = 2 * c->opts.max_connections;
        c->kill_ids = mf_try_malloc(c->kill_cap * sizeof(*c->kill_ids));
    }
    if (!c->kill_ids || c->nkill_ids == c->kill_cap) {
        fprintf(stderr,
                "moonflow: mysql: KILL %lu not sent: %s (its statement runs "
                "until the server sees the connection closed)\n",
                id, c->kill_ids ? "too many kills queued" : "out of memory");
        return;
    }
    c->kill_ids[(c->kill_head + c->nkill_ids++) % c->kill_cap] = id;
}

static bool mf__kill_dequeue(mf_mysql_client_t *c, unsigned long *id)
{
    if (c->nkill_ids == 0)
        return false;
    *id = c->kill_ids[c->kill_head];
    c->kill_head = (c->kill_head + 1) % c->kill_cap;
    c->nkill_ids--;
    return true;
}

static void mf__killer_open(mf_mysql_client_t *c, unsigned long id);

static void mf__killer_close(mf_mysql_conn_t *conn)
{
    mf_list_remove(&conn->link);
    mf__mysql_conn_close(conn);
}

/* The next queued id goes out on the same connection while it is sound,
 * or on a new one. */
static void mf__kill_next(mf_mysql_conn_t *conn, bool sound)
{
    mf_mysql_client_t *c = conn->client;
    unsigned long id;
    if (!mf__kill_dequeue(c, &id)) {
        mf__killer_close(conn);
        return;
    }
    if (sound) {
        mf__mysql_conn_send_kill(conn, id);
        return;
    }
    mf__killer_close(conn);
    mf__killer_open(c, id);
}

static void mf__killer_opened(mf_mysql_conn_t *conn)
{
    mf__mysql_client_learn_status(conn->client, conn->mysql.server_status);
    mf__mysql_conn_send_kill(conn, conn->kill_id);
}

static void mf__killer_open_failed(mf_mysql_conn_t *conn, int state, int error,
                                   unsigned code, const char *sqlstate,
                                   const char *message)
{
    (void)state, (void)error, (void)code, (void)sqlstate;
    fprintf(stderr, "moonflow: mysql: KILL %lu: no connection: %s\n",
            conn->kill_id, message);
    conn->broken = true;
    mf__kill_next(conn, false);
}

static const mf_mysql_conn_hooks_t mf__killer_hooks = {
    .opened = mf__killer_opened,
    .open_failed = mf__killer_open_failed,
    .kill_done = mf__kill_next,
};

/* A KILL connection, not pooled: sends KILL CONNECTION id once open. */
/* A KILL connection for id on target's server (an upstream group's
 * connections are on several), or NULL: the URL's. */
static void mf__killer_open_to(mf_mysql_client_t *c, unsigned long id,
                               const mf_mysql_conn_t *target)
{
    mf_mysql_conn_t *conn = mf__mysql_conn_create(c, &mf__killer_hooks);
    conn->kill_id = id;
    if (target) {
        snprintf(conn->host, sizeof conn->host, "%s", target->host);
        conn->port = target->port;
    }
    mf_list_push_back(&c->killers, &conn->link);
    mf__mysql_conn_connect(conn);
}

static void mf__killer_open(mf_mysql_client_t *c, unsigned long id)
{
    mf__killer_open_to(c, id, NULL);
}

void mf__mysql_client_kill(mf_mysql_conn_t *conn)
{
    mf_mysql_client_t *c = conn->client;
    if (conn->thread_id && mf__mysql_conn_is_open(conn) && conn->ups) {
        mf__killer_open_to(c, conn->thread_id, conn); /* its own server */
    } else if (conn->thread_id && mf__mysql_conn_is_open(conn)) {
        if (mf_list_empty(&c->killers))
            mf__killer_open(c, conn->thread_id);
        else
            mf__kill_enqueue(c, conn->thread_id);
    }
    conn->broken = true;
    mf__conn_remove(conn);
}
