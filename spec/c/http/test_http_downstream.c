/* The request body as a stream and the raw connection, from C: a body many
 * times the input's window read through mf_http_exchange_read as it comes
 * (Content-Length and chunked), the connection going on after it, a
 * chunked body past max_body answered 413 while the handler reads, and an
 * upgrade: a 101 head, then the client's bytes both ways, and the close
 * when the exchange ends. One server (stream_body: every path under /s);
 * the clients are blocking sockets in a thread (http_peer.h). */
#include "http_peer.h"

#define BIG (3 * 1024 * 1024 + 17) /* bytes: about 48 windows */

/* ---- the handlers --------------------------------------------------------
 */

typedef struct reader {
    size_t bytes;
    uint32_t sum; /* of the bytes read, to check their order */
    ssize_t last; /* the last read's answer */
} reader_t;

static atomic_int refused; /* reads that answered MF_EMSGSIZE */

static void read_on(mf_http_exchange_t *ex, void *arg);

/* Reads what is there; at the end answers "bytes sum", on a refusal stops
 * (the server answers), on MF_EAGAIN waits. */
static void read_on(mf_http_exchange_t *ex, void *arg)
{
    reader_t *r = arg;
    char buf[5000]; /* not a divisor of anything the client sends */
    for (;;) {
        ssize_t n = mf_http_exchange_read(ex, buf, sizeof buf);
        r->last = n;
        if (n == MF_EAGAIN) {
            mf_http_exchange_on_readable(ex, read_on, r);
            return;
        }
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            r->sum = r->sum * 31 + (unsigned char)buf[i];
        r->bytes += (size_t)n;
    }
    char text[64];
    if (r->last == MF_EMSGSIZE)
        atomic_fetch_add(&refused, 1);
    int len = snprintf(text, sizeof text, "%zu %u", r->bytes, r->sum);
    free(r);
    mf_http_exchange_send_body(ex, text, (size_t)len);
}

typedef struct raw {
    char line[256];
    size_t len;
} raw_t;

static void raw_on(mf_http_exchange_t *ex, void *arg);

/* Echoes each line back upper-cased until "bye" or the client's end. */
static void raw_on(mf_http_exchange_t *ex, void *arg)
{
    raw_t *r = arg;
    for (;;) {
        ssize_t n = mf_http_exchange_read(ex, r->line + r->len,
                                          sizeof r->line - r->len);
        if (n == MF_EAGAIN) {
            mf_http_exchange_on_readable(ex, raw_on, r);
            return;
        }
        if (n <= 0)
            break;
        r->len += (size_t)n;
        char *nl;
        while ((nl = memchr(r->line, '\n', r->len))) {
            size_t k = (size_t)(nl - r->line) + 1;
            if (k == 4 && !memcmp(r->line, "bye\n", 4))
                goto done;
            for (size_t i = 0; i < k; i++)
                if (r->line[i] >= 'a' && r->line[i] <= 'z')
                    r->line[i] = (char)(r->line[i] - 32);
            mf_http_exchange_write(ex, r->line, k);
            memmove(r->line, r->line + k, r->len - k);
            r->len -= k;
        }
    }
done:
    free(r);
    mf_http_exchange_send(ex);
}

static void handle(mf_http_exchange_t *ex, void *user)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    (void)user;
    if (peer_path_is(req, "/s")) {
        mf_http_exchange_hold(ex);
        read_on(ex, calloc(1, sizeof(reader_t)));
    } else if (peer_path_is(req, "/up")) {
        mf_http_exchange_set_status(ex, 101);
        mf_http_exchange_add_header(ex, "Upgrade", 7, "shout", 5);
        mf_http_exchange_hold(ex);
        if (mf_http_exchange_upgrade(ex) != 0) {
            mf_http_exchange_send(ex);
            return;
        }
        raw_on(ex, calloc(1, sizeof(raw_t)));
    } else {
        mf_http_exchange_set_status(ex, 404);
    }
}

static bool stream_under_s(const mf_http_request_t *req, void *user)
{
    (void)user;
    return req->path_len >= 2 && !memcmp(req->path, "/s", 2);
}

static void serve(void)
{
    if (peer_server)
        return;
    peer_loop = mf_loop_create();
    mf_http_server_config_t c;
    mf_http_server_config_init(&c);
    c.listen = "127.0.0.1:0";
    c.max_body = 8 * 1024 * 1024;
    c.stream_body = stream_under_s;
    int err = 0;
    peer_server = mf_http_server_start(peer_loop, &c, handle, NULL, &err);
    if (!peer_server)
        MF_TEST_FAIL("server: %s", mf_strerror(err));
    peer_port = mf_http_server_port(peer_server);
    atexit(peer_stop_at_exit);
}

/* ---- the clients ------------------------------------------------------- */

static uint32_t pattern_sum(size_t n)
{
    uint32_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum = sum * 31 + (unsigned char)('a' + i % 26);
    return sum;
}

typedef struct big {
    peer_response_t r[3];
} big_t;

static void client_big(void *arg)
{
    big_t *b = arg;
    static char piece[70000];
    for (size_t i = 0; i < sizeof piece; i++)
        piece[i] = (char)('a' + i % 26);
    peer_conn_t *c = peer_connect(peer_port);
    char head[128];
    snprintf(head, sizeof head,
             "POST /s HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", BIG);
    peer_send_str(c, head);
    size_t sent = 0; /* pieces whose length is a multiple of 26 */
    while (sent < BIG) {
        size_t n = BIG - sent < 65000 ? BIG - sent : 65000;
        peer_send(c, piece + sent % 26, n);
        sent += n;
    }
    peer_read_response(c, &b->r[0]);
    /* chunked, and the connection still serves after it */
    peer_send_str(c, "POST /s HTTP/1.1\r\nHost: h\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n"
                     "3\r\nabc\r\n1;ext=1\r\nd\r\n0\r\n\r\n"
                     "GET /none HTTP/1.1\r\nHost: h\r\n\r\n");
    peer_read_response(c, &b->r[1]);
    peer_read_response(c, &b->r[2]);
    peer_close(c);
}

TEST(a_body_many_windows_long_is_read_as_it_comes_and_the_connection_goes_on)
{
    serve();
    big_t b;
    peer_run(peer_loop, client_big, &b);
    char want[64];
    snprintf(want, sizeof want, "%d %u", BIG, pattern_sum(BIG));
    ASSERT_EQ(b.r[0].status, 200);
    ASSERT_STR_EQ(b.r[0].body, want);
    snprintf(want, sizeof want, "4 %u", pattern_sum(4));
    ASSERT_STR_EQ(b.r[1].body, want);
    ASSERT_EQ(b.r[2].status, 404);
}

static void client_too_big(void *arg)
{
    peer_response_t *r = arg;
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c, "POST /s HTTP/1.1\r\nHost: h\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n");
    static char chunk[1024 * 1024];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 9; i++) { /* 9 MiB: past max_body at the ninth */
        char size[32];
        snprintf(size, sizeof size, "%zx\r\n", sizeof chunk);
        peer_send_str(c, size);
        peer_send(c, chunk, sizeof chunk);
        peer_send_str(c, "\r\n");
    }
    peer_read_response(c, r);
    peer_close(c);
}

TEST(a_chunked_body_past_max_body_is_answered_413_while_it_is_read)
{
    serve();
    peer_response_t r;
    int before = atomic_load(&refused);
    peer_run(peer_loop, client_too_big, &r);
    ASSERT_EQ(r.status, 413);
    ASSERT(r.conn_close);
    ASSERT_EQ(atomic_load(&refused), before + 1);
}

typedef struct up {
    peer_response_t head;
    char echoed[64];
    bool closed;
} up_t;

static void client_up(void *arg)
{
    up_t *u = arg;
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c, "GET /up HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\n"
                     "Upgrade: shout\r\n\r\nhello\n");
    char *end;
    while (!(end = memmem(c->buf, c->len, "\r\n\r\n", 4)))
        if (!peer_fill(c))
            return;
    size_t head_len = (size_t)(end - c->buf) + 4;
    memcpy(u->head.head, c->buf, head_len);
    u->head.status = atoi(c->buf + 9);
    peer_consume(c, head_len);
    peer_send_str(c, "world\nbye\n");
    if (peer_need(c, 12))
        memcpy(u->echoed, c->buf, 12);
    peer_consume(c, c->len < 12 ? c->len : 12);
    u->closed = peer_sees_close(c);
    peer_close(c);
}

TEST(an_upgrade_sends_a_101_then_hands_the_bytes_over_and_closes_at_the_end)
{
    serve();
    up_t u;
    memset(&u, 0, sizeof u);
    peer_run(peer_loop, client_up, &u);
    ASSERT_EQ(u.head.status, 101);
    ASSERT(strstr(u.head.head, "Connection: upgrade\r\n"));
    ASSERT(strstr(u.head.head, "Upgrade: shout\r\n"));
    ASSERT(!strstr(u.head.head, "Transfer-Encoding"));
    ASSERT(!strstr(u.head.head, "Content-Length"));
    ASSERT_STR_EQ(u.echoed, "HELLO\nWORLD\n");
    ASSERT(u.closed);
}
