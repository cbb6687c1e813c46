/*
 * redis_harness.h — what the Redis client's C tests share: a real
 * redis-server on a free loopback port in a temporary directory (plain or
 * TLS-only, killed at exit even after a failed assertion), a client on the
 * test's loop for it, tasks written as "SET a 1; GET a", replies rendered
 * as text, a loop run bounded in time, and a subscriber that records what
 * it receives. The main server starts once per test binary, at the first
 * setup(); tests that kill or restart a server start one of their own.
 */
#ifndef MF_TEST_REDIS_HARNESS_H
#define MF_TEST_REDIS_HARNESS_H

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <moonflow/moonflow.h>
#include <moonflow/redis.h>

#include "test.h"
#include "test_port.h"

extern char **environ;

static mf_loop_t *loop;

/* ---- the redis server ---------------------------------------------------- */

typedef struct server {
    pid_t pid;
    uint16_t port;
    char dir[64];
} server_t;

static server_t main_server;
/* Every server started, killed at exit even after a failed assertion. */
static server_t *started[8];
static int nstarted;

/* tls: the server speaks TLS only, with a self-signed certificate for
 * 127.0.0.1 (DIR/c.pem, its own CA) made here. */
static inline void server_start_on(server_t *s, bool tls, uint16_t port_no);

static inline void server_start(server_t *s, bool tls)
{
    server_start_on(s, tls, 0);
}

/* port_no 0: a free one. */
static inline void server_start_on(server_t *s, bool tls, uint16_t port_no)
{
    if (access("/usr/bin/redis-server", X_OK) != 0)
        MF_TEST_FAIL("redis-server is not installed (make installs it)");
    snprintf(s->dir, sizeof s->dir, "/tmp/mf-redis-XXXXXX");
    ASSERT(mkdtemp(s->dir) != NULL);
    s->port = port_no ? port_no : mf_test_free_port();
    char port[16], log[96], cert[96], key[96], cmd[512];
    snprintf(port, sizeof port, "%u", s->port);
    snprintf(log, sizeof log, "%s/redis.log", s->dir);
    snprintf(cert, sizeof cert, "%s/c.pem", s->dir);
    snprintf(key, sizeof key, "%s/k.pem", s->dir);
    char *argv[32] = {"redis-server",
                      "--port",
                      port,
                      "--bind",
                      "127.0.0.1",
                      "--dir",
                      s->dir,
                      "--save",
                      "",
                      "--appendonly",
                      "no",
                      "--loglevel",
                      "warning",
                      "--logfile",
                      log,
                      NULL};
    if (tls) {
        snprintf(cmd, sizeof cmd,
                 "openssl req -x509 -newkey rsa:2048 -nodes -keyout %s "
                 "-out %s -days 2 -subj /CN=127.0.0.1 "
                 "-addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
                 key, cert);
        ASSERT_EQ(system(cmd), 0);
        char *more[] = {"--tls-port",
                        port,
                        "--tls-cert-file",
                        cert,
                        "--tls-key-file",
                        key,
                        "--tls-ca-cert-file",
                        cert,
                        "--tls-auth-clients",
                        "no",
                        NULL};
        argv[2] = "0"; /* no plain port */
        int n = 15;
        for (int i = 0; more[i]; i++)
            argv[n++] = more[i];
        argv[n] = NULL;
    }
    /* Its output goes to the log file: the test's own stdout is not kept
     * open by a server that outlives a failed assertion. */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    ASSERT(posix_spawn(&s->pid, "/usr/bin/redis-server", &fa, NULL, argv,
                       environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    bool known = false;
    for (int i = 0; i < nstarted; i++)
        known = known || started[i] == s;
    if (!known)
        started[nstarted++] = s;
    for (int i = 0; i < 250; i++) { /* wait for the port, at most 5 s */
        if (mf_test_port_open(s->port))
            return;
        usleep(20000);
    }
    MF_TEST_FAIL("redis-server did not start");
}

static inline void server_stop(server_t *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s->dir);
}

static inline void stop_servers(void)
{
    for (int i = 0; i < nstarted; i++)
        server_stop(started[i]);
}

static inline const char *url_of(const server_t *s, const char *userinfo,
                                 int db)
{
    static char url[256];
    snprintf(url, sizeof url, "redis://%s%s127.0.0.1:%u/%d",
             userinfo ? userinfo : "", userinfo ? "@" : "", s->port, db);
    return url;
}

static inline mf_redis_client_t *setup_with(const char *userinfo, int db,
                                            const mf_redis_opts_t *opts)
{
    signal(SIGPIPE, SIG_IGN);
    if (!main_server.pid) {
        atexit(stop_servers);
        server_start(&main_server, false);
    }
    if (!loop)
        loop = mf_loop_create();
    int err = -1;
    mf_redis_client_t *c =
        mf_redis_client(loop, url_of(&main_server, userinfo, db), opts, &err);
    ASSERT(c != NULL);
    ASSERT_EQ(err, 0);
    return c;
}

static inline mf_redis_client_t *setup(void)
{
    return setup_with(NULL, 0, NULL);
}

static inline void teardown(void)
{
    mf_loop_destroy(loop);
    loop = NULL;
}

/* ---- tasks and their results --------------------------------------------- */

typedef struct result {
    int done;
    int state;
    int error;
    size_t n;
    size_t errors; /* error replies among the n */
    char text[8192];
} result_t;

static inline void put(result_t *r, const char *s, size_t n)
{
    mf_test_append(r->text, sizeof r->text, s, n);
}

/* A reply as text: +status -error :int $bulk nil *nil [a,b]; NUL as \0. */
static inline void render(result_t *r, const mf_redis_reply_t *rep)
{
    char num[32];
    switch (rep->type) {
    case MF_REDIS_NIL:
        put(r, "nil", 3);
        return;
    case MF_REDIS_STATUS:
    case MF_REDIS_ERROR:
    case MF_REDIS_STRING:
        put(r,
            rep->type == MF_REDIS_STATUS  ? "+"
            : rep->type == MF_REDIS_ERROR ? "-"
                                          : "$",
            1);
        mf_test_append_bytes(r->text, sizeof r->text, rep->str, rep->len);
        ASSERT(rep->str[rep->len] == 0);
        return;
    case MF_REDIS_INTEGER:
        snprintf(num, sizeof num, ":%lld", rep->integer);
        put(r, num, strlen(num));
        return;
    case MF_REDIS_ARRAY:
        if (!rep->elements) {
            put(r, "*nil", 4);
            return;
        }
        put(r, "[", 1);
        for (size_t i = 0; i < rep->len; i++) {
            if (i)
                put(r, ",", 1);
            render(r, &rep->elements[i]);
        }
        put(r, "]", 1);
        return;
    }
}

static inline void on_done(mf_task_t *task)
{
    result_t *r = task->user;
    r->done++;
    r->state = mf_task_state(task);
    r->error = mf_task_error(task);
    r->n = mf_task_redis_nreplies(task);
    r->errors = mf_task_redis_error_replies(task);
    r->text[0] = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (i)
            put(r, " | ", 3);
        render(r, mf_task_redis_reply(task, i));
    }
    const char *refusal = mf_task_redis_error_message(task);
    if (refusal) /* a failed task has no replies: the text is Redis's */
        put(r, refusal, strlen(refusal));
}

/* "SET a 1; GET a": commands split on ';', arguments on spaces; add(ctx,
 * argc, argv) for each. */
static inline void
split_commands(const char *line,
               void (*add)(void *ctx, int argc, const char **argv), void *ctx)
{
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", line);
    char *save = NULL;
    for (char *cmd = strtok_r(copy, ";", &save); cmd;
         cmd = strtok_r(NULL, ";", &save)) {
        const char *argv[32];
        int argc = 0;
        char *s2 = NULL;
        for (char *w = strtok_r(cmd, " ", &s2); w && argc < 32;
             w = strtok_r(NULL, " ", &s2))
            argv[argc++] = w;
        if (argc)
            add(ctx, argc, argv);
    }
}

static inline void add_to_task(void *task, int argc, const char **argv)
{
    mf_task_redis_add_command(task, argc, argv, NULL);
}

static inline mf_task_t *task_of(mf_redis_client_t *c, result_t *r,
                                 const char *line)
{
    mf_task_t *t = mf_task_redis_create(c, on_done, r);
    split_commands(line, add_to_task, t);
    return t;
}

static inline uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Runs the loop until *count reaches want: bounded in time. */
static inline void run_until(const int *count, int want)
{
    uint64_t end = now_ms() + 10000;
    while (*count < want && now_ms() < end)
        mf_loop_run(loop, MF_RUN_ONCE);
    if (*count < want)
        MF_TEST_FAIL("only %d of %d done", *count, want);
}

static inline void run(mf_redis_client_t *c, result_t *r, const char *line)
{
    memset(r, 0, sizeof *r);
    mf_task_start(task_of(c, r, line));
    run_until(&r->done, 1);
}

static inline void expect(mf_redis_client_t *c, const char *line,
                          const char *want)
{
    result_t r;
    run(c, &r, line);
    if (r.state != MF_STATE_SUCCESS)
        MF_TEST_FAIL("%s: %s / %s", line, mf_state_name(r.state),
                     mf_err_name(r.error));
    if (strcmp(r.text, want) != 0)
        MF_TEST_FAIL("%s: got \"%s\", want \"%s\"", line, r.text, want);
}

#define EXPECT_STATE(r, st, err)                                        \
    do {                                                                \
        if ((r).state != (st) || (r).error != (err))                    \
            MF_TEST_FAIL("state %s error %s", mf_state_name((r).state), \
                         mf_err_name((r).error));                       \
    } while (0)

/* ---- pub/sub ------------------------------------------------------------- */

typedef struct subres {
    int messages;
    int confirms;
    int ended;
    int error;
    char text[2048];
    char confirmed[512];
    char refusal[300]; /* mf_redis_subscriber_error_message at the end */
} subres_t;

/* A (p)(un)subscribe confirmation: ("subscribe", channel, count). */
static inline bool is_confirmation(const mf_redis_reply_t *msg)
{
    return msg->len == 3 && msg->elements[2].type == MF_REDIS_INTEGER;
}

static inline void on_message(mf_redis_subscriber_t *sub,
                              const mf_redis_reply_t *msg, int error,
                              void *user)
{
    subres_t *s = user;
    if (!msg) {
        const char *why = mf_redis_subscriber_error_message(sub);
        s->ended++;
        s->error = error;
        snprintf(s->refusal, sizeof s->refusal, "%s", why ? why : "");
        return;
    }
    result_t r = {0};
    render(&r, msg);
    if (is_confirmation(msg)) {
        snprintf(s->confirmed + strlen(s->confirmed),
                 sizeof s->confirmed - strlen(s->confirmed), "%s%s",
                 s->confirms ? " " : "", r.text);
        s->confirms++;
        return;
    }
    snprintf(s->text + strlen(s->text), sizeof s->text - strlen(s->text),
             "%s%s", s->messages ? " " : "", r.text);
    s->messages++;
}

/* Waits until the server counts n subscribers of channel (pattern: n
 * pattern subscriptions in all): subscribing is asynchronous. */
static inline void wait_subscribers(mf_redis_client_t *c, const char *channel,
                                    int n)
{
    char line[128], want[128];
    if (channel)
        snprintf(line, sizeof line, "PUBSUB NUMSUB %s", channel);
    else
        snprintf(line, sizeof line, "PUBSUB NUMPAT");
    if (channel)
        snprintf(want, sizeof want, "[$%s,:%d]", channel, n);
    else
        snprintf(want, sizeof want, ":%d", n);
    for (int i = 0; i < 500; i++) {
        result_t r;
        run(c, &r, line);
        if (strcmp(r.text, want) == 0)
            return;
        usleep(10000);
    }
    MF_TEST_FAIL("%s never answered %s", line, want);
}

/* Runs line once, then the loop until the subscriber has seen want
 * messages in all. */
static inline void publish_until(mf_redis_client_t *c, subres_t *s, int want,
                                 const char *line)
{
    result_t r;
    run(c, &r, line);
    run_until(&s->messages, want);
    ASSERT_EQ(s->messages, want);
}

#endif /* MF_TEST_REDIS_HARNESS_H */
