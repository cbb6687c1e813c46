/*
 * mysql_conn.c — one connection to the server over the connector's
 * non-blocking API: name resolution with the net layer's DNS, connect
 * (TCP or unix socket, TLS, authentication) with the numeric address, the
 * operation runner that drives every fn_start/fn_cont pair from the loop,
 * COM_RESET_CONNECTION before reuse, the idle watch, KILL, and close.
 *
 * Ownership: the client owns the connection (client->conns, or
 * client->killers for a KILL connection); the MYSQL handle is embedded and
 * its memory is the connector's until mysql_close. The connection memory
 * goes back from a deferred post, never inside one of its callbacks.
 * May call: the engine and net layers, the connector, and the pool and
 * task functions of mysql_int.h.
 */
#include <errmsg.h>
#include <errno.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "mysql_int.h"

static void mf__conn_drive(mf_mysql_conn_t *conn, int ready);

/* ---- the operation runner -------------------------------------------------
 */

static void mf__conn_io_cb(mf_io_t *io, unsigned events)
{
    mf_mysql_conn_t *conn = io->data;
    if (!conn->step) {
        /* Nothing asked to read: the server closed an idle connection (a
         * restart, KILL, wait_timeout) or sent what nobody expects. A
         * write-only edge (the last operation waited to write) is not. */
        if (conn->state == MF_MCONN_IDLE && (events & ~MF_IO_WRITE)) {
            conn->client->evictions++;
            mf__mysql_conn_close(conn);
        }
        return;
    }
    int ready = 0;
    if (events & (MF_IO_READ | MF_IO_ERROR | MF_IO_HUP | MF_IO_RDHUP))
        ready |= MYSQL_WAIT_READ;
    if (events & (MF_IO_WRITE | MF_IO_ERROR | MF_IO_HUP))
        ready |= MYSQL_WAIT_WRITE;
    mf_timer_stop(conn->loop, &conn->op_timer);
    mf__conn_drive(conn, ready);
}

static void mf__conn_op_timer_cb(mf_timer_t *timer)
{
    mf__conn_drive(timer->data, MYSQL_WAIT_TIMEOUT);
}

/* Watches the socket for what the connector waits for. The watcher keeps
 * READ interest between operations (one epoll_ctl per connection, not per
 * query); the connector only waits after a read or write said EAGAIN, so an
 * edge-triggered event always follows. */
static int mf__conn_watch(mf_mysql_conn_t *conn, int status)
{
    int fd = (int)mysql_get_socket(&conn->mysql);
    if (conn->io.fd != fd) {
        mf_io_stop(conn->loop, &conn->io);
        mf_io_init(&conn->io, fd, mf__conn_io_cb, conn);
    }
    unsigned events = MF_IO_READ;
    if (status & MYSQL_WAIT_WRITE)
        events |= MF_IO_WRITE;
    if (status & MYSQL_WAIT_TIMEOUT)
        mf_timer_start(conn->loop, &conn->op_timer,
                       mysql_get_timeout_value_ms(&conn->mysql));
    return fd >= 0 ? mf_io_start(conn->loop, &conn->io, events) : 0;
}

static void mf__conn_drive(mf_mysql_conn_t *conn, int ready)
{
    conn->in_runner = true;
    while (conn->step) {
        int status = conn->step(conn, ready);
        if (status) {
            if (mf__conn_watch(conn, status) == 0)
                break;
            /* The loop refused the socket: cut the operation off; it ends
             * with the connector's error and its done() reports it. */
            shutdown((int)mysql_get_socket(&conn->mysql), SHUT_RDWR);
            ready = MYSQL_WAIT_READ | MYSQL_WAIT_WRITE;
            continue;
        }
        mf_mysql_done_fn done = conn->done;
        conn->step = NULL;
        conn->done = NULL;
        done(conn); /* may start the next operation */
        ready = 0;
    }
    conn->in_runner = false;
}

void mf__mysql_conn_run(mf_mysql_conn_t *conn, mf_mysql_step_fn step,
                        mf_mysql_done_fn done)
{
    conn->step = step;
    conn->done = done;
    if (!conn->in_runner)
        mf__conn_drive(conn, 0);
}

/* ---- closing --------------------------------------------------------------
 */

static void mf__conn_free_cb(mf_post_t *post)
{
    mf_mysql_conn_t *conn = post->data;
    if (conn->resolving) {
        mf_loop_defer(conn->loop, post); /* its DNS callback still reads it */
        return;
    }
    mf_loop_free(conn->loop, conn, sizeof(*conn));
}

static bool mf__conn_connected(const mf_mysql_conn_t *conn)
{
    return conn->state != MF_MCONN_RESOLVING &&
           conn->state != MF_MCONN_CONNECTING;
}

/* Ends an operation in flight: with the socket shut, each call of its step
 * fails at once, so a few calls run the connector's coroutine to its end. */
static void mf__conn_cut(mf_mysql_conn_t *conn)
{
    int fd = (int)mysql_get_socket(&conn->mysql);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    for (int i = 0; conn->step && i < 16; i++)
        if (conn->step(conn, MYSQL_WAIT_READ | MYSQL_WAIT_WRITE) == 0)
            break;
    conn->step = NULL;
    conn->done = NULL;
}

/* mysql_close without blocking: COM_QUIT goes out if the socket takes it
 * at once (a healthy connection), otherwise the socket is shut first. */
static void mf__conn_close_handle(mf_mysql_conn_t *conn)
{
    bool started = conn->step != NULL || conn->state == MF_MCONN_CONNECTING;
    if (started)
        mf__conn_cut(conn);
    if (!mf__conn_connected(conn) || conn->broken) {
        int fd = (int)mysql_get_socket(&conn->mysql);
        if (fd >= 0)
            shutdown(fd, SHUT_RDWR);
    }
    int status = mysql_close_start(&conn->mysql);
    for (int i = 0; status && i < 16; i++) {
        shutdown((int)mysql_get_socket(&conn->mysql), SHUT_RDWR);
        status =
            mysql_close_cont(&conn->mysql, MYSQL_WAIT_READ | MYSQL_WAIT_WRITE);
    }
}

void mf__mysql_conn_close(mf_mysql_conn_t *conn)
{
    if (conn->state == MF_MCONN_CLOSED)
        return;
    mf_mysql_client_t *c = conn->client;
    if (conn->state == MF_MCONN_RESOLVING)
        mf_dns_query_cancel(&conn->dns);
    if (conn->killer) {
        mf_list_remove(&conn->link);
    } else {
        if (!mf__conn_connected(conn))
            c->nopening--;
        if (conn->state == MF_MCONN_RESETTING)
            c->nresetting--;
        mf__mysql_client_forget(conn);
    }
    if (conn->stmt_cache_drop)
        conn->stmt_cache_drop(conn);
    mf_io_stop(conn->loop, &conn->io);
    mf_timer_stop(conn->loop, &conn->op_timer);
    mf_timer_stop(conn->loop, &conn->life_timer);
    mf__conn_close_handle(conn);
    conn->state = MF_MCONN_CLOSED;
    mf_loop_defer(conn->loop, &conn->free_post);
}

bool mf__mysql_conn_error_is_fatal(unsigned code)
{
    /* 2000-2999 are the connector's own: the link failed, or the protocol
     * went out of step (commands out of sync, malformed packet); either
     * way the connection cannot serve the next task. The server's errors
     * that end a connection come with 2013/2006 on the next read. */
    return (code >= 2000 && code < 3000) || code == ER_CONNECTION_KILLED ||
           code == ER_SERVER_SHUTDOWN || code == ER_QUERY_INTERRUPTED ||
           code == ER_NET_READ_ERROR || code == ER_NET_WRITE_INTERRUPTED;
}

/* ---- KILL -----------------------------------------------------------------
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

void mf__mysql_conn_kill(mf_mysql_conn_t *conn)
{
    mf_mysql_client_t *c = conn->client;
    if (conn->thread_id && mf__conn_connected(conn)) {
        if (mf_list_empty(&c->killers))
            mf__mysql_conn_open(c, true, conn->thread_id);
        else
            mf__kill_enqueue(c, conn->thread_id);
    }
    conn->broken = true;
    mf__mysql_conn_close(conn);
}

static int mf__step_kill(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_real_query_start(&conn->ret.i, &conn->mysql,
                                      conn->kill_sql, strlen(conn->kill_sql));
    return mysql_real_query_cont(&conn->ret.i, &conn->mysql, ready);
}

static void mf__kill_done(mf_mysql_conn_t *conn);

static void mf__kill_send(mf_mysql_conn_t *conn)
{
    conn->state = MF_MCONN_KILLING;
    snprintf(conn->kill_sql, sizeof conn->kill_sql, "KILL CONNECTION %lu",
             conn->kill_id);
    mf__mysql_conn_run(conn, mf__step_kill, mf__kill_done);
}

/* The next queued id goes out on the same connection while it is sound,
 * or on a new one. */
static void mf__kill_next(mf_mysql_conn_t *conn, bool sound)
{
    mf_mysql_client_t *c = conn->client;
    unsigned long id;
    if (!mf__kill_dequeue(c, &id)) {
        mf__mysql_conn_close(conn);
        return;
    }
    if (sound) {
        conn->kill_id = id;
        mf__kill_send(conn);
        return;
    }
    mf__mysql_conn_close(conn);
    if (!c->closing)
        mf__mysql_conn_open(c, true, id);
}

static void mf__kill_done(mf_mysql_conn_t *conn)
{
    /* Unknown thread (1094): the connection ended on its own meanwhile.
     * Any other failure leaves the statement running until the server
     * notices the closed socket; say so where someone can see it. */
    unsigned code = conn->ret.i ? mysql_errno(&conn->mysql) : 0;
    if (code && code != ER_NO_SUCH_THREAD)
        fprintf(stderr, "moonflow: mysql: KILL %lu failed: %s\n", conn->kill_id,
                mysql_error(&conn->mysql));
    mf__kill_next(conn, !mf__mysql_conn_error_is_fatal(code));
}

/* ---- opening --------------------------------------------------------------
 */

/* The connection did not open: code/sqlstate/message explain why (NULL
 * message: the connector's own words). */
static void mf__conn_refused(mf_mysql_conn_t *conn, int state, int error,
                             unsigned code, const char *sqlstate,
                             const char *message)
{
    MYSQL *m = &conn->mysql;
    if (!message) {
        code = mysql_errno(m);
        sqlstate = mysql_sqlstate(m);
        message = mysql_error(m);
    }
    if (!conn->killer)
        mf__mysql_client_open_failed(conn, state, error, code, sqlstate,
                                     message);
    else
        fprintf(stderr, "moonflow: mysql: KILL %lu: no connection: %s\n",
                conn->kill_id, message);
    conn->broken = true;
    if (conn->killer)
        mf__kill_next(conn, false);
    else
        mf__mysql_conn_close(conn);
}

static void mf__conn_open_failed(mf_mysql_conn_t *conn, int state, int error)
{
    mf__conn_refused(conn, state, error, 0, NULL, NULL);
}

static void mf__conn_life_cb(mf_timer_t *timer)
{
    mf_mysql_conn_t *conn = timer->data;
    if (conn->state == MF_MCONN_IDLE) {
        conn->client->evictions++;
        mf__mysql_conn_close(conn); /* idle too long */
        return;
    }
    mf__conn_open_failed(conn, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
}

static void mf__conn_opened(mf_mysql_conn_t *conn)
{
    mf_mysql_client_t *c = conn->client;
    mf_timer_stop(conn->loop, &conn->life_timer);
    /* The connector goes on in plain text when the server offers no TLS,
     * even with MYSQL_OPT_SSL_ENFORCE: refuse the connection here. */
    if (c->ep.ssl >= MF_MYSQL_SSL_REQUIRED &&
        !mysql_get_ssl_cipher(&conn->mysql)) {
        mf__conn_refused(conn, MF_STATE_TLS_ERROR, MF_ETLS,
                         CR_SSL_CONNECTION_ERROR, "HY000",
                         "TLS/SSL error: ssl=required and the server offers "
                         "no TLS");
        return;
    }
    conn->thread_id = mysql_thread_id(&conn->mysql);
    mf__mysql_client_learn_status(c, conn->mysql.server_status);
    if (conn->killer) {
        mf__kill_send(conn);
        return;
    }
    c->nopening--;
    c->connects++;
    conn->state = MF_MCONN_BUSY;
    mf__mysql_client_offer(conn);
}

static int mf__step_connect(mf_mysql_conn_t *conn, int ready)
{
    const mf_mysql_endpoint_t *ep = &conn->client->ep;
    if (!ready)
        return mysql_real_connect_start(
            &conn->ret.mysql, &conn->mysql,
            ep->socket_path ? "localhost" : conn->addr, ep->user, ep->password,
            ep->db, ep->port, ep->socket_path,
            CLIENT_MULTI_STATEMENTS | CLIENT_MULTI_RESULTS);
    return mysql_real_connect_cont(&conn->ret.mysql, &conn->mysql, ready);
}

static void mf__connect_done(mf_mysql_conn_t *conn)
{
    if (conn->ret.mysql) {
        mf__conn_opened(conn);
        return;
    }
    int state, error;
    mf__mysql_error_map(mysql_errno(&conn->mysql), mysql_error(&conn->mysql),
                        &state, &error);
    mf__conn_open_failed(conn, state, error);
}

static void mf__conn_connect(mf_mysql_conn_t *conn)
{
    conn->state = MF_MCONN_CONNECTING;
    mf__mysql_conn_run(conn, mf__step_connect, mf__connect_done);
}

static void mf__conn_dns_cb(mf_dns_query_t *q, int status)
{
    mf_mysql_conn_t *conn = q->data;
    conn->resolving = false;
    if (conn->state == MF_MCONN_CLOSED)
        return; /* canceled by close; the free post waits for this */
    if (status == 0 && q->naddrs == 0)
        status = MF_EDNS;
    if (status < 0) {
        mf__conn_open_failed(conn,
                             status == MF_ETIMEDOUT ? MF_STATE_TIMEOUT
                                                    : MF_STATE_DNS_ERROR,
                             status == MF_ETIMEDOUT ? MF_ETIMEDOUT : MF_EDNS);
        return;
    }
    mf_sockaddr_format_ip(&q->addrs[0], conn->addr, sizeof conn->addr);
    mf__conn_connect(conn);
}

/* The connector's options: never blocking, the charset, TLS as asked. */
static int mf__conn_options(mf_mysql_conn_t *conn)
{
    const mf_mysql_endpoint_t *ep = &conn->client->ep;
    MYSQL *m = &conn->mysql;
    my_bool yes = 1, no = 0;
    int rc = mysql_options(m, MYSQL_OPT_NONBLOCK, 0);
    rc |= mysql_options(m, MYSQL_SET_CHARSET_NAME, ep->charset);
    rc |= mysql_options(m, MYSQL_OPT_LOCAL_INFILE, &no);
    if (ep->ssl == MF_MYSQL_SSL_DISABLED)
        return rc;
    if (ep->ssl == MF_MYSQL_SSL_PREFERRED)
        return rc | mysql_ssl_set(m, NULL, NULL, NULL, NULL, NULL);
    rc |= mysql_options(m, MYSQL_OPT_SSL_ENFORCE, &yes);
    /* With a CA the connector checks the chain; VERIFY_SERVER_CERT adds
     * the name check, against the numeric address it was given. */
    bool verify = ep->ssl >= MF_MYSQL_SSL_VERIFY_IDENTITY;
    rc |=
        mysql_options(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, verify ? &yes : &no);
    if (ep->ca)
        rc |= mysql_options(m, MYSQL_OPT_SSL_CA, ep->ca);
    return rc;
}

mf_mysql_conn_t *mf__mysql_conn_open(mf_mysql_client_t *client, bool killer,
                                     unsigned long kill_id)
{
    mf_mysql_conn_t *conn = mf_loop_alloc(client->loop, sizeof(*conn));
    memset(conn, 0, sizeof(*conn));
    conn->loop = client->loop;
    conn->client = client;
    conn->killer = killer;
    conn->kill_id = kill_id;
    mf_io_init(&conn->io, -1, mf__conn_io_cb, conn);
    mf_timer_init(&conn->op_timer, mf__conn_op_timer_cb, conn);
    mf_timer_init(&conn->life_timer, mf__conn_life_cb, conn);
    mf_post_init(&conn->free_post, mf__conn_free_cb, conn);
    mf_list_init(&conn->idle_link);
    conn->state = MF_MCONN_RESOLVING;
    if (killer) {
        mf_list_push_back(&client->killers, &conn->link);
    } else {
        mf_list_push_back(&client->conns, &conn->link);
        client->nconns++;
        client->nopening++;
    }
    mf_timer_start(conn->loop, &conn->life_timer,
                   client->opts.connect_timeout_ms);
    if (!mysql_init(&conn->mysql) || mf__conn_options(conn) != 0) {
        mf__conn_open_failed(conn, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return NULL;
    }
    if (client->ep.socket_path) {
        mf__conn_connect(conn);
        return conn;
    }
    conn->resolving = true;
    mf_dns_query_start(conn->loop, &conn->dns, client->ep.host, client->ep.port,
                       mf__conn_dns_cb, conn);
    return conn;
}

/* ---- reuse ----------------------------------------------------------------
 */

void mf__mysql_conn_park(mf_mysql_conn_t *conn)
{
    conn->state = MF_MCONN_IDLE;
    conn->parked_ms = mf_loop_now(conn->loop);
    /* Read interest only: the idle watch is for the server's close. */
    if (conn->io.fd >= 0 && mf_io_start(conn->loop, &conn->io, MF_IO_READ) < 0)
        conn->broken = true; /* not watched: closed when next taken */
    mf_io_set_ref(conn->loop, &conn->io, false);
    mf_timer_set_ref(conn->loop, &conn->life_timer, false);
    mf_timer_start(conn->loop, &conn->life_timer,
                   conn->client->opts.idle_timeout_ms);
}

bool mf__mysql_conn_alive(const mf_mysql_conn_t *conn)
{
    char byte;
    if (conn->broken)
        return false;
    /* Parked within this millisecond of loop time: a hang-up since then is
     * no likelier than one just after a peek, and the idle watch sees it
     * at the next poll. A busy pool takes its connections back this way,
     * and the peek would cost it a syscall per query. */
    if (conn->parked_ms == mf_loop_now(conn->loop))
        return true;
    ssize_t n = recv(conn->io.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void mf__mysql_conn_take(mf_mysql_conn_t *conn)
{
    mf_list_remove(&conn->idle_link);
    conn->state = MF_MCONN_BUSY;
    mf_timer_stop(conn->loop, &conn->life_timer);
    mf_io_set_ref(conn->loop, &conn->io, true);
}

static int mf__step_reset(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_reset_connection_start(&conn->ret.i, &conn->mysql);
    return mysql_reset_connection_cont(&conn->ret.i, &conn->mysql, ready);
}

static void mf__reset_done(mf_mysql_conn_t *conn)
{
    if (conn->ret.i) {
        conn->broken = true;
        mf__mysql_conn_close(conn);
        return;
    }
    conn->dirty = false;
    conn->client->nresetting--;
    conn->state = MF_MCONN_BUSY;
    mf__mysql_client_offer(conn);
}

void mf__mysql_conn_release(mf_mysql_conn_t *conn)
{
    conn->task = NULL;
    conn->session = NULL;
    if (conn->broken) {
        mf__mysql_conn_close(conn);
        return;
    }
    if (!conn->dirty) {
        mf__mysql_client_offer(conn);
        return;
    }
    /* The server drops its prepared statements with the session state. */
    if (conn->stmt_cache_drop)
        conn->stmt_cache_drop(conn);
    conn->state = MF_MCONN_RESETTING;
    conn->client->nresetting++;
    mf__mysql_conn_run(conn, mf__step_reset, mf__reset_done);
}
