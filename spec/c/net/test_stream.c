/* Streams (moonflow/stream.h) against real sockets on 127.0.0.1: a server
 * in a thread of this process, started once, answers each connection as
 * its first byte asks: 'E' echoes until end of file, 'R' sends "hel" then
 * resets the connection, 'S' reads and never answers, 'C' answers "ok" and
 * closes, 'L' answers "ok" and closes 100 ms later (once the client has
 * pooled the connection); a UDP socket echoes datagrams; a unix socket echoes
 * too; a TLS listener with a self-signed certificate (made by openssl in a
 * temporary folder) echoes over TLS. */
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include <moonflow/moonflow.h>

#include "test.h"
#include "test_cert.h"
#include "test_port.h"

/* ---- the server ---------------------------------------------------------- */

static struct {
    uint16_t port, udp_port, tls_port;
    char unix_path[108];
    mf_test_cert_t cert;
    SSL_CTX *tls;
} server;

static void serve_echo(int fd)
{
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        if (write(fd, buf, (size_t)n) != n)
            break;
}

static void *serve_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char mode;
    if (read(fd, &mode, 1) == 1) {
        if (mode == 'E') {
            serve_echo(fd);
        } else if (mode == 'R') {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            ASSERT(write(fd, "hel", 3) == 3);
            usleep(50 * 1000);
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        } else if (mode == 'S') {
            char buf[256];
            while (read(fd, buf, sizeof buf) > 0) {
            }
        } else if (mode == 'C' || mode == 'L') {
            ASSERT(write(fd, "ok", 2) == 2);
            if (mode == 'L')
                usleep(100 * 1000);
        }
    }
    close(fd);
    return NULL;
}

static void *udp_echo(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[2048];
    struct sockaddr_storage from;
    for (;;) {
        socklen_t len = sizeof from;
        ssize_t n =
            recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &len);
        if (n >= 0)
            sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, len);
    }
    return NULL;
}

/* TLS connections the server still serves: a test waits for none before
 * it ends, so no thread is inside OpenSSL when the process exits (the
 * leak check would see an SSL half freed). */
static atomic_int tls_serving;

static void *serve_tls_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    atomic_fetch_add(&tls_serving, 1);
    SSL *ssl = SSL_new(server.tls);
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
        char buf[4096];
        int n;
        while ((n = SSL_read(ssl, buf, sizeof buf)) > 0)
            if (SSL_write(ssl, buf, n) != n)
                break;
        SSL_shutdown(ssl);
    }
    SSL_free(ssl);
    close(fd);
    atomic_fetch_sub(&tls_serving, 1);
    return NULL;
}

static void start_thread(void *(*fn)(void *), int fd)
{
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, fn, (void *)(intptr_t)fd), 0);
    pthread_detach(t);
}

__attribute__((constructor)) static void start_servers(void)
{
    signal(SIGPIPE, SIG_IGN);
    int lfd = mf_test_bind_loopback(&server.port, 64);
    ASSERT(lfd >= 0);
    ASSERT(mf_test_accept_in_thread(lfd, serve_conn));

    int ufd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT(bind(ufd, (struct sockaddr *)&a, sizeof a) == 0);
    ASSERT(getsockname(ufd, (struct sockaddr *)&a, &len) == 0);
    server.udp_port = ntohs(a.sin_port);
    start_thread(udp_echo, ufd);

    struct sockaddr_un un = {.sun_family = AF_UNIX};
    snprintf(server.unix_path, sizeof server.unix_path,
             "/tmp/mf-stream-test-%d.sock", (int)getpid());
    strcpy(un.sun_path, server.unix_path);
    unlink(server.unix_path);
    int xfd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT(bind(xfd, (struct sockaddr *)&un, sizeof un) == 0);
    ASSERT(listen(xfd, 16) == 0);
    ASSERT(mf_test_accept_in_thread(xfd, serve_conn));

    mf_test_cert_make(&server.cert);
    server.tls = SSL_CTX_new(TLS_server_method());
    ASSERT(SSL_CTX_use_certificate_chain_file(server.tls, server.cert.cert) ==
           1);
    ASSERT(SSL_CTX_use_PrivateKey_file(server.tls, server.cert.key,
                                       SSL_FILETYPE_PEM) == 1);
    int tfd = mf_test_bind_loopback(&server.tls_port, 64);
    ASSERT(tfd >= 0);
    ASSERT(mf_test_accept_in_thread(tfd, serve_tls_conn));
}

__attribute__((destructor)) static void remove_files(void)
{
    unlink(server.unix_path);
    mf_test_cert_remove(&server.cert);
}

/* ---- helpers --------------------------------------------------------------
 */

typedef struct done {
    int calls;
    ssize_t status;
} done_t;

static void on_done(mf_stream_t *s, ssize_t status, void *data)
{
    done_t *d = data;
    (void)s;
    d->calls++;
    d->status = status;
}

/* Runs the loop until the operation has called back (bounded). */
static ssize_t wait_done(mf_loop_t *loop, done_t *d)
{
    ASSERT_EQ(d->calls, 0); /* never inside the call that started it */
    for (int i = 0; i < 10000 && d->calls == 0; i++)
        mf_loop_run(loop, MF_RUN_ONCE);
    ASSERT_EQ(d->calls, 1);
    return d->status;
}

static mf_stream_t *connect_to(mf_loop_t *loop, const char *host, uint16_t port,
                               ssize_t expect)
{
    mf_stream_t *s = mf_stream_create(loop, MF_STREAM_TCP);
    done_t d = {0};
    mf_stream_connect(s, host, port, on_done, &d);
    ASSERT_EQ(wait_done(loop, &d), expect);
    return s;
}

static ssize_t send_text(mf_loop_t *loop, mf_stream_t *s, const char *text)
{
    struct iovec iov[2] = {{(void *)text, 1}, {(void *)(text + 1), 0}};
    iov[1].iov_len = strlen(text) - 1;
    done_t d = {0};
    mf_stream_writev(s, iov, 2, on_done, &d);
    return wait_done(loop, &d);
}

static ssize_t read_some(mf_loop_t *loop, mf_stream_t *s, char *buf, size_t len)
{
    done_t d = {0};
    mf_stream_read(s, buf, len, on_done, &d);
    ssize_t n = wait_done(loop, &d);
    if (n >= 0)
        buf[n] = 0;
    return n;
}

/* Reads until want bytes came (an echo may come in pieces). */
static void read_exactly(mf_loop_t *loop, mf_stream_t *s, const char *want)
{
    char buf[256] = "";
    size_t got = 0, n = strlen(want);
    while (got < n) {
        ssize_t r = read_some(loop, s, buf + got, n - got);
        ASSERT(r > 0);
        got += (size_t)r;
    }
    ASSERT_STR_EQ(buf, want);
}

static void on_timer(mf_timer_t *timer)
{
    (void)timer;
}

/* Runs the loop for ms (a timer keeps it alive: idle streams do not). */
static void run_idle(mf_loop_t *loop, int ms)
{
    mf_timer_t timer;
    mf_timer_init(&timer, on_timer, NULL);
    mf_timer_start(loop, &timer, (uint64_t)ms);
    mf_loop_run(loop, MF_RUN_DEFAULT);
}

static void finish(mf_loop_t *loop)
{
    mf_loop_run(loop, MF_RUN_DEFAULT);
    mf_loop_destroy(loop);
}

/* ---- tests -----------------------------------------------------------------
 */

TEST(connects_by_name_writes_an_iovec_and_reads_the_echo)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "localhost", server.port, 0);
    ASSERT_EQ(send_text(loop, s, "Ehello"), 6);
    read_exactly(loop, s, "hello");
    ASSERT_EQ(mf_stream_reused(s), 0);
    ASSERT(!mf_stream_has_tls(s));
    mf_stream_close(s);
    finish(loop);
}

TEST(try_read_says_eagain_then_the_bytes)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.port, 0);
    char buf[16];
    ASSERT_EQ(mf_stream_try_read(s, buf, sizeof buf), MF_EAGAIN);
    struct iovec iov = {"Eab", 3};
    ASSERT_EQ(mf_stream_try_writev(s, &iov, 1), 3);
    read_exactly(loop, s, "ab");
    mf_stream_close(s);
    finish(loop);
}

TEST(a_wait_alone_reads_once_the_bytes_come)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.port, 0);
    char buf[16] = "";
    ASSERT_EQ(mf_stream_try_read(s, buf, sizeof buf), MF_EAGAIN);
    done_t d = {0};
    mf_stream_wait_read(s, buf, sizeof buf, on_done, &d);
    struct iovec iov = {"Exy", 3};
    ASSERT_EQ(mf_stream_try_writev(s, &iov, 1), 3);
    ASSERT_EQ(wait_done(loop, &d), 2);
    ASSERT(memcmp(buf, "xy", 2) == 0);
    mf_stream_close(s);
    finish(loop);
}

/* A peer that accepts only once the client's socket is full, then reads
 * until the end of the stream: how many bytes it read. */
typedef struct {
    int listener;
    size_t got;
} late_reader_t;

static void *late_reader(void *arg)
{
    late_reader_t *r = arg;
    int fd = accept(r->listener, NULL, NULL);
    char buf[65536];
    ssize_t n;
    while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
        r->got += (size_t)n;
    if (fd >= 0)
        close(fd);
    return NULL;
}

TEST(a_wait_alone_writes_once_the_full_socket_has_room)
{
    late_reader_t r = {socket(AF_INET, SOCK_STREAM, 0), 0};
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    ASSERT(bind(r.listener, (struct sockaddr *)&a, sizeof a) == 0);
    ASSERT(listen(r.listener, 1) == 0);
    ASSERT(getsockname(r.listener, (struct sockaddr *)&a, &alen) == 0);
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", ntohs(a.sin_port), 0);
    static char block[65536];
    struct iovec iov = {block, sizeof block};
    size_t sent = 0;
    ssize_t n;
    for (int i = 0; i < 10000 && (n = mf_stream_try_writev(s, &iov, 1)) > 0;
         i++)
        sent += (size_t)n; /* until the socket takes nothing: full */
    ASSERT_EQ(n, 0);
    done_t d = {0};
    mf_stream_wait_writev(s, &iov, 1, on_done, &d);
    pthread_t t;
    ASSERT(pthread_create(&t, NULL, late_reader, &r) == 0);
    ASSERT_EQ(wait_done(loop, &d), (ssize_t)sizeof block);
    mf_stream_close(s);
    pthread_join(t, NULL);
    ASSERT_EQ(r.got, sent + sizeof block);
    close(r.listener);
    finish(loop);
}

TEST(a_port_nobody_listens_on_is_refused)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s =
        connect_to(loop, "127.0.0.1", mf_test_free_port(), MF_ECONNREFUSED);
    char buf[4];
    ASSERT_EQ(mf_stream_try_read(s, buf, sizeof buf), MF_ENOTCONN);
    mf_stream_close(s);
    finish(loop);
}

TEST(a_name_that_does_not_resolve_is_a_dns_error)
{
    mf_loop_t *loop = mf_loop_create();
    mf_dns_config_t config = {
        .timeout_ms = 300, .tries = 1, .servers = "127.0.0.1:9"};
    ASSERT_EQ(mf_dns_configure(loop, &config), 0);
    mf_stream_t *s = mf_stream_create(loop, MF_STREAM_TCP);
    done_t d = {0};
    mf_stream_connect(s, "no-such-host.invalid", 80, on_done, &d);
    ssize_t rc = wait_done(loop, &d);
    ASSERT(rc == MF_EDNS || rc == MF_ETIMEDOUT || rc == MF_ECONNREFUSED);
    mf_stream_close(s);
    finish(loop);
}

TEST(a_silent_peer_times_the_read_out_and_the_stream_stays_usable)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.port, 0);
    mf_stream_set_timeouts(s, 0, 0, 100);
    ASSERT_EQ(send_text(loop, s, "Sx"), 2);
    char buf[16];
    uint64_t t0 = mf_loop_now(loop);
    ASSERT_EQ(read_some(loop, s, buf, sizeof buf), MF_ETIMEDOUT);
    ASSERT(mf_loop_now(loop) - t0 >= 90);
    ASSERT_EQ(send_text(loop, s, "more"), 4); /* still connected */
    ASSERT_EQ(read_some(loop, s, buf, sizeof buf), MF_ETIMEDOUT);
    mf_stream_close(s);
    finish(loop);
}

TEST(a_connect_to_a_black_hole_times_out)
{
    /* A listener whose backlog is full and never accepts: the handshake
     * never completes (SYNs dropped), so the connect waits. */
    uint16_t port;
    int lfd = mf_test_bind_loopback(&port, 1);
    ASSERT(lfd >= 0);
    int fillers[4];
    for (int i = 0; i < 4; i++) {
        fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        connect(fillers[i], (struct sockaddr *)&a, sizeof a);
    }
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = mf_stream_create(loop, MF_STREAM_TCP);
    mf_stream_set_timeouts(s, 150, 0, 0);
    done_t d = {0};
    mf_stream_connect(s, "127.0.0.1", port, on_done, &d);
    ASSERT_EQ(wait_done(loop, &d), MF_ETIMEDOUT);
    mf_stream_close(s);
    finish(loop);
    for (int i = 0; i < 4; i++)
        close(fillers[i]);
    close(lfd);
}

TEST(a_peer_reset_mid_read_gives_the_bytes_then_connection_reset)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.port, 0);
    ASSERT_EQ(send_text(loop, s, "R"), 1);
    char buf[16];
    ASSERT_EQ(read_some(loop, s, buf, sizeof buf), 3);
    ASSERT_STR_EQ(buf, "hel");
    ASSERT_EQ(read_some(loop, s, buf, sizeof buf), MF_ECONNRESET);
    mf_stream_close(s);
    finish(loop);
}

TEST(a_peer_that_closes_gives_end_of_file)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.port, 0);
    ASSERT_EQ(send_text(loop, s, "C"), 1);
    read_exactly(loop, s, "ok");
    char buf[4];
    ASSERT_EQ(read_some(loop, s, buf, sizeof buf), MF_EOF);
    mf_stream_close(s);
    finish(loop);
}

TEST(close_cancels_a_pending_read_later)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.port, 0);
    ASSERT_EQ(send_text(loop, s, "S"), 1);
    char buf[4];
    done_t d = {0};
    mf_stream_read(s, buf, sizeof buf, on_done, &d);
    mf_stream_close(s);
    ASSERT_EQ(wait_done(loop, &d), MF_ECANCELED);
    finish(loop);
}

static void close_in_callback(mf_stream_t *s, ssize_t status, void *data)
{
    on_done(s, status, data);
    mf_stream_close(s);
}

TEST(a_callback_may_close_its_stream)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.port, 0);
    ASSERT_EQ(send_text(loop, s, "Ehi"), 3);
    char buf[8];
    done_t d = {0};
    mf_stream_read(s, buf, sizeof buf, close_in_callback, &d);
    ASSERT(wait_done(loop, &d) > 0);
    finish(loop);
}

TEST(the_pool_hands_a_stream_back_with_its_reuse_count)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.port, 0);
    ASSERT_EQ(send_text(loop, s, "Eone"), 4);
    read_exactly(loop, s, "one");
    ASSERT_EQ(mf_stream_pool_put(s, "k", 5000, 4), 0);
    ASSERT_EQ(mf_stream_pool_count(loop, "k"), 1);
    ASSERT(mf_stream_pool_take(loop, "other") == NULL);
    for (unsigned round = 1; round <= 3; round++) {
        s = mf_stream_pool_take(loop, "k");
        ASSERT(s != NULL);
        ASSERT_EQ(mf_stream_reused(s), round);
        ASSERT_EQ(mf_stream_pool_count(loop, "k"), 0);
        ASSERT_EQ(send_text(loop, s, "two"), 3);
        read_exactly(loop, s, "two");
        ASSERT_EQ(mf_stream_pool_put(s, "k", 5000, 4), 0);
    }
    finish(loop); /* idle streams do not keep the loop running */
}

TEST(an_idle_stream_the_peer_closed_leaves_the_pool_when_its_socket_fires)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.port, 0);
    ASSERT_EQ(send_text(loop, s, "L"), 1);
    read_exactly(loop, s, "ok");
    ASSERT_EQ(mf_stream_pool_put(s, "dead", 5000, 4), 0);
    ASSERT_EQ(mf_stream_pool_count(loop, "dead"), 1);
    run_idle(loop, 300); /* the server closes meanwhile */
    ASSERT_EQ(mf_stream_pool_count(loop, "dead"), 0);
    ASSERT(mf_stream_pool_take(loop, "dead") == NULL);
    finish(loop);
}

TEST(take_never_hands_out_a_stream_whose_peer_closed)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.port, 0);
    ASSERT_EQ(send_text(loop, s, "L"), 1);
    read_exactly(loop, s, "ok");
    ASSERT_EQ(mf_stream_pool_put(s, "dead2", 5000, 4), 0);
    usleep(250 * 1000); /* the FIN arrives; the loop does not run */
    ASSERT_EQ(mf_stream_pool_count(loop, "dead2"), 1);
    ASSERT(mf_stream_pool_take(loop, "dead2") == NULL);
    ASSERT_EQ(mf_stream_pool_count(loop, "dead2"), 0);
    finish(loop);
}

TEST(a_stream_with_unread_bytes_is_refused_by_the_pool)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.port, 0);
    ASSERT_EQ(send_text(loop, s, "Eunread"), 7);
    usleep(50 * 1000);
    ASSERT_EQ(mf_stream_pool_put(s, "u", 5000, 4), MF_EPROTO);
    ASSERT_EQ(mf_stream_pool_count(loop, "u"), 0);
    finish(loop);
}

TEST(idle_streams_expire_and_a_full_pool_drops_the_oldest)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *a = connect_to(loop, "127.0.0.1", server.port, 0);
    mf_stream_t *b = connect_to(loop, "127.0.0.1", server.port, 0);
    mf_stream_t *c = connect_to(loop, "127.0.0.1", server.port, 0);
    ASSERT_EQ(mf_stream_pool_put(a, "p", 100, 2), 0);
    ASSERT_EQ(mf_stream_pool_put(b, "p", 100, 2), 0);
    ASSERT_EQ(mf_stream_pool_put(c, "p", 100, 2), 0);
    ASSERT_EQ(mf_stream_pool_count(loop, "p"), 2);
    ASSERT(mf_stream_pool_take(loop, "p") == c); /* most recent first */
    ASSERT_EQ(mf_stream_pool_put(c, "p", 100, 2), 0);
    run_idle(loop, 300);
    ASSERT_EQ(mf_stream_pool_count(loop, "p"), 0);
    finish(loop);
}

TEST(a_unix_socket_path_connects)
{
    mf_loop_t *loop = mf_loop_create();
    char host[128];
    snprintf(host, sizeof host, "unix:%s", server.unix_path);
    mf_stream_t *s = connect_to(loop, host, 0, 0);
    ASSERT_EQ(send_text(loop, s, "Eunix"), 5);
    read_exactly(loop, s, "unix");
    mf_stream_close(s);
    s = connect_to(loop, "unix:/nonexistent/mf.sock", 0, MF_ENOENT);
    mf_stream_close(s);
    finish(loop);
}

TEST(a_udp_stream_sends_and_reads_datagrams)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = mf_stream_create(loop, MF_STREAM_UDP);
    done_t d = {0};
    mf_stream_connect(s, "127.0.0.1", server.udp_port, on_done, &d);
    ASSERT_EQ(wait_done(loop, &d), 0);
    ASSERT_EQ(send_text(loop, s, "datagram"), 8);
    char buf[64];
    ASSERT_EQ(read_some(loop, s, buf, sizeof buf), 8);
    ASSERT_STR_EQ(buf, "datagram");
    ASSERT_EQ(mf_stream_pool_put(s, "udp", 0, 0), MF_EINVAL);
    finish(loop);
}

TEST(a_handshake_before_connect_and_a_second_connect_fail_cleanly)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = mf_stream_create(loop, MF_STREAM_TCP);
    done_t d = {0};
    mf_stream_handshake(s, "localhost", true, NULL, on_done, &d);
    ASSERT_EQ(wait_done(loop, &d), MF_ENOTCONN);
    mf_stream_close(s);
    s = connect_to(loop, "127.0.0.1", server.port, 0);
    done_t d2 = {0};
    mf_stream_connect(s, "127.0.0.1", server.port, on_done, &d2);
    ASSERT_EQ(wait_done(loop, &d2), MF_EINVAL);
    mf_stream_close(s);
    finish(loop);
}

/* finish, once the TLS server has let go of every connection. */
static void finish_tls(mf_loop_t *loop)
{
    finish(loop);
    for (int i = 0; i < 200 && atomic_load(&tls_serving) > 0; i++)
        usleep(10 * 1000);
    ASSERT_EQ(atomic_load(&tls_serving), 0);
}

static ssize_t handshake(mf_loop_t *loop, mf_stream_t *s, const char *name,
                         const char *ca_file)
{
    done_t d = {0};
    mf_stream_handshake(s, name, true, ca_file, on_done, &d);
    return wait_done(loop, &d);
}

TEST(tls_verification_of_a_self_signed_certificate_fails_by_default)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "127.0.0.1", server.tls_port, 0);
    ASSERT_EQ(handshake(loop, s, "localhost", NULL), MF_ETLS);
    char why[160];
    mf_stream_tls_error(s, why, sizeof why);
    ASSERT(strstr(why, "self") && strstr(why, "signed"));
    ASSERT(!mf_stream_has_tls(s));
    char buf[4];
    ASSERT_EQ(mf_stream_try_read(s, buf, sizeof buf), MF_ENOTCONN);
    mf_stream_close(s);
    s = connect_to(loop, "127.0.0.1", server.tls_port, 0);
    ASSERT_EQ(handshake(loop, s, "example.com", server.cert.cert), MF_ETLS);
    ASSERT(
        strstr(mf_stream_tls_error(s, why, sizeof why), "hostname mismatch"));
    mf_stream_close(s);
    finish_tls(loop);
}

TEST(tls_with_the_ca_given_carries_bytes_and_keeps_its_session_in_the_pool)
{
    mf_loop_t *loop = mf_loop_create();
    mf_stream_t *s = connect_to(loop, "localhost", server.tls_port, 0);
    ASSERT_EQ(handshake(loop, s, "localhost", server.cert.cert), 0);
    ASSERT(mf_stream_has_tls(s));
    ASSERT_EQ(send_text(loop, s, "over tls"), 8);
    read_exactly(loop, s, "over tls");
    ASSERT_EQ(mf_stream_pool_put(s, "tls", 5000, 4), 0);
    s = mf_stream_pool_take(loop, "tls");
    ASSERT(s != NULL && mf_stream_has_tls(s));
    ASSERT_EQ(handshake(loop, s, "localhost", server.cert.cert), 0);
    ASSERT_EQ(send_text(loop, s, "again"), 5);
    read_exactly(loop, s, "again");
    /* a session checked for localhost never serves another name */
    ASSERT_EQ(mf_stream_pool_put(s, "tls", 5000, 4), 0);
    s = mf_stream_pool_take(loop, "tls");
    ASSERT(s != NULL);
    ASSERT_EQ(handshake(loop, s, "127.0.0.1", server.cert.cert), MF_ETLS);
    char why[160];
    ASSERT(strstr(mf_stream_tls_error(s, why, sizeof why), "another server"));
    mf_stream_close(s);
    finish_tls(loop);
}
