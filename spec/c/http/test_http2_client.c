/* The http task over HTTP/2 (prior knowledge, h2c) against a real nginx
 * started by the test: a body from a source (mf_task_http_set_body_source)
 * streamed up on a stream, sized and unsized, and read back byte for
 * byte; a source that fails or ends short fails its task; sequential and
 * concurrent requests share one connection; the loop ends with the idle
 * HTTP/2 connection still in the pool (the ASan twin checks that nothing
 * leaks). */
#include <arpa/inet.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moonflow/http_client.h>
#include <moonflow/moonflow.h>

#include "http_result.h"
#include "test.h"
#include "test_cert.h"
#include "test_port.h"

extern char **environ;

static mf_loop_t *loop;
static mf_test_cert_t tc; /* only its folder: nginx's files */
static uint16_t nport;
static pid_t nginx;

static bool port_open(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* nginx with h2c on nport: PUT stores under /up/, GET reads it back. */
static void start_nginx(void)
{
    if (access("/usr/sbin/nginx", X_OK) != 0)
        MF_TEST_FAIL("nginx is not installed (make installs nginx-light)");
    mf_test_cert_make(&tc);
    nport = mf_test_free_port();
    char conf[256], up[256];
    snprintf(conf, sizeof conf, "%s/nginx.conf", tc.dir);
    snprintf(up, sizeof up, "%s/up", tc.dir);
    ASSERT_EQ(mkdir(up, 0700), 0);
    FILE *f = fopen(conf, "w");
    ASSERT(f != NULL);
    fprintf(f,
            "daemon off; master_process off; worker_processes 1;\n"
            "pid %s/nginx.pid; error_log %s/error.log;\n"
            "events { worker_connections 128; }\n"
            "http { access_log off; client_max_body_size 16m;\n"
            " client_body_temp_path %s; proxy_temp_path %s;\n"
            " fastcgi_temp_path %s; uwsgi_temp_path %s; scgi_temp_path %s;\n"
            " server { listen 127.0.0.1:%u http2; root %s;\n"
            "  location /up/ { dav_methods PUT; } } }\n",
            tc.dir, tc.dir, tc.dir, tc.dir, tc.dir, tc.dir, tc.dir, nport,
            tc.dir);
    fclose(f);
    char *argv[] = {"nginx", "-p", tc.dir, "-c", conf, "-e", "stderr", NULL};
    ASSERT(posix_spawn(&nginx, "/usr/sbin/nginx", NULL, NULL, argv, environ) ==
           0);
    for (int i = 0; i < 250 && !port_open(nport); i++)
        usleep(20000);
    ASSERT(port_open(nport));
}

static void stop_nginx(void)
{
    kill(nginx, SIGTERM);
    ASSERT_EQ(waitpid(nginx, NULL, 0), nginx);
    ASSERT(mf_test_cert_remove(&tc));
}

static mf_task_t *h2_task_cb(const char *method, const char *path,
                             mf_task_cb cb, result_t *r)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", nport, path);
    mf_task_t *t = mf_task_http_create(loop, method, url, cb, r);
    mf_http_client_opts_t o;
    mf_http_client_opts_init(&o);
    o.http2 = MF_HTTP2_PRIOR_KNOWLEDGE;
    o.response_timeout_ms = 10000;
    mf_task_http_set_opts(t, &o);
    return t;
}

static mf_task_t *h2_task(const char *method, const char *path, result_t *r)
{
    return h2_task_cb(method, path, on_done, r);
}

static void run_until(const result_t *r, int done)
{
    for (int i = 0; r->done < done && i < 100000; i++)
        mf_loop_run(loop, MF_RUN_ONCE);
    ASSERT_EQ(r->done, done);
}

/* ---- a body from a source ------------------------------------------------ */

typedef struct producer {
    mf_task_t *task;
    size_t total, given, fail_after;
    int calls;
    mf_timer_t later;
} producer_t;

static void producer_ready(mf_timer_t *timer)
{
    producer_t *p = timer->data;
    mf_task_http_body_ready(p->task);
}

static char byte_at(size_t i)
{
    return (char)('a' + (i * 7 + i / 26) % 26);
}

/* Pieces of up to 50,000 bytes; the second call has none yet (the task
 * waits for mf_task_http_body_ready). */
static ssize_t produce(void *arg, void *buf, size_t len)
{
    producer_t *p = arg;
    if (++p->calls == 2) {
        mf_timer_start(loop, &p->later, 10);
        return MF_EAGAIN;
    }
    if (p->fail_after && p->given >= p->fail_after)
        return MF_EIO;
    size_t n = p->total - p->given;
    n = n < len ? n : len;
    n = n < 50000 ? n : 50000;
    for (size_t i = 0; i < n; i++)
        ((char *)buf)[i] = byte_at(p->given + i);
    p->given += n;
    return (ssize_t)n;
}

static void put_produced(const char *path, producer_t *p, int64_t length,
                         result_t *r)
{
    mf_task_t *t = h2_task("PUT", path, r);
    p->task = t;
    mf_timer_init(&p->later, producer_ready, p);
    mf_task_http_set_body_source(t, produce, p, length);
    int before = r->done;
    mf_task_start(t);
    run_until(r, before + 1);
}

static size_t mismatch_at;

/* The body against the producer's bytes: where it first differs. */
static void on_compare(mf_task_t *task)
{
    size_t len;
    const char *body = mf_task_http_body(task, &len);
    mismatch_at = (size_t)-1;
    for (size_t i = 0; i < len && body; i++)
        if (body[i] != byte_at(i)) {
            mismatch_at = i;
            break;
        }
    ASSERT_EQ(mf_task_http_version(task), 20);
    on_done(task);
}

/* GET path: the whole body equals the producer's total bytes. */
static void check_stored(const char *path, size_t total)
{
    result_t r = {0};
    mf_task_start(h2_task_cb("GET", path, on_compare, &r));
    run_until(&r, 1);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.body_len, total);
    ASSERT_EQ(mismatch_at, (size_t)-1);
}

TEST(a_body_from_a_source_goes_up_a_stream_byte_exact)
{
    start_nginx();
    loop = mf_loop_create();
    result_t r = {0};
    producer_t sized = {.total = 3u << 20};
    put_produced("/up/sized", &sized, (int64_t)sized.total, &r);
    ASSERT_EQ(r.state, MF_STATE_SUCCESS);
    ASSERT_EQ(r.status, 201);
    ASSERT(sized.calls > 60); /* in pieces, one of them late */
    producer_t unsized = {.total = 1000000};
    put_produced("/up/unsized", &unsized, -1, &r); /* no content-length */
    ASSERT_EQ(r.state, MF_STATE_SUCCESS);
    ASSERT_EQ(r.status, 201);
    check_stored("/up/sized", sized.total);
    check_stored("/up/unsized", unsized.total);
    ASSERT_EQ(mf_http_pool_connects(loop), 1); /* one connection for all */
    mf_loop_destroy(loop); /* its idle h2 connection still pooled */
    stop_nginx();
}

TEST(a_source_that_fails_or_ends_short_fails_its_task_not_the_connection)
{
    start_nginx();
    loop = mf_loop_create();
    result_t r = {0};
    producer_t failing = {.total = 300000, .fail_after = 100000};
    put_produced("/up/failing", &failing, -1, &r);
    ASSERT_EQ(r.state, MF_STATE_SYS_ERROR);
    ASSERT_EQ(r.error, MF_EIO);
    producer_t short_one = {.total = 1000};
    put_produced("/up/short", &short_one, 5000, &r);
    ASSERT_EQ(r.state, MF_STATE_SYS_ERROR);
    ASSERT_EQ(r.error, MF_ECLOSED);
    producer_t fine = {.total = 1000};
    put_produced("/up/fine", &fine, 1000, &r);
    ASSERT_EQ(r.status, 201);
    ASSERT_EQ(mf_http_pool_connects(loop), 1);
    mf_loop_destroy(loop);
    stop_nginx();
}

TEST(concurrent_tasks_share_one_connection_and_say_version_20)
{
    start_nginx();
    loop = mf_loop_create();
    result_t puts = {0};
    producer_t p = {.total = 5000};
    put_produced("/up/small", &p, 5000, &puts);
    ASSERT_EQ(puts.status, 201);
    result_t r = {0};
    for (int i = 0; i < 60; i++)
        mf_task_start(h2_task("GET", "/up/small", &r));
    run_until(&r, 60);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.body_len, 5000);
    ASSERT_EQ(mf_http_pool_connects(loop), 1);
    mf_loop_destroy(loop);
    stop_nginx();
}
