/*
 * bench/mysql/blocking_server.c — the peer of moonflow's MySQL handler in
 * bench/mysql/compare_mysql.py: a plain C HTTP/1.1 server on libmariadb's
 * BLOCKING API, the way a C service without an event-driven driver is
 * written.
 *
 * A fixed pool of --threads threads; each owns one MYSQL connection (opened
 * at start; the point select prepared once, on the thread's first request:
 * a server-side prepared statement, as moonflow's db:query("... WHERE id =
 * ?", id) runs) and one
 * epoll set. Every thread listens on the port with its own socket
 * (SO_REUSEPORT, as nginx's `listen ... reuseport`: the kernel spreads new
 * connections over the threads by their addresses) and waits on it and on
 * the connections it accepted. One shared socket drained by whichever
 * thread woke first handed a burst of connections (wrk opens all of its
 * own at once) to one thread, and so put the whole load on one thread and
 * one MySQL connection. A request is served on its thread: the query
 * blocks that thread (and its other connections) until the answer comes, so
 * at most --threads queries are in flight: the pool of N members.
 *
 *   GET /mysql_point?id=N  → 200 {"id":N,"k":..,"c":"..","pad":".."}
 *                            (the row of sbtest1, the sysbench table)
 *   no such row            → 404;  a bad id → 400;  another path → 404
 *   a failed query         → 500 and a line on stderr
 *
 * TechEmpower's database shapes (bench/mysql/techempower.py), on its World
 * table (world: id 1..10000, randomNumber), each row read by its own
 * prepared select, one after another as a blocking server does them:
 *
 *   GET /db                → {"id":N,"randomNumber":M} of a random row
 *   GET /queries?queries=Q → an array of Q random rows (Q clamped to 1..500)
 *   GET /updates?queries=Q → Q random rows read, each given a new random
 *                            number and updated by its own prepared UPDATE;
 *                            the array of the rows as updated
 *
 * The World statements are prepared on a thread's first such request (the
 * point-select comparison has no world table).
 *
 * Keep-alive always (wrk and the harness's check never ask for a close);
 * pipelined requests are answered in order, in one write per read.
 * Stand-alone on purpose: it shares no code with the engine it is compared
 * with.
 *
 *   bench_mysql_blocking --listen 127.0.0.1:8080 --threads 16 \
 *       --mysql HOST:PORT --user U --password P --db sbtest
 */
#include <errno.h>
#include <mysql.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define IN_CAP 8192
#define OUT_CAP 65536
#define COL_CAP 256
#define EVENTS 64

static const char point_sql[] =
    "SELECT id, k, c, pad FROM sbtest1 WHERE id = ?";
static const char world_select_sql[] =
    "SELECT id, randomNumber FROM world WHERE id = ?";
static const char world_update_sql[] =
    "UPDATE world SET randomNumber = ? WHERE id = ?";

#define WORLD_ROWS 10000
#define WORLD_MAX_QUERIES 500

struct config {
    const char *listen_host;
    int listen_port;
    int threads;
    const char *mysql_host;
    int mysql_port;
    const char *user, *password, *db;
};

/* One connection's unparsed input; owned by the thread that accepted it. */
struct conn {
    int fd;
    size_t len;
    char in[IN_CAP];
};

/* One pool member: its connection to the server, its prepared statement and
 * the buffers its result binds to. */
struct member {
    const struct config *cfg;
    int listen_fd;
    MYSQL *db;
    MYSQL_STMT *stmt;
    long long param_id, id, k;
    char c[COL_CAP], pad[COL_CAP];
    unsigned long c_len, pad_len;
    char out[OUT_CAP];
    size_t out_len;
    /* TechEmpower's World: prepared on first use. */
    MYSQL_STMT *world_select, *world_update;
    long long world_id, world_number, new_number;
    unsigned rand_state;
};

static void die(const char *what, const char *why)
{
    fprintf(stderr, "bench_mysql_blocking: %s: %s\n", what, why);
    exit(1);
}

static void member_bind_result(struct member *m)
{
    MYSQL_BIND res[4];
    memset(res, 0, sizeof res);
    res[0].buffer_type = MYSQL_TYPE_LONGLONG;
    res[0].buffer = &m->id;
    res[1].buffer_type = MYSQL_TYPE_LONGLONG;
    res[1].buffer = &m->k;
    res[2].buffer_type = MYSQL_TYPE_STRING;
    res[2].buffer = m->c;
    res[2].buffer_length = COL_CAP;
    res[2].length = &m->c_len;
    res[3].buffer_type = MYSQL_TYPE_STRING;
    res[3].buffer = m->pad;
    res[3].buffer_length = COL_CAP;
    res[3].length = &m->pad_len;
    if (mysql_stmt_bind_result(m->stmt, res))
        die("bind result", mysql_stmt_error(m->stmt));
}

static void member_connect(struct member *m)
{
    const struct config *cfg = m->cfg;
    m->db = mysql_init(NULL);
    if (!m->db)
        die("mysql_init", "out of memory");
    if (!mysql_real_connect(m->db, cfg->mysql_host, cfg->user, cfg->password,
                            cfg->db, (unsigned)cfg->mysql_port, NULL, 0))
        die("connect", mysql_error(m->db));
}

/* The point select, prepared on the thread's first /mysql_point (the
 * TechEmpower comparison has no sbtest1); a failure is the server's, and
 * fatal, as a broken deployment would be. */
static void point_prepare(struct member *m)
{
    if (m->stmt)
        return;
    m->stmt = mysql_stmt_init(m->db);
    if (!m->stmt ||
        mysql_stmt_prepare(m->stmt, point_sql, sizeof point_sql - 1))
        die("prepare", m->stmt ? mysql_stmt_error(m->stmt) : "out of memory");
    MYSQL_BIND param;
    memset(&param, 0, sizeof param);
    param.buffer_type = MYSQL_TYPE_LONGLONG;
    param.buffer = &m->param_id;
    if (mysql_stmt_bind_param(m->stmt, &param))
        die("bind param", mysql_stmt_error(m->stmt));
    member_bind_result(m);
}

/* Appends s (n bytes) as a JSON string body: quotes, backslashes and control
 * bytes escaped (sysbench's c and pad hold digits and dashes, but a server
 * must not trust its data). */
static size_t json_escape(char *dst, size_t cap, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 6 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            dst[o++] = '\\';
            dst[o++] = (char)ch;
        } else if (ch < 0x20) {
            o += (size_t)snprintf(dst + o, cap - o, "\\u%04x", ch);
        } else {
            dst[o++] = (char)ch;
        }
    }
    return o;
}

static void respond(struct member *m, int status, const char *type,
                    const char *body, size_t n)
{
    const char *reason = status == 200   ? "OK"
                         : status == 400 ? "Bad Request"
                         : status == 404 ? "Not Found"
                                         : "Internal Server Error";
    size_t room = OUT_CAP - m->out_len;
    int head = snprintf(m->out + m->out_len, room,
                        "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
                        "Content-Length: %zu\r\n\r\n",
                        status, reason, type, n);
    if (head < 0 || (size_t)head + n > room)
        die("respond", "output buffer full");
    memcpy(m->out + m->out_len + head, body, n);
    m->out_len += (size_t)head + n;
}

static void respond_text(struct member *m, int status, const char *text)
{
    respond(m, status, "text/plain", text, strlen(text));
}

/* Runs the point select for id and answers with the row as JSON. */
static void serve_point(struct member *m, long long id)
{
    point_prepare(m);
    m->param_id = id;
    if (mysql_stmt_execute(m->stmt) || mysql_stmt_store_result(m->stmt)) {
        fprintf(stderr, "bench_mysql_blocking: query: %s\n",
                mysql_stmt_error(m->stmt));
        respond_text(m, 500, "query failed\n");
        return;
    }
    int rc = mysql_stmt_fetch(m->stmt);
    if (rc == MYSQL_NO_DATA) {
        mysql_stmt_free_result(m->stmt);
        respond_text(m, 404, "no such row\n");
        return;
    }
    if (rc != 0) {
        fprintf(stderr, "bench_mysql_blocking: fetch: %d %s\n", rc,
                mysql_stmt_error(m->stmt));
        mysql_stmt_free_result(m->stmt);
        respond_text(m, 500, "fetch failed\n");
        return;
    }
    char body[4 * COL_CAP * 6];
    size_t n = (size_t)snprintf(
        body, sizeof body, "{\"id\":%lld,\"k\":%lld,\"c\":\"", m->id, m->k);
    n += json_escape(body + n, sizeof body - n, m->c,
                     m->c_len < COL_CAP ? m->c_len : COL_CAP);
    n += (size_t)snprintf(body + n, sizeof body - n, "\",\"pad\":\"");
    n += json_escape(body + n, sizeof body - n, m->pad,
                     m->pad_len < COL_CAP ? m->pad_len : COL_CAP);
    n += (size_t)snprintf(body + n, sizeof body - n, "\"}");
    mysql_stmt_free_result(m->stmt);
    respond(m, 200, "application/json", body, n);
}

/* ---- TechEmpower's World ------------------------------------------------- */

static MYSQL_STMT *prepare_bound(struct member *m, const char *sql,
                                 MYSQL_BIND *params)
{
    MYSQL_STMT *st = mysql_stmt_init(m->db);
    if (!st || mysql_stmt_prepare(st, sql, strlen(sql)) ||
        mysql_stmt_bind_param(st, params)) {
        fprintf(stderr, "bench_mysql_blocking: prepare %s: %s\n", sql,
                st ? mysql_stmt_error(st) : "out of memory");
        if (st)
            mysql_stmt_close(st);
        return NULL;
    }
    return st;
}

static void bind_longlong(MYSQL_BIND *b, long long *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
}

/* Prepares the two World statements on this thread's connection; 0 when
 * they are ready. */
static int world_prepare(struct member *m)
{
    if (m->world_select)
        return 0;
    MYSQL_BIND sel[1], upd[2], res[2];
    bind_longlong(&sel[0], &m->world_id);
    bind_longlong(&upd[0], &m->new_number);
    bind_longlong(&upd[1], &m->world_id);
    m->world_select = prepare_bound(m, world_select_sql, sel);
    m->world_update = prepare_bound(m, world_update_sql, upd);
    if (!m->world_select || !m->world_update)
        return -1;
    bind_longlong(&res[0], &m->world_id);
    bind_longlong(&res[1], &m->world_number);
    if (mysql_stmt_bind_result(m->world_select, res)) {
        fprintf(stderr, "bench_mysql_blocking: bind world: %s\n",
                mysql_stmt_error(m->world_select));
        return -1;
    }
    return 0;
}

static long long world_random_id(struct member *m)
{
    return 1 + rand_r(&m->rand_state) % WORLD_ROWS;
}

/* Reads row id into world_id/world_number; 0 on success. */
static int world_read(struct member *m, long long id)
{
    m->world_id = id;
    MYSQL_STMT *st = m->world_select;
    if (mysql_stmt_execute(st) || mysql_stmt_store_result(st)) {
        fprintf(stderr, "bench_mysql_blocking: world select: %s\n",
                mysql_stmt_error(st));
        return -1;
    }
    int rc = mysql_stmt_fetch(st);
    mysql_stmt_free_result(st);
    if (rc != 0) {
        fprintf(stderr, "bench_mysql_blocking: world row %lld: %s\n", id,
                rc == MYSQL_NO_DATA ? "missing" : mysql_stmt_error(st));
        return -1;
    }
    return 0;
}

static int world_update(struct member *m)
{
    if (mysql_stmt_execute(m->world_update)) {
        fprintf(stderr, "bench_mysql_blocking: world update: %s\n",
                mysql_stmt_error(m->world_update));
        return -1;
    }
    return 0;
}

/* Q rows (one when !array), each read and, with update, given a new
 * random number; the answer is the JSON object or array. */
static void serve_world(struct member *m, int q, bool array, bool update)
{
    if (world_prepare(m) < 0) {
        respond_text(m, 500, "prepare failed\n");
        return;
    }
    char body[WORLD_MAX_QUERIES * 48 + 4];
    size_t n = 0;
    if (array)
        body[n++] = '[';
    for (int i = 0; i < q; i++) {
        if (world_read(m, world_random_id(m)) < 0) {
            respond_text(m, 500, "query failed\n");
            return;
        }
        if (update) {
            m->new_number = world_random_id(m);
            if (world_update(m) < 0) {
                respond_text(m, 500, "update failed\n");
                return;
            }
            m->world_number = m->new_number;
        }
        n += (size_t)snprintf(body + n, sizeof body - n,
                              "%s{\"id\":%lld,\"randomNumber\":%lld}",
                              i ? "," : "", m->world_id, m->world_number);
    }
    if (array)
        body[n++] = ']';
    respond(m, 200, "application/json", body, n);
}

/* TechEmpower's `queries` parameter: an integer clamped to 1..500, 1 when
 * absent or not a number. */
static int world_queries(const char *p)
{
    static const char key[] = "queries=";
    const char *at = strstr(p, key);
    const char *eol = strstr(p, " HTTP/");
    if (!at || (eol && at > eol))
        return 1;
    long v = strtol(at + sizeof key - 1, NULL, 10);
    return v < 1 ? 1 : v > WORLD_MAX_QUERIES ? WORLD_MAX_QUERIES : (int)v;
}

/* Routes TechEmpower's paths; false when head is none of them. */
static bool serve_world_request(struct member *m, const char *head, size_t n)
{
    if (n >= 8 && !memcmp(head, "GET /db ", 8)) {
        serve_world(m, 1, false, false);
    } else if (n >= 12 && !memcmp(head, "GET /queries", 12)) {
        serve_world(m, world_queries(head), true, false);
    } else if (n >= 12 && !memcmp(head, "GET /updates", 12)) {
        serve_world(m, world_queries(head), true, true);
    } else {
        return false;
    }
    return true;
}

/* One request head (up to its blank line): routes it. */
static void serve_request(struct member *m, const char *head, size_t n)
{
    static const char prefix[] = "GET /mysql_point?id=";
    if (serve_world_request(m, head, n))
        return;
    if (n < sizeof prefix - 1 || memcmp(head, prefix, sizeof prefix - 1) != 0) {
        respond_text(m, 404, "not found\n");
        return;
    }
    const char *p = head + sizeof prefix - 1;
    long long id = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 18) {
        id = id * 10 + (*p++ - '0');
        digits++;
    }
    if (digits == 0 || (*p != ' ' && *p != '&')) {
        respond_text(m, 400, "bad id\n");
        return;
    }
    serve_point(m, id);
}

/* Writes the whole pending output, waiting with poll() when the socket is
 * full. Returns -1 when the peer is gone. */
static int flush_out(struct member *m, int fd)
{
    size_t off = 0;
    while (off < m->out_len) {
        ssize_t w = write(fd, m->out + off, m->out_len - off);
        if (w > 0) {
            off += (size_t)w;
        } else if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (poll(&pfd, 1, 5000) <= 0)
                return -1;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else {
            return -1;
        }
    }
    m->out_len = 0;
    return 0;
}

/* Reads what the connection has, answers every complete request in it.
 * Returns -1 when the connection must close. */
static int serve_conn(struct member *m, struct conn *c)
{
    for (;;) {
        if (c->len == IN_CAP)
            return -1; /* a head over 8 KiB: not from our load */
        ssize_t r = read(c->fd, c->in + c->len, IN_CAP - c->len);
        if (r == 0)
            return -1;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN ? 0 : -1;
        }
        c->len += (size_t)r;
        size_t start = 0;
        char *end;
        while ((end = memmem(c->in + start, c->len - start, "\r\n\r\n", 4))) {
            size_t n = (size_t)(end - (c->in + start)) + 4;
            serve_request(m, c->in + start, n);
            start += n;
            if (m->out_len > OUT_CAP / 2 && flush_out(m, c->fd) < 0)
                return -1;
        }
        memmove(c->in, c->in + start, c->len - start);
        c->len -= start;
        if (m->out_len && flush_out(m, c->fd) < 0)
            return -1;
    }
}

static void accept_all(int ep, int listen_fd)
{
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN: none left */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = malloc(sizeof *c);
        if (!c)
            die("accept", "out of memory");
        c->fd = fd;
        c->len = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
            die("epoll_ctl", strerror(errno));
    }
}

static void *member_run(void *arg)
{
    struct member *m = arg;
    if (mysql_thread_init())
        die("mysql_thread_init", "failed");
    member_connect(m);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, m->listen_fd, &lev) < 0)
        die("epoll", strerror(errno));
    struct epoll_event events[EVENTS];
    for (;;) {
        int n = epoll_wait(ep, events, EVENTS, -1);
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (!c) {
                accept_all(ep, m->listen_fd);
            } else if (serve_conn(m, c) < 0) {
                close(c->fd); /* also leaves the epoll set */
                free(c);
            }
        }
    }
    return NULL;
}

static int listen_on(const char *host, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        die("--listen", "an IPv4 address:port is expected");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 4096) < 0)
        die("listen", strerror(errno));
    return fd;
}

static int parse_host_port(const char *arg, const char **host, int *port)
{
    const char *colon = strrchr(arg, ':');
    if (!colon)
        return -1;
    char *h = strndup(arg, (size_t)(colon - arg));
    if (!h)
        die("arguments", "out of memory");
    *host = h;
    *port = atoi(colon + 1);
    return *port > 0 && *port < 65536 ? 0 : -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_mysql_blocking --listen IP:PORT --threads N "
                    "--mysql HOST:PORT --user U --password P --db DB\n");
    exit(2);
}

static void parse_args(int argc, char **argv, struct config *cfg)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--listen")) {
            if (parse_host_port(v, &cfg->listen_host, &cfg->listen_port) < 0)
                usage();
        } else if (!strcmp(k, "--mysql")) {
            if (parse_host_port(v, &cfg->mysql_host, &cfg->mysql_port) < 0)
                usage();
        } else if (!strcmp(k, "--threads")) {
            cfg->threads = atoi(v);
        } else if (!strcmp(k, "--user")) {
            cfg->user = v;
        } else if (!strcmp(k, "--password")) {
            cfg->password = v;
        } else if (!strcmp(k, "--db")) {
            cfg->db = v;
        } else {
            usage();
        }
    }
    if (argc % 2 == 0 || !cfg->listen_host || !cfg->mysql_host ||
        cfg->threads < 1 || cfg->threads > 1024)
        usage();
}

int main(int argc, char **argv)
{
    struct config cfg = {.user = "root", .password = "", .db = "sbtest"};
    parse_args(argc, argv, &cfg);
    signal(SIGPIPE, SIG_IGN);
    if (mysql_library_init(0, NULL, NULL))
        die("mysql_library_init", "failed");
    struct member *members = calloc((size_t)cfg.threads, sizeof *members);
    pthread_t *threads = calloc((size_t)cfg.threads, sizeof *threads);
    if (!members || !threads)
        die("start", "out of memory");
    for (int i = 0; i < cfg.threads; i++) {
        members[i].cfg = &cfg;
        /* every listener is open before any thread runs, so the first
         * connection already finds them all */
        members[i].listen_fd = listen_on(cfg.listen_host, cfg.listen_port);
    }
    for (int i = 0; i < cfg.threads; i++) {
        members[i].rand_state = (unsigned)i * 2654435761u + 1;
        if (pthread_create(&threads[i], NULL, member_run, &members[i]))
            die("pthread_create", "failed");
    }
    for (int i = 0; i < cfg.threads; i++)
        pthread_join(threads[i], NULL);
    return 0;
}
