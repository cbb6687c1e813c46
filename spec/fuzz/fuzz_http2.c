/*
 * fuzz_http2.c — libFuzzer target for the HTTP/2 server (core/http/
 * http2.c over nghttp2): the input, after the connection preface, is what
 * a client sends on a real connection to a server on the same loop.
 *
 * The server answers every request: a small body, a body of 100 KiB (more
 * than a window), or (a path starting "/s") a stream of pieces; it reads
 * bodies up to 4 KiB (413 past it), whole, or (a path starting "/u") as a
 * stream the handler reads as it comes, a piece at each readable call. The
 * client sends preface and input, half-closes, and reads until the server
 * closes. Checked: the server ends the connection within a bound of loop turns,
 * no connection is left open, and ASan/UBSan see no fault on the way.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <moonflow/http_server.h>
#include <moonflow/loop.h>

#include "fuzz_assert.h"

/* What the client sends before the input: the connection preface here;
 * nothing for fuzz_h2c.c, whose inputs are upgrade requests. */
#ifndef MF_FUZZ_LEAD
#define MF_FUZZ_LEAD "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#endif
static const char preface[] = MF_FUZZ_LEAD;

static mf_loop_t *loop;
static mf_http_server_t *srv;
/* The server listens on an abstract Unix socket (listen_fds): a TCP
 * client would run out of ports to TIME_WAIT at thousands of inputs a
 * second. */
static struct sockaddr_un addr;
static socklen_t addr_len;
static char big[100 * 1024];

/* Reads a streamed body to its end (or an error), then answers. */
static void read_more(mf_http_exchange_t *ex, void *arg)
{
    char buf[1000];
    ssize_t n;
    while ((n = mf_http_exchange_read(ex, buf, sizeof buf)) > 0)
        ;
    if (n == MF_EAGAIN) {
        mf_http_exchange_on_readable(ex, read_more, arg);
        return;
    }
    mf_http_exchange_send_body(ex, "read", 4); /* after an error: dropped */
}

static bool stream_body(const mf_http_request_t *req, void *user)
{
    (void)user;
    return req->path_len >= 2 && req->path[1] == 'u';
}

static void handler(mf_http_exchange_t *ex, void *user)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    (void)user;
    if (mf_http_exchange_body_streamed(ex)) {
        mf_http_exchange_hold(ex);
        read_more(ex, NULL);
        return;
    }
    if (req->path_len >= 2 && req->path[1] == 's') {
        for (int i = 0; i < 4; i++)
            mf_http_exchange_write(ex, big, 20000);
        mf_http_exchange_send(ex);
        return;
    }
    if (req->path_len >= 2 && req->path[1] == 'b') {
        mf_http_exchange_send_body(ex, big, sizeof big);
        return;
    }
    mf_http_exchange_add_header(ex, "X-Fuzz", 6, "1", 1);
    mf_http_exchange_send_body(ex, "ok", 2);
}

static void start(void)
{
    mf_http_server_config_t c;
    int err = 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    addr.sun_family = AF_UNIX;
    int n = snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1,
                     "moonflow-fuzz-http2-%d", (int)getpid());
    addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    FUZZ_CHECK(bind(fd, (struct sockaddr *)&addr, addr_len) == 0);
    FUZZ_CHECK(listen(fd, 64) == 0);
    mf_http_server_config_init(&c);
    c.listen_fds = &fd;
    c.nlisten_fds = 1;
    c.max_body = 4096;
    c.http2.max_header_list_size = 4096;
    c.stream_body = stream_body;
    loop = mf_loop_create();
    FUZZ_CHECK(loop != NULL);
    srv = mf_http_server_start(loop, &c, handler, NULL, &err);
    FUZZ_CHECK(srv != NULL);
    memset(big, 'b', sizeof big);
}

/* A client connected to the server, its socket non-blocking. The connect
 * does not block: a full backlog is the server not accepting, which the
 * loop's turns must cure. */
static int client(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    FUZZ_CHECK(fd >= 0);
    for (int turn = 0; connect(fd, (struct sockaddr *)&addr, addr_len) != 0;
         turn++) {
        FUZZ_CHECK(errno == EAGAIN && turn < 1000);
        mf_loop_run(loop, MF_RUN_NOWAIT);
    }
    return fd;
}

/* Sends what the socket takes now; returns the bytes left unsent. */
static size_t push(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        p += w;
        n -= (size_t)w;
    }
    return n;
}

/* Turns the loop and reads the answers until the server closes. */
static void run_to_close(int fd, const uint8_t *rest, size_t left)
{
    char buf[65536];
    for (int turn = 0; turn < 20000; turn++) {
        if (left) {
            size_t now = push(fd, rest, left);
            rest += left - now;
            left = now;
            if (!left)
                shutdown(fd, SHUT_WR);
        }
        mf_loop_run(loop, MF_RUN_NOWAIT);
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            return;
    }
    FUZZ_CHECK(!"the server did not end the connection");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!loop)
        start();
    if (size > 65536)
        return 0;
    uint8_t *all = malloc(sizeof preface - 1 + size);
    FUZZ_CHECK(all != NULL);
    memcpy(all, preface, sizeof preface - 1);
    memcpy(all + sizeof preface - 1, data, size);
    size_t n = sizeof preface - 1 + size;
    int fd = client();
    size_t left = push(fd, all, n);
    if (!left)
        shutdown(fd, SHUT_WR);
    run_to_close(fd, all + (n - left), left);
    close(fd);
    free(all);
    for (int i = 0; i < 100 && mf_http_server_connections(srv); i++)
        mf_loop_run(loop, MF_RUN_NOWAIT);
    FUZZ_CHECK(mf_http_server_connections(srv) == 0);
    return 0;
}
