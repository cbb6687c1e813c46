/* No malloc per request in steady state, on the server path and the client
 * path: a server and a client on one loop exchange thousands of keep-alive
 * requests (plain, with a request body, pipelined by 8 concurrent clients);
 * after a warm-up the engine's allocation count must not move. */
#include <moonflow/http_client.h>
#include <moonflow/moonflow.h>

#include "test.h"

static mf_loop_t *loop;
static uint16_t port;
static int completed, failed;
static int remaining;

static void handle(mf_http_exchange_t *ex, void *user)
{
    size_t len;
    const char *body = mf_http_exchange_body(ex, &len);
    (void)user;
    mf_http_exchange_add_header(ex, "Content-Type", 12, "text/plain", 10);
    if (len)
        mf_http_exchange_append(ex, body, len);
    else
        mf_http_exchange_body_ref(ex, "0123456789abcdef", 16);
}

static mf_task_t *next_request(void);

static void on_response(mf_task_t *task)
{
    size_t len;
    mf_task_http_body(task, &len);
    if (mf_task_state(task) != MF_STATE_SUCCESS ||
        mf_task_http_status(task) != 200 || len != 16)
        failed++;
    completed++;
    if (--remaining >= 0)
        mf_series_push_back(mf_series_of(task), next_request());
}

static mf_task_t *next_request(void)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/x?n=%d", port, remaining);
    bool post = remaining % 2;
    mf_task_t *t = mf_task_http_create(loop, post ? "POST" : "GET", url,
                                       on_response, NULL);
    mf_task_http_add_header(t, "User-Agent", "alloc-test");
    if (post)
        mf_task_http_set_body(t, "fedcba9876543210", 16);
    return t;
}

/* 8 client series in flight, each issuing its next request from the
 * previous one's callback, until `n` requests have completed. */
static void run_requests(int n)
{
    completed = 0;
    remaining = n - 8;
    for (int i = 0; i < 8; i++)
        mf_task_start(next_request());
    while (completed < n)
        mf_loop_run(loop, MF_RUN_ONCE);
}

TEST(keep_alive_requests_make_no_malloc_in_steady_state)
{
    loop = mf_loop_create();
    mf_http_server_config_t c;
    mf_http_server_config_init(&c);
    c.listen = "127.0.0.1:0";
    mf_http_server_t *srv = mf_http_server_start(loop, &c, handle, NULL, NULL);
    ASSERT(srv != NULL);
    port = mf_http_server_port(srv);
    uint64_t cold = mf_alloc_count();
    run_requests(500); /* warm the free lists, the pool, the Date cache */
    ASSERT(mf_alloc_count() > cold); /* the counter sees this path */
    uint64_t before = mf_alloc_count();
    run_requests(5000);
    uint64_t mallocs = mf_alloc_count() - before;
    ASSERT_EQ(failed, 0);
    ASSERT_EQ(completed, 5000);
    ASSERT_EQ(mallocs, 0);
    ASSERT_EQ(mf_http_pool_connects(loop), 8); /* all kept alive */
    mf_http_server_stop(srv, NULL, NULL);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    mf_loop_destroy(loop);
}
