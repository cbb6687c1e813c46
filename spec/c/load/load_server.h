/*
 * load_server.h — the HTTP server the load tests aim at: our own server on
 * 127.0.0.1 with the routes they need, counting what it answers and which
 * client ports it saw (one per connection). It runs on the test's loop
 * (load_server_start) or alone in a child process (load_server_fork) when
 * a test must stop it with SIGSTOP.
 *
 * Routes: "/" a short body; "/sleep?ms=N" answered after an N ms timer
 * task; "/held?ms=N" held by a timer; "/stream?n=K" K chunks "chunk i\n";
 * anything else 404.
 */
#ifndef MF_LOAD_SERVER_H
#define MF_LOAD_SERVER_H

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moonflow/http_server.h>
#include <moonflow/load.h>
#include <moonflow/moonflow.h>

#include "test.h"
#include "test_port.h"

typedef struct load_server {
    mf_http_server_t *srv;
    uint16_t port;
    uint64_t answered;        /* handler calls */
    uint8_t ports[65536 / 8]; /* client ports seen */
} load_server_t;

static load_server_t load_server;

static long load_server_query(const mf_http_request_t *req, const char *key,
                              long fallback)
{
    const char *pos = req->query;
    const char *end = pos ? pos + req->query_len : NULL;
    mf_http_query_pair_t kv;
    while (mf_http_query_next(&pos, end, &kv))
        if (kv.value && kv.key_len == strlen(key) &&
            memcmp(kv.key, key, kv.key_len) == 0)
            return strtol(kv.value, NULL, 10);
    return fallback;
}

static void load_server_slept(mf_task_t *task)
{
    mf_http_exchange_append(task->user, "slept\n", 6);
}

static void load_server_held_fired(mf_timer_t *timer)
{
    mf_http_exchange_append(timer->data, "held\n", 5);
    mf_http_exchange_send(timer->data);
    free(timer);
}

static void load_server_held_closed(mf_http_exchange_t *ex, void *arg)
{
    mf_timer_stop(mf_http_exchange_loop(ex), arg);
    free(arg);
}

static void load_server_held(mf_http_exchange_t *ex, long ms)
{
    mf_timer_t *timer = malloc(sizeof(*timer));
    ASSERT(timer != NULL);
    mf_timer_init(timer, load_server_held_fired, ex);
    mf_timer_start(mf_http_exchange_loop(ex), timer, (uint64_t)ms);
    mf_http_exchange_on_close(ex, load_server_held_closed, timer);
    mf_http_exchange_hold(ex);
}

static void load_server_stream(mf_http_exchange_t *ex, long n)
{
    for (long i = 0; i < n; i++) {
        char line[32];
        int len = snprintf(line, sizeof line, "chunk %ld\n", i);
        if (mf_http_exchange_write(ex, line, (size_t)len) < 0)
            break;
    }
    mf_http_exchange_send(ex);
}

static bool load_server_path_is(const mf_http_request_t *req, const char *p)
{
    return req->path_len == strlen(p) &&
           memcmp(req->path, p, req->path_len) == 0;
}

static void load_server_handle(mf_http_exchange_t *ex, void *user)
{
    load_server_t *s = user;
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    const mf_sockaddr_t *peer = mf_http_exchange_peer(ex);
    uint16_t port = ntohs(peer->in4.sin_port);
    s->answered++;
    s->ports[port / 8] |= (uint8_t)(1u << (port % 8));
    if (load_server_path_is(req, "/"))
        mf_http_exchange_body_ref(ex, "hello\n", 6);
    else if (load_server_path_is(req, "/sleep"))
        mf_series_push_back(
            mf_http_exchange_series(ex),
            mf_task_timer_create(mf_http_exchange_loop(ex),
                                 (uint64_t)load_server_query(req, "ms", 10),
                                 load_server_slept, ex));
    else if (load_server_path_is(req, "/held"))
        load_server_held(ex, load_server_query(req, "ms", 10));
    else if (load_server_path_is(req, "/stream"))
        load_server_stream(ex, load_server_query(req, "n", 3));
    else {
        mf_http_exchange_set_status(ex, 404);
        mf_http_exchange_body_ref(ex, "not found\n", 10);
    }
}

/* Client ports the server saw since the last reset: its connections. */
static inline size_t load_server_connections(void)
{
    size_t n = 0;
    for (size_t i = 0; i < sizeof load_server.ports; i++)
        n += (size_t)__builtin_popcount(load_server.ports[i]);
    return n;
}

static inline void load_server_reset(void)
{
    load_server.answered = 0;
    memset(load_server.ports, 0, sizeof load_server.ports);
}

/* A server on port (0: any) of loop; HTTPS with cert and key when given. */
static inline mf_http_server_t *load_server_listen_tls(mf_loop_t *loop,
                                                       uint16_t port,
                                                       const char *cert,
                                                       const char *key)
{
    mf_http_server_config_t c;
    mf_http_server_config_init(&c);
    c.tls.cert_file = cert;
    c.tls.key_file = key;
    char listen[32];
    snprintf(listen, sizeof listen, "127.0.0.1:%u", port);
    c.listen = listen;
    c.max_connections = 100000;
    return mf_http_server_start(loop, &c, load_server_handle, &load_server,
                                NULL);
}

static inline mf_http_server_t *load_server_listen(mf_loop_t *loop,
                                                   uint16_t port)
{
    return load_server_listen_tls(loop, port, NULL, NULL);
}

/* The server on the test's loop, on a port of its own. */
static inline uint16_t load_server_start(mf_loop_t *loop)
{
    load_server.srv = load_server_listen(loop, 0);
    ASSERT(load_server.srv != NULL);
    load_server.port = mf_http_server_port(load_server.srv);
    return load_server.port;
}

/* The server alone in a child process (its own loop): its pid. The
 * caller ends it with load_server_kill. */
static inline pid_t load_server_fork(uint16_t port)
{
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        mf_loop_t *loop = mf_loop_create();
        if (!loop || !load_server_listen(loop, port))
            _exit(3);
        mf_loop_run(loop, MF_RUN_FOREVER);
        _exit(0);
    }
    for (int i = 0; i < 500 && !mf_test_port_open(port); i++)
        usleep(10000);
    ASSERT(mf_test_port_open(port));
    return pid;
}

/* A target on 127.0.0.1:port sending request (a literal). */
static inline mf_load_target_t load_target(uint16_t port, const char *request)
{
    mf_load_target_t t = {.request = request, .request_len = strlen(request)};
    t.addr.in4.sin_family = AF_INET;
    t.addr.in4.sin_port = htons(port);
    t.addr.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return t;
}

static inline void load_server_kill(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

#endif /* MF_LOAD_SERVER_H */
