/*
 * http_fake_origin.h — misbehaving HTTP origins for the client's conformance
 * tests: each listens on a loopback port (two plain ones, A and B, and one
 * over TLS, T) and answers every request with the exact bytes the test
 * scripted for its target, in as many writes as the script says, so that
 * surplus bytes, interim answers, cut heads and closes reach the client
 * exactly as a real server could send them. Not a model of our code: a peer.
 *
 * A thread per origin accepts; each connection gets a thread that serves
 * its requests in order until EOF, a scripted close, or a bounded receive
 * timeout. Every request (head and Content-Length body) is logged with its
 * origin and its place on its connection, for the test to inspect. Started
 * once per test binary; fake_origins_stop joins every thread.
 */
#ifndef MF_HTTP_FAKE_ORIGIN_H
#define MF_HTTP_FAKE_ORIGIN_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "test.h"
#include "test_port.h"

enum { FAKE_A, FAKE_B, FAKE_T, FAKE_ORIGINS };

enum fake_close {
    FAKE_KEEP,        /* answer, then wait for the next request */
    FAKE_CLOSE,       /* answer, then close */
    FAKE_CLOSE_REUSED /* on a connection's first request answer and keep it;
                         on a later one close without answering */
};

/* The answer to one request-target. In parts, "{A}" "{B}" "{T}" stand for
 * the origins' ports. */
typedef struct fake_answer {
    const char *target;
    const char *parts[3]; /* written in turn, pause_ms apart */
    unsigned pause_ms;
    enum fake_close close;
} fake_answer_t;

#define FAKE_MAX_CONNS 256
#define FAKE_MAX_LOG 256
#define FAKE_REQUEST_MAX 8192

typedef struct fake_request {
    int origin;
    int conn; /* the connection's number (accept order, all origins) */
    int nth;  /* 1 for a connection's first request */
    char raw[FAKE_REQUEST_MAX + 1]; /* head and body, NUL-terminated */
    size_t head_len, len;
} fake_request_t;

typedef struct fake_conn {
    pthread_t tid;
    int fd;
    int origin;
    int id;
    SSL *ssl;
} fake_conn_t;

static struct {
    const fake_answer_t *answers;
    size_t nanswers;
    SSL_CTX *tls;
    int listen_fd[FAKE_ORIGINS];
    uint16_t port[FAKE_ORIGINS];
    pthread_t acceptor[FAKE_ORIGINS];
    atomic_int accepts[FAKE_ORIGINS];
    pthread_mutex_t lock; /* conns, nconns, log, nlog */
    fake_conn_t conns[FAKE_MAX_CONNS];
    int nconns;
    fake_request_t log[FAKE_MAX_LOG];
    int nlog;
} fake;

/* ---- one connection ---------------------------------------------------- */

static ssize_t fake_recv(fake_conn_t *c, char *buf, size_t n)
{
    if (c->ssl) {
        int r = SSL_read(c->ssl, buf, (int)n);
        return r > 0 ? r : -1;
    }
    return recv(c->fd, buf, n, 0);
}

static bool fake_send(fake_conn_t *c, const char *p, size_t n)
{
    while (n) {
        ssize_t w = c->ssl ? SSL_write(c->ssl, p, (int)n)
                           : send(c->fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* The Content-Length of a head (0 without one). */
static size_t fake_content_length(const char *head, size_t len)
{
    const char *p = head;
    while ((p = strstr(p, "\r\n")) && p + 2 < head + len) {
        p += 2;
        if (strncasecmp(p, "content-length:", 15) == 0)
            return strtoul(p + 15, NULL, 10);
    }
    return 0;
}

/* Reads one request into r (head + body); false on EOF, error or timeout. */
static bool fake_read_request(fake_conn_t *c, fake_request_t *r)
{
    char *end;
    r->len = 0;
    r->raw[0] = 0;
    while (!(end = strstr(r->raw, "\r\n\r\n"))) {
        if (r->len == FAKE_REQUEST_MAX)
            return false;
        ssize_t n = fake_recv(c, r->raw + r->len, FAKE_REQUEST_MAX - r->len);
        if (n <= 0)
            return false;
        r->len += (size_t)n;
        r->raw[r->len] = 0;
    }
    r->head_len = (size_t)(end - r->raw) + 4;
    size_t want = r->head_len + fake_content_length(r->raw, r->head_len);
    while (r->len < want && want <= FAKE_REQUEST_MAX) {
        ssize_t n = fake_recv(c, r->raw + r->len, want - r->len);
        if (n <= 0)
            return false;
        r->len += (size_t)n;
    }
    r->raw[r->len] = 0;
    return r->len == want;
}

/* The request-target of a logged request, copied into out. */
static const char *fake_target(const fake_request_t *r, char *out, size_t cap)
{
    const char *sp = strchr(r->raw, ' ');
    size_t n = sp ? strcspn(sp + 1, " ") : 0;
    if (n >= cap)
        n = cap - 1;
    memcpy(out, sp ? sp + 1 : "", n);
    out[n] = 0;
    return out;
}

static const fake_answer_t *fake_answer_for(const fake_request_t *r)
{
    char target[512];
    fake_target(r, target, sizeof target);
    for (size_t i = 0; i < fake.nanswers; i++)
        if (strcmp(fake.answers[i].target, target) == 0)
            return &fake.answers[i];
    return NULL;
}

static void fake_log_add(const fake_request_t *r)
{
    pthread_mutex_lock(&fake.lock);
    if (fake.nlog < FAKE_MAX_LOG)
        fake.log[fake.nlog++] = *r;
    pthread_mutex_unlock(&fake.lock);
}

/* Writes tmpl with the origins' ports in place of {A}, {B} and {T}. */
static bool fake_send_part(fake_conn_t *c, const char *tmpl)
{
    char out[8192];
    size_t n = 0;
    for (const char *p = tmpl; *p && n < sizeof out - 8; p++) {
        const char *tags = "ABT";
        const char *tag =
            p[0] == '{' && p[1] && p[2] == '}' ? strchr(tags, p[1]) : NULL;
        if (tag) {
            n += (size_t)snprintf(out + n, sizeof out - n, "%u",
                                  fake.port[tag - tags]);
            p += 2;
        } else {
            out[n++] = *p;
        }
    }
    return fake_send(c, out, n);
}

/* Answers r as scripted; false when the connection is to end. */
static bool fake_answer(fake_conn_t *c, const fake_request_t *r)
{
    static const fake_answer_t missing = {
        "",
        {"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"},
        0,
        FAKE_KEEP};
    const fake_answer_t *a = fake_answer_for(r);
    if (!a)
        a = &missing;
    if (a->close == FAKE_CLOSE_REUSED && r->nth > 1)
        return false;
    for (int i = 0; i < 3 && a->parts[i]; i++) {
        if (i && a->pause_ms)
            usleep(a->pause_ms * 1000);
        if (!fake_send_part(c, a->parts[i]))
            return false;
    }
    return a->close != FAKE_CLOSE;
}

static void *fake_conn_main(void *arg)
{
    fake_conn_t *c = arg;
    fake_request_t *r = malloc(sizeof(*r));
    if (fake.tls && c->origin == FAKE_T) {
        c->ssl = SSL_new(fake.tls);
        SSL_set_fd(c->ssl, c->fd);
        if (SSL_accept(c->ssl) != 1)
            goto done;
    }
    for (int nth = 1; fake_read_request(c, r); nth++) {
        r->origin = c->origin;
        r->conn = c->id;
        r->nth = nth;
        fake_log_add(r);
        if (!fake_answer(c, r))
            break;
    }
done:
    if (c->ssl)
        SSL_shutdown(c->ssl);   /* close_notify: a clean end, not a cut */
    shutdown(c->fd, SHUT_RDWR); /* the fd is closed by fake_origins_stop */
    free(r);
    return NULL;
}

/* ---- origins ----------------------------------------------------------- */

static void *fake_accept_main(void *arg)
{
    int origin = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(fake.listen_fd[origin], NULL, NULL);
        if (fd < 0)
            return NULL; /* the listener was shut down */
        struct timeval tv = {10, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        pthread_mutex_lock(&fake.lock);
        if (fake.nconns == FAKE_MAX_CONNS) {
            pthread_mutex_unlock(&fake.lock);
            close(fd);
            continue;
        }
        fake_conn_t *c = &fake.conns[fake.nconns];
        *c = (fake_conn_t){.fd = fd, .origin = origin, .id = fake.nconns};
        atomic_fetch_add(&fake.accepts[origin], 1);
        if (pthread_create(&c->tid, NULL, fake_conn_main, c) == 0)
            fake.nconns++;
        else
            close(fd);
        pthread_mutex_unlock(&fake.lock);
    }
}

static void fake_listen(int origin)
{
    fake.listen_fd[origin] = mf_test_bind_loopback(&fake.port[origin], 64);
    ASSERT(fake.listen_fd[origin] >= 0);
    ASSERT_EQ(pthread_create(&fake.acceptor[origin], NULL, fake_accept_main,
                             (void *)(intptr_t)origin),
              0);
}

/* Starts the three origins answering from answers[0..n); T serves TLS with
 * the certificate and key files. */
static void fake_origins_start(const fake_answer_t *answers, size_t n,
                               const char *cert, const char *key)
{
    fake.answers = answers;
    fake.nanswers = n;
    pthread_mutex_init(&fake.lock, NULL);
    fake.tls = SSL_CTX_new(TLS_server_method());
    ASSERT(fake.tls != NULL);
    ASSERT_EQ(SSL_CTX_use_certificate_chain_file(fake.tls, cert), 1);
    ASSERT_EQ(SSL_CTX_use_PrivateKey_file(fake.tls, key, SSL_FILETYPE_PEM), 1);
    for (int i = 0; i < FAKE_ORIGINS; i++)
        fake_listen(i);
}

static void fake_origins_stop(void)
{
    for (int i = 0; i < FAKE_ORIGINS; i++) {
        shutdown(fake.listen_fd[i], SHUT_RDWR);
        pthread_join(fake.acceptor[i], NULL);
        close(fake.listen_fd[i]);
    }
    for (int i = 0; i < fake.nconns; i++) {
        shutdown(fake.conns[i].fd, SHUT_RDWR); /* ends a blocked read */
        pthread_join(fake.conns[i].tid, NULL);
        SSL_free(fake.conns[i].ssl);
        close(fake.conns[i].fd);
    }
    SSL_CTX_free(fake.tls);
    pthread_mutex_destroy(&fake.lock);
}

/* ---- what the origins saw ---------------------------------------------- */

static int fake_accepted(int origin)
{
    return atomic_load(&fake.accepts[origin]);
}

static void fake_log_clear(void)
{
    pthread_mutex_lock(&fake.lock);
    fake.nlog = 0;
    pthread_mutex_unlock(&fake.lock);
}

/* How many logged requests had this target. */
static int fake_count(const char *target)
{
    int n = 0;
    char t[512];
    pthread_mutex_lock(&fake.lock);
    for (int i = 0; i < fake.nlog; i++)
        n += strcmp(fake_target(&fake.log[i], t, sizeof t), target) == 0;
    pthread_mutex_unlock(&fake.lock);
    return n;
}

/* The last logged request with this target, copied to *out; false if none. */
static bool fake_last(const char *target, fake_request_t *out)
{
    bool found = false;
    char t[512];
    pthread_mutex_lock(&fake.lock);
    for (int i = fake.nlog - 1; i >= 0 && !found; i--)
        if (strcmp(fake_target(&fake.log[i], t, sizeof t), target) == 0) {
            *out = fake.log[i];
            found = true;
        }
    pthread_mutex_unlock(&fake.lock);
    return found;
}

/* The value of a request header (any case) copied into out, or NULL. */
static const char *fake_header(const fake_request_t *r, const char *name,
                               char *out, size_t cap)
{
    size_t n = strlen(name);
    const char *p = strstr(r->raw, "\r\n");
    while (p && p + 2 < r->raw + r->head_len - 2) {
        p += 2;
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1 + (p[n + 1] == ' ');
            size_t len = strcspn(v, "\r");
            if (len >= cap)
                len = cap - 1;
            memcpy(out, v, len);
            out[len] = 0;
            return out;
        }
        p = strstr(p, "\r\n");
    }
    return NULL;
}

/* The request's body (what followed its head). */
static const char *fake_body(const fake_request_t *r)
{
    return r->raw + r->head_len;
}

#endif /* MF_HTTP_FAKE_ORIGIN_H */
