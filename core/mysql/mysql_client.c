/*
 * mysql_client.c — clients: options, the per-loop registry (one client per
 * URL and options, freed with the loop) and the pool: which connection
 * serves a task (idle, a new one, or a place in the wait queue), and where
 * a connection goes when its task is done.
 *
 * Ownership: the registry lives under the loop's MySQL key and
 * owns its clients; a client owns its connections and sessions. Client
 * memory comes from mf_xcalloc once per URL and loop.
 */
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
#undef MF__OPT
}

static bool mf__opts_equal(const mf_mysql_opts_t *a, const mf_mysql_opts_t *b)
{
    return a->connect_timeout_ms == b->connect_timeout_ms &&
           a->query_timeout_ms == b->query_timeout_ms &&
           a->idle_timeout_ms == b->idle_timeout_ms &&
           a->max_connections == b->max_connections &&
           a->max_waiters == b->max_waiters &&
           a->wait_timeout_ms == b->wait_timeout_ms &&
           a->stmt_cache == b->stmt_cache && a->max_result == b->max_result;
}

static mf_list_t *mf__list_first(mf_list_t *head)
{
    return mf_list_empty(head) ? NULL : head->next;
}

/* ---- registry -------------------------------------------------------------
 */

static void mf__client_free(mf_mysql_client_t *c)
{
    mf_list_t *node;
    /* The loop goes away with tasks in flight: they are dropped, not
     * completed, and no connection is opened for the waiting ones. */
    c->closing = true;
    mf_list_init(&c->waiters);
    c->nwaiters = 0;
    while ((node = mf_list_pop_front(&c->sessions)) != NULL) {
        mf_mysql_session_t *s = mf_container_of(node, mf_mysql_session_t, link);
        mf_loop_free(c->loop, s, sizeof(*s));
    }
    while ((node = mf__list_first(&c->conns)) != NULL)
        mf__mysql_conn_close(mf_container_of(node, mf_mysql_conn_t, link));
    while ((node = mf__list_first(&c->killers)) != NULL)
        mf__mysql_conn_close(mf_container_of(node, mf_mysql_conn_t, link));
    mf__mysql_quoter_close(c);
    mf_free(c->kill_ids);
    mf__mysql_endpoint_free(&c->ep);
    mf_free(c->url);
    mf_free(c);
}

static void mf__registry_free(mf_loop_t *loop, void *ext)
{
    mf_mysql_registry_t *reg = ext;
    (void)loop;
    mf_list_t *node;
    while ((node = mf_list_pop_front(&reg->clients)) != NULL)
        mf__client_free(mf_container_of(node, mf_mysql_client_t, link));
    mf_free(reg);
}

/* A protocol client's state (loop.h). */
#define MF_MYSQL_LOOP_RANK 23
static mf_loop_key_t mf__mysql_loop_key =
    MF_LOOP_KEY_INIT(MF_MYSQL_LOOP_RANK, mf__registry_free);

static mf_mysql_registry_t *mf__registry(mf_loop_t *loop)
{
    mf_mysql_registry_t *reg = mf_loop_get(loop, &mf__mysql_loop_key);
    if (reg)
        return reg;
    reg = mf_xcalloc(1, sizeof(*reg));
    reg->loop = loop;
    mf_list_init(&reg->clients);
    mf_loop_set(loop, &mf__mysql_loop_key, reg);
    return reg;
}

static mf_mysql_client_t *mf__client_new(mf_loop_t *loop, const char *url,
                                         const mf_mysql_opts_t *opts)
{
    mf_mysql_client_t *c = mf_xcalloc(1, sizeof(*c));
    c->loop = loop;
    c->opts = *opts;
    mf_list_init(&c->conns);
    mf_list_init(&c->idle);
    mf_list_init(&c->waiters);
    mf_list_init(&c->killers);
    mf_list_init(&c->sessions);
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

mf_mysql_client_t *mf_mysql_client(mf_loop_t *loop, const char *url,
                                   const mf_mysql_opts_t *opts, int *error)
{
    mf_mysql_opts_t o;
    mf__opts_normalize(&o, opts);
    if (error)
        *error = 0;
    if (!url) {
        if (error)
            *error = MF_EINVAL;
        return NULL;
    }
    mf_mysql_registry_t *reg = mf__registry(loop);
    mf_list_t *node;
    mf_list_foreach(node, &reg->clients)
    {
        mf_mysql_client_t *c = mf_container_of(node, mf_mysql_client_t, link);
        if (strcmp(c->url, url) == 0 && mf__opts_equal(&c->opts, &o))
            return c;
    }
    mf_mysql_client_t *c = mf__client_new(loop, url, &o);
    if (!c) {
        if (error)
            *error = MF_EINVAL;
        return NULL;
    }
    mf_list_push_back(&reg->clients, &c->link);
    return c;
}

uint64_t mf_mysql_client_connects(const mf_mysql_client_t *client)
{
    return client->connects;
}

void mf_mysql_clients_stats(mf_loop_t *loop, mf_mysql_client_stats_fn fn,
                            void *ud)
{
    mf_mysql_registry_t *reg = mf_loop_get(loop, &mf__mysql_loop_key);
    mf_list_t *node, *n;
    if (!reg)
        return;
    mf_list_foreach(node, &reg->clients)
    {
        const mf_mysql_client_t *c =
            mf_container_of(node, mf_mysql_client_t, link);
        const mf_mysql_endpoint_t *ep = &c->ep;
        mf_mysql_client_stats_t st = {ep->socket_path ? ep->socket_path
                                                      : ep->host,
                                      ep->port,
                                      ep->db ? ep->db : "",
                                      c->nconns,
                                      0,
                                      c->nwaiters,
                                      c->connects,
                                      c->evictions};
        mf_list_foreach(n, &c->idle) st.idle++;
        fn(ud, &st);
    }
}

unsigned mf_mysql_client_open(const mf_mysql_client_t *client)
{
    return client->nconns - client->nopening;
}

/* ---- the pool -------------------------------------------------------------
 */

/* Opens connections while waiters outnumber those already opening or
 * being reset (each will serve one). */
static void mf__client_grow(mf_mysql_client_t *c)
{
    while (!c->closing && c->nwaiters > c->nopening + c->nresetting &&
           c->nconns < c->opts.max_connections)
        mf__mysql_conn_open(c, false, 0);
}

void mf__mysql_client_acquire(mf_mysql_task_t *t)
{
    mf_mysql_client_t *c = t->client;
    mf_list_t *node;
    while ((node = mf__list_first(&c->idle)) != NULL) {
        mf_mysql_conn_t *conn =
            mf_container_of(node, mf_mysql_conn_t, idle_link);
        if (!mf__mysql_conn_alive(conn)) {
            mf__mysql_conn_close(conn); /* its close is not seen yet */
            continue;
        }
        mf__mysql_conn_take(conn);
        mf__mysql_task_attach(t, conn);
        return;
    }
    /* Tasks that a connection being opened will serve are not "in the
     * queue" yet: max_waiters bounds the ones beyond them. */
    if (c->nconns >= c->opts.max_connections &&
        c->nwaiters >= c->opts.max_waiters + c->nopening) {
        mf__mysql_task_fail_waiting(t, MF_STATE_TASK_ERROR, MF_EBUSY, 0, NULL,
                                    NULL);
        return;
    }
    t->step = MF_MT_WAITING;
    mf_timer_start(c->loop, &t->timer, c->opts.wait_timeout_ms);
    mf_list_push_back(&c->waiters, &t->link);
    c->nwaiters++;
    mf__client_grow(c);
}

void mf__mysql_client_unwait(mf_mysql_task_t *t)
{
    mf_list_remove(&t->link);
    t->client->nwaiters--;
}

static mf_mysql_task_t *mf__client_pop_waiter(mf_mysql_client_t *c)
{
    mf_list_t *node = mf_list_pop_front(&c->waiters);
    if (!node)
        return NULL;
    c->nwaiters--;
    return mf_container_of(node, mf_mysql_task_t, link);
}

void mf__mysql_client_offer(mf_mysql_conn_t *conn)
{
    mf_mysql_task_t *t = mf__client_pop_waiter(conn->client);
    if (t) {
        conn->state = MF_MCONN_BUSY;
        mf__mysql_task_attach(t, conn);
        return;
    }
    mf__mysql_conn_park(conn);
    mf_list_push_front(&conn->client->idle, &conn->idle_link);
}

void mf__mysql_client_open_failed(mf_mysql_conn_t *conn, int state, int error,
                                  unsigned code, const char *sqlstate,
                                  const char *message)
{
    mf_mysql_task_t *t = mf__client_pop_waiter(conn->client);
    if (t)
        mf__mysql_task_fail_waiting(t, state, error, code, sqlstate, message);
}

void mf__mysql_client_forget(mf_mysql_conn_t *conn)
{
    mf_mysql_client_t *c = conn->client;
    mf_list_remove(&conn->link);
    if (conn->state == MF_MCONN_IDLE)
        mf_list_remove(&conn->idle_link);
    c->nconns--;
    mf__client_grow(c); /* its slot may serve a waiter */
}
