/* The HTTP server on listening sockets given to it (mf_listen_open's, as a
 * taken-over process gets them) and its drain: the stop of a server whose
 * listeners another process accepts on now, which must not close an idle
 * keep-alive connection under a request its client has just sent. */
#include <fcntl.h>

#include "http_peer.h"

static void handle(mf_http_exchange_t *ex, void *user)
{
    (void)user;
    mf_http_exchange_append(ex, "ok", 2);
}

/* A server on the test loop accepting on dups of l's listeners. */
static mf_http_server_t *start_on(mf_listen_t *l, int *dups)
{
    unsigned n = mf_listen_count(l);
    for (unsigned i = 0; i < n; i++)
        dups[i] = fcntl(mf_listen_fd(l, i), F_DUPFD_CLOEXEC, 0);
    mf_http_server_config_t c;
    mf_http_server_config_init(&c);
    c.listen = "unused: the sockets are given";
    c.listen_fds = dups;
    c.nlisten_fds = n;
    int err = 0;
    mf_http_server_t *s =
        mf_http_server_start(peer_loop, &c, handle, NULL, &err);
    if (!s)
        MF_TEST_FAIL("server: %s", mf_strerror(err));
    return s;
}

static mf_listen_t *listeners(unsigned n)
{
    mf_listen_opts_t o = {.address = "127.0.0.1:0", .count = n, .backlog = 64};
    int err = 0;
    mf_listen_t *l = mf_listen_open(&o, &err);
    if (!l)
        MF_TEST_FAIL("listen: %s", mf_strerror(err));
    return l;
}

static bool fd_closed(int fd)
{
    return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

typedef struct requests {
    uint16_t port;
    int n;
    peer_response_t r[8];
    int rc[8];
} requests_t;

/* n requests, each on a connection of its own. */
static void client_requests(void *arg)
{
    requests_t *q = arg;
    for (int i = 0; i < q->n; i++)
        q->rc[i] = peer_request(q->port, "GET / HTTP/1.1\r\nHost: h\r\n\r\n",
                                &q->r[i]);
}

TEST(a_server_accepts_on_every_socket_given_and_closes_them_when_stopped)
{
    peer_serve_once(handle, 0);
    mf_listen_t *l = listeners(3);
    int dups[3];
    mf_http_server_t *s = start_on(l, dups);
    ASSERT_EQ(mf_http_server_port(s), mf_listen_port(l));
    requests_t q = {.port = mf_listen_port(l), .n = 8};
    peer_run(peer_loop, client_requests, &q); /* spread over the three */
    for (int i = 0; i < q.n; i++) {
        ASSERT_EQ(q.rc[i], 0);
        ASSERT_STR_EQ(q.r[i].body, "ok");
    }
    int want = atomic_load(&peer_stops) + 1;
    mf_http_server_stop(s, peer_on_stopped, NULL);
    ASSERT(peer_run_until(peer_loop, peer_stops_reached, &want, 5000));
    for (int i = 0; i < 3; i++)
        ASSERT(fd_closed(dups[i]));
    for (unsigned i = 0; i < 3; i++) /* the originals are the caller's */
        ASSERT(!fd_closed(mf_listen_fd(l, i)));
    mf_listen_close(l);
}

TEST(a_server_that_fails_to_start_still_closes_the_sockets_given)
{
    peer_serve_once(handle, 0);
    mf_listen_t *l = listeners(2);
    int dups[2];
    for (unsigned i = 0; i < 2; i++)
        dups[i] = fcntl(mf_listen_fd(l, i), F_DUPFD_CLOEXEC, 0);
    mf_http_server_config_t c;
    mf_http_server_config_init(&c);
    c.listen_fds = dups;
    c.nlisten_fds = 2;
    c.tls.cert_file = "/nonexistent/cert.pem";
    c.tls.key_file = "/nonexistent/key.pem";
    int err = 0;
    ASSERT(!mf_http_server_start(peer_loop, &c, handle, NULL, &err));
    ASSERT(err < 0);
    ASSERT(fd_closed(dups[0]) && fd_closed(dups[1]));
    mf_listen_close(l);
}

/* ---- the drain ------------------------------------------------------------
 */

typedef struct idle_client {
    uint16_t port;
    atomic_bool first_done; /* the first answer came: the server may drain */
    atomic_bool go;         /* send the second request now */
    bool send_second;
    peer_response_t first, second;
    int first_rc, second_rc;
    bool closed_after;
    double idle_ms; /* from the drain to the close, idle case */
} idle_client_t;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void client_idle(void *arg)
{
    idle_client_t *k = arg;
    peer_conn_t *c = peer_connect(k->port);
    peer_send_str(c, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\n");
    k->first_rc = peer_read_response(c, &k->first);
    atomic_store(&k->first_done, true);
    for (int i = 0; i < PEER_TIMEOUT_MS && !atomic_load(&k->go); i++)
        usleep(1000);
    double t0 = now_ms();
    if (k->send_second) {
        peer_send_str(c, "GET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
        k->second_rc = peer_read_response(c, &k->second);
    }
    k->closed_after = peer_sees_close(c);
    k->idle_ms = now_ms() - t0;
    peer_close(c);
}

static bool first_done(void *arg)
{
    return atomic_load(&((idle_client_t *)arg)->first_done);
}

/* Starts a client on a fresh server, waits for its first answer (kept
 * alive), drains with idle_ms, then lets the client go on. */
static void drain_case(idle_client_t *k, uint32_t idle_ms)
{
    peer_serve_once(handle, 0);
    mf_listen_t *l = listeners(1);
    int dup;
    mf_http_server_t *s = start_on(l, &dup);
    k->port = mf_listen_port(l);
    peer_thread_t t;
    peer_start(&t, client_idle, k);
    ASSERT(peer_run_until(peer_loop, first_done, k, 5000));
    int want = atomic_load(&peer_stops) + 1;
    mf_http_server_drain(s, idle_ms, peer_on_stopped, NULL);
    mf_listen_close(l); /* the port is gone: nothing new comes in */
    atomic_store(&k->go, true);
    peer_finish(peer_loop, &t);
    ASSERT(peer_run_until(peer_loop, peer_stops_reached, &want, 5000));
    ASSERT_EQ(k->first_rc, 0);
    ASSERT(!k->first.conn_close);
}

TEST(a_drain_answers_one_more_request_on_an_idle_connection_then_closes)
{
    idle_client_t *k = calloc(1, sizeof(*k));
    k->send_second = true;
    drain_case(k, 2000);
    ASSERT_EQ(k->second_rc, 0);
    ASSERT_EQ(k->second.status, 200);
    ASSERT_STR_EQ(k->second.body, "ok");
    ASSERT(k->second.conn_close);
    ASSERT(k->closed_after);
    ASSERT(k->idle_ms < 1500); /* closed after its answer, not the grace */
    free(k);
}

TEST(a_drain_closes_a_connection_that_stays_idle_through_the_grace)
{
    idle_client_t *k = calloc(1, sizeof(*k));
    drain_case(k, 300);
    ASSERT(k->closed_after);
    ASSERT(k->idle_ms >= 200); /* not at once: the grace ran */
    ASSERT(k->idle_ms < 3000);
    free(k);
}

TEST(a_stop_closes_an_idle_connection_at_once)
{
    idle_client_t *k = calloc(1, sizeof(*k));
    drain_case(k, 0);
    ASSERT(k->closed_after);
    ASSERT(k->idle_ms < 200);
    free(k);
}
