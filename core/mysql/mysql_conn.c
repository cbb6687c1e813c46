/*
 * mysql_conn.c — one connection to the server over the connector's
 * non-blocking API: name resolution with the net layer's DNS, connect
 * (TCP or unix socket, TLS, authentication) with the numeric address, the
 * operation runner that drives every fn_start/fn_cont pair from the loop,
 * COM_RESET_CONNECTION, the idle watch, the KILL statement, and close.
 *
 * Ownership: the client owns the connection (in its endpoint's pool, or
 * client->killers for a KILL connection) and decides when it closes; the
 * MYSQL handle is embedded and its memory is the connector's until
 * mysql_close. The connection memory goes back from a deferred post, never
 * inside one of its callbacks.
 * May call: the engine and net layers and the connector. Upward only
 * through the hooks its owner registered (conn->hooks) and the pool's
 * mf_pconn_idle_fired; it knows no task and no client function.
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
    if (!conn->step && conn->raw_io) {
        conn->raw_io(conn, events);
        return;
    }
    if (!conn->step) {
        /* Nothing asked to read: the server closed an idle connection (a
         * restart, KILL, wait_timeout) or sent what nobody expects; the
         * pool drops it. A write-only edge (the last operation waited to
         * write) is not. */
        if (mf_pconn_idle(&conn->pconn) && (events & ~MF_IO_WRITE))
            mf_pconn_idle_fired(&conn->pconn);
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
    if (conn->ups) {
        mf_upstream_abandon(conn->ups);
        mf_loop_free(conn->loop, conn->ups, sizeof(*conn->ups));
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
    if (conn->state == MF_MCONN_RESOLVING)
        mf_dns_query_cancel(&conn->dns);
    if (conn->stmt_cache_drop)
        conn->stmt_cache_drop(conn);
    mf_io_stop(conn->loop, &conn->io);
    mf_timer_stop(conn->loop, &conn->op_timer);
    mf_timer_stop(conn->loop, &conn->connect_timer);
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

void mf__mysql_error_map(unsigned code, const char *message, int *state,
                         int *error)
{
    *state = MF_STATE_SYS_ERROR;
    switch (code) {
    case CR_CONNECTION_ERROR:
    case CR_CONN_HOST_ERROR:
        *error = MF_ECONNREFUSED;
        return;
    case CR_SERVER_GONE_ERROR:
        *error = MF_ECLOSED;
        return;
    case CR_SERVER_LOST:
    case CR_SERVER_LOST_EXTENDED:
        *error = MF_ECONNRESET;
        return;
    case CR_SSL_CONNECTION_ERROR:
        *state = MF_STATE_TLS_ERROR;
        *error = MF_ETLS;
        return;
    case CR_OUT_OF_MEMORY:
        *error = MF_ENOMEM;
        return;
    case ER_ACCESS_DENIED_ERROR:
    case ER_DBACCESS_DENIED_ERROR:
    case ER_BAD_DB_ERROR:
    case ER_ACCESS_DENIED_NO_PASSWORD_ERROR:
        *state = MF_STATE_TASK_ERROR;
        *error = MF_EACCES;
        return;
    default:
        break;
    }
    /* The connector reports a refused TLS requirement with generic codes
     * whose text names TLS ("TLS/SSL error: ..."). */
    if (message && (strstr(message, "TLS") || strstr(message, "SSL"))) {
        *state = MF_STATE_TLS_ERROR;
        *error = MF_ETLS;
    } else if (code >= 2000 && code < 3000) {
        *state = MF_STATE_SYS_ERROR;
        *error = code == CR_UNKNOWN_HOST ? MF_EDNS : MF_EPROTO;
        if (code == CR_UNKNOWN_HOST)
            *state = MF_STATE_DNS_ERROR;
    } else {
        *state = MF_STATE_TASK_ERROR;
        *error = MF_ESQL;
    }
}

/* ---- KILL -----------------------------------------------------------------
 */

static int mf__step_kill(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_real_query_start(&conn->ret.i, &conn->mysql,
                                      conn->kill_sql, strlen(conn->kill_sql));
    return mysql_real_query_cont(&conn->ret.i, &conn->mysql, ready);
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
    conn->hooks->kill_done(conn, !mf__mysql_conn_error_is_fatal(code));
}

void mf__mysql_conn_send_kill(mf_mysql_conn_t *conn, unsigned long id)
{
    conn->state = MF_MCONN_KILLING;
    conn->kill_id = id;
    snprintf(conn->kill_sql, sizeof conn->kill_sql, "KILL CONNECTION %lu", id);
    mf__mysql_conn_run(conn, mf__step_kill, mf__kill_done);
}

/* ---- opening --------------------------------------------------------------
 */

/* The connection did not open: code/sqlstate/message explain why (NULL
 * message: the connector's own words). */
static bool mf__conn_next_server(mf_mysql_conn_t *conn, int state);
static void mf__conn_retry_cb(mf_post_t *post);

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
    mf_timer_stop(conn->loop, &conn->connect_timer);
    if (conn->ups && mf__conn_next_server(conn, state))
        return;
    conn->broken = true;
    conn->hooks->open_failed(conn, state, error, code, sqlstate, message);
}

static void mf__conn_open_failed(mf_mysql_conn_t *conn, int state, int error)
{
    mf__conn_refused(conn, state, error, 0, NULL, NULL);
}

static void mf__conn_connect_timer_cb(mf_timer_t *timer)
{
    mf__conn_open_failed(timer->data, MF_STATE_TIMEOUT, MF_ETIMEDOUT);
}

static void mf__conn_opened(mf_mysql_conn_t *conn)
{
    mf_mysql_client_t *c = conn->client;
    mf_timer_stop(conn->loop, &conn->connect_timer);
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
    conn->state = MF_MCONN_OPEN;
    if (conn->ups) /* a connection's request to its server: its open */
        mf_upstream_done(conn->ups, true,
                         mf_monotonic_ns() - conn->ups->attempt_ns);
    conn->hooks->opened(conn);
}

static int mf__step_connect(mf_mysql_conn_t *conn, int ready)
{
    const mf_mysql_endpoint_t *ep = &conn->client->ep;
    if (!ready)
        return mysql_real_connect_start(
            &conn->ret.mysql, &conn->mysql,
            ep->socket_path ? "localhost" : conn->addr, ep->user, ep->password,
            ep->db, conn->port, ep->socket_path,
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

static void mf__conn_handshake(mf_mysql_conn_t *conn)
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
    mf__conn_handshake(conn);
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

mf_mysql_conn_t *mf__mysql_conn_create(mf_mysql_client_t *client,
                                       const mf_mysql_conn_hooks_t *hooks)
{
    mf_mysql_conn_t *conn = mf_loop_alloc(client->loop, sizeof(*conn));
    memset(conn, 0, sizeof(*conn));
    conn->loop = client->loop;
    conn->client = client;
    conn->hooks = hooks;
    mf_io_init(&conn->io, -1, mf__conn_io_cb, conn);
    mf_timer_init(&conn->op_timer, mf__conn_op_timer_cb, conn);
    mf_timer_init(&conn->connect_timer, mf__conn_connect_timer_cb, conn);
    mf_post_init(&conn->free_post, mf__conn_free_cb, conn);
    mf_post_init(&conn->retry_post, mf__conn_retry_cb, conn);
    mf_list_init(&conn->link);
    conn->state = MF_MCONN_RESOLVING;
    return conn;
}

/* The server this connection dials: a KILL connection's was set by its
 * maker, a retry's by mf__conn_next_server; a group's name gives its pick
 * (0, or MF_ENOUPSTREAM); else the URL's. */
static int mf__conn_server(mf_mysql_conn_t *conn)
{
    const mf_mysql_client_t *client = conn->client;
    if (conn->host[0]) /* a KILL connection's, or the retry's pick */
        return 0;
    mf_upstream_t *up =
        conn->ups ? conn->ups->up
                  : mf_upstream_find(client->ep.host, MF_UPSTREAM_NUL);
    if (MF_LIKELY(!up)) {
        snprintf(conn->host, sizeof conn->host, "%s", client->ep.host);
        conn->port = client->ep.port;
        return 0;
    }
    if (!conn->ups) {
        conn->ups = mf_loop_alloc(conn->loop, sizeof *conn->ups);
        mf_upstream_try_init(conn->ups, up);
    }
    int rc = mf_upstream_balance(conn->loop, conn->ups, NULL, 0);
    if (rc < 0)
        return rc;
    snprintf(conn->host, sizeof conn->host, "%s", conn->ups->host);
    conn->port = conn->ups->port;
    return 0;
}

void mf__mysql_conn_connect(mf_mysql_conn_t *conn)
{
    const mf_mysql_client_t *client = conn->client;
    mf_timer_start(conn->loop, &conn->connect_timer,
                   client->opts.connect_timeout_ms);
    if (!mysql_init(&conn->mysql) || mf__conn_options(conn) != 0) {
        mf__conn_open_failed(conn, MF_STATE_SYS_ERROR, MF_ENOMEM);
        return;
    }
    if (client->ep.socket_path) {
        conn->port = client->ep.port;
        mf__conn_handshake(conn);
        return;
    }
    if (mf__conn_server(conn) < 0) {
        mf_timer_stop(conn->loop, &conn->connect_timer);
        conn->broken = true;
        conn->hooks->open_failed(conn, MF_STATE_TASK_ERROR, MF_ENOUPSTREAM,
                                 CR_CONN_HOST_ERROR, "HY000",
                                 "no live upstream");
        return;
    }
    conn->state = MF_MCONN_RESOLVING;
    conn->resolving = true;
    mf_dns_query_start(conn->loop, &conn->dns, conn->host, conn->port,
                       mf__conn_dns_cb, conn);
}

/* The deferred retry: the failed handle goes, the next server is dialed. */
static void mf__conn_retry_cb(mf_post_t *post)
{
    mf_mysql_conn_t *conn = post->data;
    if (conn->state == MF_MCONN_CLOSED)
        return;
    mf_io_stop(conn->loop, &conn->io);
    mf_timer_stop(conn->loop, &conn->op_timer);
    conn->broken = true; /* the handle is shut, not quit politely */
    mf__conn_close_handle(conn);
    conn->broken = false;
    mf__mysql_conn_connect(conn);
}

/* A failed open of a group's connection: counted against its server; the
 * next server is tried when the failure was the link's (not TLS, not the
 * server refusing the login) and the group allows another attempt. */
static bool mf__conn_next_server(mf_mysql_conn_t *conn, int state)
{
    mf_upstream_done(conn->ups, false, 0);
    if (state != MF_STATE_SYS_ERROR && state != MF_STATE_TIMEOUT &&
        state != MF_STATE_DNS_ERROR)
        return false;
    if (!mf_upstream_may_retry(conn->ups) ||
        mf_upstream_balance(conn->loop, conn->ups, NULL, 0) < 0)
        return false; /* this failure is the open's */
    snprintf(conn->host, sizeof conn->host, "%s", conn->ups->host);
    conn->port = conn->ups->port;
    mf_loop_defer(conn->loop, &conn->retry_post);
    return true;
}

bool mf__mysql_conn_is_open(const mf_mysql_conn_t *conn)
{
    return mf__conn_connected(conn);
}

/* ---- reuse ----------------------------------------------------------------
 */

void mf__mysql_conn_park(mf_mysql_conn_t *conn)
{
    conn->parked_ms = mf_loop_now(conn->loop);
    /* Read interest only: the idle watch is for the server's close. */
    if (conn->io.fd >= 0 && mf_io_start(conn->loop, &conn->io, MF_IO_READ) < 0)
        conn->broken = true; /* not watched: closed when next taken */
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

static int mf__step_reset(mf_mysql_conn_t *conn, int ready)
{
    if (!ready)
        return mysql_reset_connection_start(&conn->ret.i, &conn->mysql);
    return mysql_reset_connection_cont(&conn->ret.i, &conn->mysql, ready);
}

static void mf__reset_done(mf_mysql_conn_t *conn)
{
    bool ok = conn->ret.i == 0;
    if (ok) {
        conn->dirty = false;
        conn->state = MF_MCONN_OPEN;
    }
    conn->hooks->reset_done(conn, ok);
}

void mf__mysql_conn_reset(mf_mysql_conn_t *conn)
{
    /* The server drops its prepared statements with the session state. */
    if (conn->stmt_cache_drop)
        conn->stmt_cache_drop(conn);
    conn->state = MF_MCONN_RESETTING;
    mf__mysql_conn_run(conn, mf__step_reset, mf__reset_done);
}
