/*
 * test_port.h — loopback ports for tests that start servers of their own
 * (redis-server, nginx): a free port to give them, and whether something
 * listens on one yet; and an accept loop for servers in the test's own
 * process.
 */
#ifndef MF_TEST_PORT_H
#define MF_TEST_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

/* A socket bound to a port the kernel picks on 127.0.0.1 (in *port), or -1
 * (listening, with that backlog, unless backlog is 0). */
static inline int mf_test_bind_loopback(uint16_t *port, int backlog)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        (backlog && listen(fd, backlog) != 0) ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* A port the kernel just handed out on 127.0.0.1 (free again after). */
static inline uint16_t mf_test_free_port(void)
{
    uint16_t port = 0;
    int fd = mf_test_bind_loopback(&port, 0);
    if (fd >= 0)
        close(fd);
    return port;
}

/* Whether a connect to 127.0.0.1:port succeeds. */
static inline bool mf_test_port_open(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* A server in the test's own process: accepts on the listening socket lfd
 * for ever in a thread of its own and runs serve((void *)(intptr_t)fd) in
 * a detached thread for each connection (serve closes fd). The loop
 * lives as long as the process. */
typedef struct mf_test_acceptor {
    int lfd;
    void *(*serve)(void *);
} mf_test_acceptor_t;

static inline void *mf_test__accept_loop(void *arg)
{
    const mf_test_acceptor_t *a = arg;
    for (;;) {
        int fd = accept(a->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_t t;
        if (pthread_create(&t, NULL, a->serve, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
    return NULL;
}

static inline bool mf_test_accept_in_thread(int lfd, void *(*serve)(void *))
{
    static mf_test_acceptor_t acceptors[8];
    static int n;
    if (n == 8)
        return false;
    acceptors[n] = (mf_test_acceptor_t){lfd, serve};
    pthread_t t;
    if (pthread_create(&t, NULL, mf_test__accept_loop, &acceptors[n]) != 0)
        return false;
    n++;
    pthread_detach(t);
    return true;
}

#endif /* MF_TEST_PORT_H */
