/*
 * kafka_mock_forward.c — `moonflow kafka-mock --port P`: librdkafka's mock
 * brokers listen on ports the system picks at every start, so a fixed
 * bootstrap list is made of our own listeners on P, P+1, ..., each relaying
 * its connections, byte for byte, to one broker. Clients then learn the
 * brokers' own addresses from the cluster's metadata, as with any Kafka.
 *
 * Plain threads and blocking sockets: an acceptor polls the listeners, and
 * each relayed connection has one thread per direction, so neither side
 * waits on the other. This is a tool for trying things on a laptop (a
 * handful of connections), not a proxy for load.
 */
#include "kafka_mock_forward.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct mf_kmock_forward {
    int n;
    int listen_fd[MF_KMOCK_MAX_BROKERS];
    struct sockaddr_in target[MF_KMOCK_MAX_BROKERS];
    int stop_pipe[2]; /* written once to end the acceptor */
    pthread_t acceptor;
    int started;
};

/* One relayed connection: closed by the last of its two directions. */
typedef struct kmock_relay kmock_relay_t;

typedef struct kmock_pump {
    kmock_relay_t *relay;
    int from, to;
} kmock_pump_t;

struct kmock_relay {
    atomic_int refs;
    int fd[2];
    kmock_pump_t pump[2];
};

/* ---- listeners ---------------------------------------------------------- */

static int kmock_listen_one(int port, char *why, size_t len)
{
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&sin, sizeof sin) < 0 ||
        listen(fd, 64) < 0) {
        snprintf(why, len, "127.0.0.1:%d: %s", port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static void kmock_close_listeners(mf_kmock_forward_t *f, int count)
{
    for (int i = 0; i < count; i++)
        close(f->listen_fd[i]);
}

mf_kmock_forward_t *mf_kmock_forward_listen(int first_port, int n, char *why,
                                            size_t len)
{
    mf_kmock_forward_t *f = calloc(1, sizeof *f);
    if (!f || n < 1 || n > MF_KMOCK_MAX_BROKERS) {
        snprintf(why, len, "%s", f ? "too many brokers" : strerror(errno));
        free(f);
        return NULL;
    }
    for (f->n = 0; f->n < n; f->n++) {
        f->listen_fd[f->n] = kmock_listen_one(first_port + f->n, why, len);
        if (f->listen_fd[f->n] < 0) {
            kmock_close_listeners(f, f->n);
            free(f);
            return NULL;
        }
    }
    return f;
}

/* ---- relays ------------------------------------------------------------- */

static int kmock_send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void kmock_relay_release(kmock_relay_t *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    close(r->fd[0]);
    close(r->fd[1]);
    free(r);
}

/* One direction: copies until its source ends, then passes the end on. */
static void *kmock_pump_run(void *arg)
{
    kmock_pump_t *p = arg;
    char buf[16384];
    for (;;) {
        ssize_t got = recv(p->from, buf, sizeof buf, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0 || kmock_send_all(p->to, buf, (size_t)got) < 0)
            break;
    }
    shutdown(p->to, SHUT_WR);
    shutdown(p->from, SHUT_RD);
    kmock_relay_release(p->relay);
    return NULL;
}

static int kmock_spawn_detached(void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    return rc;
}

/* Relays client to the broker at target; on any failure the client is
 * simply closed, as a broker that is not there would. */
static void kmock_relay_start(int client, const struct sockaddr_in *target)
{
    int broker = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (broker < 0 ||
        connect(broker, (const struct sockaddr *)target, sizeof *target) < 0) {
        if (broker >= 0)
            close(broker);
        close(client);
        return;
    }
    kmock_relay_t *r = calloc(1, sizeof *r);
    if (!r) {
        close(broker);
        close(client);
        return;
    }
    atomic_init(&r->refs, 2);
    r->fd[0] = client;
    r->fd[1] = broker;
    r->pump[0] = (kmock_pump_t){r, client, broker};
    r->pump[1] = (kmock_pump_t){r, broker, client};
    for (int i = 0; i < 2; i++)
        if (kmock_spawn_detached(kmock_pump_run, &r->pump[i]) != 0) {
            /* this direction never runs: end the other one too */
            shutdown(client, SHUT_RDWR);
            shutdown(broker, SHUT_RDWR);
            kmock_relay_release(r);
        }
}

/* ---- the acceptor ------------------------------------------------------- */

static void *kmock_accept_run(void *arg)
{
    mf_kmock_forward_t *f = arg;
    struct pollfd pfd[MF_KMOCK_MAX_BROKERS + 1];
    for (int i = 0; i < f->n; i++)
        pfd[i] = (struct pollfd){.fd = f->listen_fd[i], .events = POLLIN};
    pfd[f->n] = (struct pollfd){.fd = f->stop_pipe[0], .events = POLLIN};
    for (;;) {
        if (poll(pfd, (nfds_t)f->n + 1, -1) < 0 && errno != EINTR)
            return NULL;
        if (pfd[f->n].revents)
            return NULL;
        for (int i = 0; i < f->n; i++) {
            if (!(pfd[i].revents & POLLIN))
                continue;
            int client = accept4(f->listen_fd[i], NULL, NULL, SOCK_CLOEXEC);
            if (client >= 0)
                kmock_relay_start(client, &f->target[i]);
        }
    }
}

/* "HOST:PORT,..." into f->target; the hosts are numeric (librdkafka's mock
 * brokers listen on 127.0.0.1). */
static int kmock_parse_targets(mf_kmock_forward_t *f, const char *targets,
                               char *why, size_t len)
{
    const char *p = targets;
    for (int i = 0; i < f->n; i++) {
        char host[64];
        int port, used = 0;
        if (sscanf(p, "%63[^:,]:%d%n", host, &port, &used) != 2 ||
            inet_pton(AF_INET, host, &f->target[i].sin_addr) != 1 || port < 1 ||
            port > 65535) {
            snprintf(why, len, "cannot read the cluster's addresses '%s'",
                     targets);
            return -1;
        }
        f->target[i].sin_family = AF_INET;
        f->target[i].sin_port = htons((uint16_t)port);
        p += used;
        if (*p == ',')
            p++;
    }
    return 0;
}

int mf_kmock_forward_start(mf_kmock_forward_t *f, const char *targets,
                           char *why, size_t len)
{
    if (kmock_parse_targets(f, targets, why, len) < 0)
        return -1;
    if (pipe2(f->stop_pipe, O_CLOEXEC) < 0) {
        snprintf(why, len, "pipe: %s", strerror(errno));
        return -1;
    }
    int rc = pthread_create(&f->acceptor, NULL, kmock_accept_run, f);
    if (rc != 0) {
        snprintf(why, len, "thread: %s", strerror(rc));
        close(f->stop_pipe[0]);
        close(f->stop_pipe[1]);
        return -1;
    }
    f->started = 1;
    return 0;
}

void mf_kmock_forward_stop(mf_kmock_forward_t *f)
{
    if (!f)
        return;
    if (f->started) {
        char one = 1;
        while (write(f->stop_pipe[1], &one, 1) < 0 && errno == EINTR)
            ;
        pthread_join(f->acceptor, NULL);
        close(f->stop_pipe[0]);
        close(f->stop_pipe[1]);
    }
    kmock_close_listeners(f, f->n);
    free(f);
}
