/*
 * bench/http/ceiling.c — the least work an HTTP/1.1 keep-alive server can do
 * per request over TCP, so that compare.py can say how far a real server is
 * from the floor set by the kernel and the client.
 *
 * One thread, one edge-triggered epoll set. No parsing: every "\r\n\r\n" in a
 * connection's byte stream (also when split across reads) is one request,
 * answered by one canned response. A readable connection is read until
 * it is drained, the answers to the whole batch are queued, and they leave in
 * one write(). What a real server adds on top of this — parsing, routing, a
 * handler, headers, timers, logging — is what the benchmark puts a price on.
 *
 * Usage: bench_ceiling --listen 127.0.0.1:PORT --body-size N
 * Body: N bytes, byte i is "0123456789abcdef"[i % 16] (as every peer sends).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_EVENTS 256
#define READ_SIZE 65536

typedef struct conn {
    int fd;
    int matched; /* bytes of "\r\n\r\n" seen at the end of the stream */
    char *out;   /* responses not yet written: out[sent, len) */
    size_t len, sent, cap;
} conn_t;

static const char *response; /* head + body, built once */
static size_t response_len;
static char read_buf[READ_SIZE]; /* shared: the bytes are only scanned */

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (p == NULL) {
        perror("ceiling: realloc");
        exit(1);
    }
    return p;
}

static void build_response(size_t body_size)
{
    static const char digits[] = "0123456789abcdef";
    char head[160];
    int head_len = snprintf(head, sizeof head,
                            "HTTP/1.1 200 OK\r\nServer: ceiling\r\n"
                            "Content-Length: %zu\r\n"
                            "Content-Type: text/plain\r\n\r\n",
                            body_size);
    char *r = xrealloc(NULL, (size_t)head_len + body_size);
    memcpy(r, head, (size_t)head_len);
    for (size_t i = 0; i < body_size; i++)
        r[head_len + i] = digits[i % 16];
    response = r;
    response_len = (size_t)head_len + body_size;
}

/* Counts request terminators in buf, carrying a partial match across calls. */
static size_t count_requests(conn_t *c, const char *buf, size_t n)
{
    static const char term[] = "\r\n\r\n";
    size_t found = 0;
    int m = c->matched;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == term[m])
            m++;
        else
            m = buf[i] == '\r';
        if (m == 4) {
            found++;
            m = 0;
        }
    }
    c->matched = m;
    return found;
}

static void conn_close(conn_t *c)
{
    close(c->fd); /* also leaves the epoll set: the fd is never dup'ed */
    free(c->out);
    free(c);
}

/* Writes what is queued; 0 when done or the socket is full, -1 on error. */
static int conn_flush(conn_t *c)
{
    while (c->sent < c->len) {
        ssize_t n = write(c->fd, c->out + c->sent, c->len - c->sent);
        if (n > 0)
            c->sent += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else
            return n < 0 && errno == EAGAIN ? 0 : -1;
    }
    c->len = c->sent = 0;
    return 0;
}

static void conn_queue(conn_t *c, size_t count)
{
    size_t need = c->len + count * response_len;
    if (need > c->cap) {
        c->cap = need;
        c->out = xrealloc(c->out, need);
    }
    for (size_t i = 0; i < count; i++, c->len += response_len)
        memcpy(c->out + c->len, response, response_len);
}

/*
 * The common case — one request, nothing queued — writes the canned bytes
 * directly, skipping the copy: any server could do the same, so the ceiling
 * does too. Only a short write leaves bytes to queue.
 */
static int conn_respond(conn_t *c, size_t count)
{
    if (count == 1 && c->len == 0) {
        ssize_t n = write(c->fd, response, response_len);
        if (n == (ssize_t)response_len)
            return 0;
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        conn_queue(c, 1);
        c->sent = n > 0 ? (size_t)n : 0;
        return conn_flush(c);
    }
    conn_queue(c, count);
    return conn_flush(c);
}

/*
 * Edge-triggered: the socket must be drained, or the event will not come
 * again. A short read already proves it drained — bytes or a FIN arriving
 * later raise a new edge — unless the FIN came before this event: then
 * epoll reported EPOLLRDHUP and we read on to the 0 that tells us (nginx's
 * rule with EPOLLRDHUP). This saves the read() that would only return
 * EAGAIN, one syscall per request: without it nginx, which saves it, would
 * cost less per request than the ceiling.
 */
static void conn_on_readable(conn_t *c, int peer_closed)
{
    size_t requests = 0;
    int done = 0; /* the peer closed its side, or the socket failed */
    for (;;) {
        ssize_t n = read(c->fd, read_buf, sizeof read_buf);
        if (n > 0) {
            requests += count_requests(c, read_buf, (size_t)n);
            if ((size_t)n < sizeof read_buf && !peer_closed)
                break;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            done = n == 0 || errno != EAGAIN;
            break;
        }
    }
    /* A request followed by a half-close still gets its answer (best
     * effort: what does not fit in the socket now is dropped). */
    if ((requests > 0 && conn_respond(c, requests) < 0) || done)
        conn_close(c);
}

static void conn_on_event(conn_t *c, uint32_t events)
{
    if ((events & EPOLLOUT) && c->len > 0 && conn_flush(c) < 0) {
        conn_close(c);
        return;
    }
    /* EPOLLERR/EPOLLHUP too: the read reports what happened. */
    int peer_closed = (events & (EPOLLRDHUP | EPOLLERR | EPOLLHUP)) != 0;
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        conn_on_readable(c, peer_closed);
}

static void accept_all(int epfd, int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN)
                perror("ceiling: accept4"); /* e.g. EMFILE: keep serving */
            return;
        }
        /* As nginx does on keep-alive connections (tcp_nodelay on). */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn_t *c = xrealloc(NULL, sizeof *c);
        *c = (conn_t){.fd = fd};
        /* Both directions once, edge-triggered: no epoll_ctl per request. */
        struct epoll_event ev = {
            .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            perror("ceiling: epoll_ctl");
            conn_close(c);
        }
    }
}

static int listen_on(const char *host, int port)
{
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "ceiling: bad IPv4 address '%s'\n", host);
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, (struct sockaddr *)&addr, sizeof addr) ||
        listen(fd, SOMAXCONN) < 0) {
        fprintf(stderr, "ceiling: listen on %s:%d: %s\n", host, port,
                strerror(errno));
        return -1;
    }
    return fd;
}

static void serve(int lfd)
{
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = NULL};
    if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev) < 0) {
        perror("ceiling: epoll");
        exit(1);
    }
    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(epfd, events, MAX_EVENTS, -1);
        if (n < 0 && errno != EINTR) {
            perror("ceiling: epoll_wait");
            exit(1);
        }
        for (int i = 0; i < n; i++) {
            if (events[i].data.ptr == NULL)
                accept_all(epfd, lfd);
            else
                conn_on_event(events[i].data.ptr, events[i].events);
        }
    }
}

static int usage(void)
{
    fprintf(stderr,
            "usage: bench_ceiling --listen HOST:PORT --body-size BYTES\n");
    return 2;
}

int main(int argc, char **argv)
{
    char host[64] = "";
    int port = -1;
    long body_size = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--listen") == 0) {
            if (sscanf(argv[i + 1], "%63[^:]:%d", host, &port) != 2)
                return usage();
        } else if (strcmp(argv[i], "--body-size") == 0) {
            char *end;
            body_size = strtol(argv[i + 1], &end, 10);
            if (*end != '\0')
                return usage();
        } else {
            return usage();
        }
    }
    if (argc % 2 == 0 || port < 0 || port > 65535 || body_size < 0 ||
        body_size > (1L << 30))
        return usage();

    signal(SIGPIPE, SIG_IGN); /* a peer gone mid-write is EPIPE, not death */
    build_response((size_t)body_size);
    int lfd = listen_on(host, port);
    if (lfd < 0)
        return 1;
    serve(lfd);
    return 0;
}
