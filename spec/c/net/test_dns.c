/* The resolver against a real DNS server: a small responder on 127.0.0.1
 * (an ephemeral port, UDP and TCP) in a thread of this process. It answers A
 * and AAAA questions from a table, NXDOMAIN for names it does not know,
 * never answers "silent.test", truncates UDP answers for "big.test" (so the
 * resolver must ask again over TCP), and counts the questions it receives
 * per name, so tests can tell a cached answer from a fresh lookup. */
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <moonflow/moonflow.h>

#include "test.h"

#include "dns_stub.h"
#include "net/net.h"

/* ---- helpers ----------------------------------------------------------- */

/* A loop whose resolver asks only our dns_stub. */
static mf_loop_t *loop_with_server(uint32_t timeout_ms, unsigned tries,
                                   uint32_t max_ttl_ms)
{
    char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", dns_stub.port);
    mf_loop_t *loop = mf_loop_create();
    mf_dns_config_t config = {.timeout_ms = timeout_ms,
                              .tries = tries,
                              .max_ttl_ms = max_ttl_ms,
                              .negative_ttl_ms = 1000,
                              .servers = servers};
    ASSERT_EQ(mf_dns_configure(loop, &config), 0);
    return loop;
}

typedef struct result {
    mf_dns_query_t query;
    int calls;
    int status;
    size_t naddrs;
    char addrs[MF_DNS_MAX_ADDRS][64];
} result_t;

static void on_resolved(mf_dns_query_t *query, int status)
{
    result_t *r = query->data;
    r->calls++;
    r->status = status;
    r->naddrs = query->naddrs;
    for (size_t i = 0; i < query->naddrs; i++)
        mf_sockaddr_format(&query->addrs[i], r->addrs[i], sizeof r->addrs[i]);
}

static void start(mf_loop_t *loop, result_t *r, const char *host, uint16_t port)
{
    memset(r, 0, sizeof *r);
    mf_dns_query_start(loop, &r->query, host, port, on_resolved, r);
    ASSERT_EQ(r->calls, 0); /* never inside the start call */
}

static result_t resolve(mf_loop_t *loop, const char *host, uint16_t port)
{
    result_t r;
    start(loop, &r, host, port);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(r.calls, 1);
    return r;
}

static void on_wait_done(mf_timer_t *timer)
{
    (void)timer;
}

static void wait_ms(mf_loop_t *loop, uint64_t ms)
{
    mf_timer_t timer;
    mf_timer_init(&timer, on_wait_done, NULL);
    mf_timer_start(loop, &timer, ms);
    mf_loop_run(loop, MF_RUN_DEFAULT);
}

/* ---- resolving --------------------------------------------------------- */

TEST(numeric_hosts_resolve_without_a_resolver_and_never_synchronously)
{
    mf_loop_t *loop = mf_loop_create();
    result_t v4, v6, bracketed;
    start(loop, &v4, "127.0.0.1", 80);
    start(loop, &v6, "::1", 443);
    start(loop, &bracketed, "[2001:DB8::1]", 8080);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(v4.calls + v6.calls + bracketed.calls, 3);
    ASSERT_EQ(v4.status, 0);
    ASSERT_EQ(v4.naddrs, 1);
    ASSERT_STR_EQ(v4.addrs[0], "127.0.0.1:80");
    ASSERT_STR_EQ(v6.addrs[0], "[::1]:443");
    ASSERT_STR_EQ(bracketed.addrs[0], "[2001:db8::1]:8080");
    ASSERT(mf__dns_resolver_of(loop) == NULL); /* no c-ares */
    mf_loop_destroy(loop);
}

TEST(localhost_resolves_from_etc_hosts_without_asking_the_server)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(500, 1, 60000);
    result_t r = resolve(loop, "localhost", 6379);
    ASSERT_EQ(r.status, 0);
    ASSERT(r.naddrs >= 1);
    ASSERT_STR_EQ(r.addrs[0], "127.0.0.1:6379"); /* IPv4 first */
    ASSERT_EQ(total_questions(), 0);
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(a_name_served_by_the_dns_server_resolves_with_its_address_and_port)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    result_t r = resolve(loop, "a.test", 8080);
    ASSERT_EQ(r.status, 0);
    ASSERT_EQ(r.naddrs, 1);
    ASSERT_STR_EQ(r.addrs[0], "10.0.0.1:8080");
    ASSERT_EQ(questions("a.test"), 2); /* one lookup: A and AAAA */
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(ipv4_addresses_come_first_and_at_most_max_addrs_are_kept)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    result_t dual = resolve(loop, "dual.test", 443);
    ASSERT_EQ(dual.naddrs, 2);
    ASSERT_STR_EQ(dual.addrs[0], "10.0.0.2:443");
    ASSERT_STR_EQ(dual.addrs[1], "[2001:db8::2]:443");
    result_t many = resolve(loop, "many.test", 80);
    ASSERT_EQ(many.naddrs, MF_DNS_MAX_ADDRS);
    for (size_t i = 0; i < many.naddrs; i++)
        ASSERT(strncmp(many.addrs[i], "10.0.1.", 7) == 0);
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(a_truncated_answer_is_fetched_again_over_tcp)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(2000, 1, 60000);
    uint64_t t0 = mf_loop_now(loop);
    result_t r = resolve(loop, "big.test", 80);
    ASSERT_EQ(r.status, 0);
    ASSERT_STR_EQ(r.addrs[0], "10.0.2.1:80");
    ASSERT_EQ(questions("big.test"), 4);   /* A, AAAA: UDP then TCP */
    ASSERT(mf_loop_now(loop) - t0 < 1000); /* no stall until a timeout */
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(an_unknown_name_fails_with_edns)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    result_t r = resolve(loop, "missing.test", 80);
    ASSERT_EQ(r.status, MF_EDNS);
    ASSERT_EQ(r.naddrs, 0);
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(a_silent_server_fails_with_etimedout)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(100, 1, 60000);
    uint64_t t0 = mf_loop_now(loop);
    result_t r = resolve(loop, "silent.test", 80);
    ASSERT_EQ(r.status, MF_ETIMEDOUT);
    ASSERT(mf_loop_now(loop) - t0 < 1000);
    ASSERT(questions("silent.test") >= 1);
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(bad_hosts_fail_with_einval_in_their_callback)
{
    char long_host[300];
    memset(long_host, 'x', sizeof long_host - 1);
    long_host[sizeof long_host - 1] = '\0';
    const char *hosts[] = {"",        "a b.test", "tab\t.test", "ctl\x01.test",
                           long_host, "[not-v6]", "[::1"};
    mf_loop_t *loop = mf_loop_create();
    result_t r[MF_ARRAY_SIZE(hosts)];
    for (size_t i = 0; i < MF_ARRAY_SIZE(hosts); i++)
        start(loop, &r[i], hosts[i], 80);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    for (size_t i = 0; i < MF_ARRAY_SIZE(hosts); i++) {
        ASSERT_EQ(r[i].calls, 1);
        ASSERT_EQ(r[i].status, MF_EINVAL);
    }
    mf_loop_destroy(loop);
}

/* ---- the cache --------------------------------------------------------- */

TEST(answers_are_served_from_the_cache_within_their_ttl_then_asked_again)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    ASSERT_EQ(resolve(loop, "short.test", 80).status, 0); /* TTL 1 s */
    int asked = questions("short.test");
    result_t again = resolve(loop, "SHORT.test", 81); /* case-insensitive */
    ASSERT_EQ(again.status, 0);
    ASSERT_STR_EQ(again.addrs[0], "10.0.0.3:81"); /* the query's own port */
    ASSERT_EQ(questions("short.test"), asked);
    wait_ms(loop, 1100);
    ASSERT_EQ(resolve(loop, "short.test", 80).status, 0);
    ASSERT_EQ(questions("short.test"), 2 * asked);
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(max_ttl_caps_how_long_an_answer_is_cached)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(500, 2, 50); /* a.test has TTL 300 */
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0);
    int asked = questions("a.test");
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0);
    ASSERT_EQ(questions("a.test"), asked);
    wait_ms(loop, 80);
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0);
    ASSERT_EQ(questions("a.test"), 2 * asked);
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(failures_are_cached_for_the_negative_ttl)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    ASSERT_EQ(resolve(loop, "missing.test", 80).status, MF_EDNS);
    int asked = questions("missing.test");
    ASSERT_EQ(resolve(loop, "missing.test", 80).status, MF_EDNS);
    ASSERT_EQ(questions("missing.test"), asked);
    mf_dns_cache_clear(loop);
    ASSERT_EQ(resolve(loop, "missing.test", 80).status, MF_EDNS);
    ASSERT_EQ(questions("missing.test"), 2 * asked);
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(a_cache_hit_makes_no_allocation)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0);
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0); /* warm */
    uint64_t before = mf_alloc_count();
    result_t r = resolve(loop, "a.test", 443);
    ASSERT_EQ(mf_alloc_count(), before);
    ASSERT_STR_EQ(r.addrs[0], "10.0.0.1:443");
    mf_loop_destroy(loop);
    dns_stub_stop();
}

/* ---- concurrency and cancel -------------------------------------------- */

TEST(concurrent_queries_for_one_name_share_one_lookup)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    static result_t r[10];
    for (size_t i = 0; i < MF_ARRAY_SIZE(r); i++)
        start(loop, &r[i], "a.test", (uint16_t)(1000 + i));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    for (size_t i = 0; i < MF_ARRAY_SIZE(r); i++) {
        char want[32];
        snprintf(want, sizeof want, "10.0.0.1:%zu", 1000 + i);
        ASSERT_EQ(r[i].calls, 1);
        ASSERT_STR_EQ(r[i].addrs[0], want);
    }
    ASSERT_EQ(questions("a.test"), 2);
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(two_hundred_concurrent_queries_all_complete)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(1000, 3, 60000);
    static result_t r[200];
    static char names[200][32];
    for (size_t i = 0; i < MF_ARRAY_SIZE(r); i++) {
        snprintf(names[i], sizeof names[i], "n%zu.test", i % 50);
        start(loop, &r[i], names[i], 80);
    }
    mf_loop_run(loop, MF_RUN_DEFAULT);
    for (size_t i = 0; i < MF_ARRAY_SIZE(r); i++) {
        char want[32];
        snprintf(want, sizeof want, "10.1.0.%zu:80", i % 50);
        ASSERT_EQ(r[i].calls, 1);
        ASSERT_EQ(r[i].status, 0);
        ASSERT_STR_EQ(r[i].addrs[0], want);
    }
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(cancel_delivers_ecanceled_exactly_once_and_not_inside_the_call)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0);
    result_t waiting, posted, numeric;
    start(loop, &waiting, "silent.test", 80); /* waits on the server */
    start(loop, &posted, "a.test", 80);       /* cached: result posted */
    start(loop, &numeric, "10.9.9.9", 80);
    mf_dns_query_cancel(&waiting.query);
    mf_dns_query_cancel(&posted.query);
    mf_dns_query_cancel(&numeric.query);
    mf_dns_query_cancel(&waiting.query); /* twice: still one callback */
    ASSERT_EQ(waiting.calls + posted.calls + numeric.calls, 0);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(waiting.calls, 1);
    ASSERT_EQ(waiting.status, MF_ECANCELED);
    ASSERT_EQ(posted.calls, 1);
    ASSERT_EQ(posted.status, MF_ECANCELED);
    ASSERT_EQ(posted.naddrs, 0);
    ASSERT_EQ(numeric.calls, 1);
    ASSERT_EQ(numeric.status, MF_ECANCELED);
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(reconfiguring_cancels_lookups_in_flight_and_rejects_bad_servers)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(2000, 2, 60000);
    result_t r;
    start(loop, &r, "silent.test", 80);
    mf_loop_run(loop, MF_RUN_NOWAIT); /* the question is on the wire */
    mf_dns_config_t bad = {.servers = "not a server list"};
    ASSERT_EQ(mf_dns_configure(loop, &bad), MF_EINVAL);
    ASSERT_EQ(r.calls, 0); /* a failed configure changes nothing */
    char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", dns_stub.port);
    mf_dns_config_t good = {.max_ttl_ms = 60000, .servers = servers};
    ASSERT_EQ(mf_dns_configure(loop, &good), 0);
    ASSERT_EQ(r.calls, 0);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(r.calls, 1);
    ASSERT_EQ(r.status, MF_ECANCELED);
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0); /* still serving */
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(destroying_the_loop_with_queries_in_flight_frees_everything)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(2000, 2, 60000);
    result_t silent, other;
    start(loop, &silent, "silent.test", 80);
    start(loop, &other, "a.test", 80);
    mf_task_start(mf_task_dns_create(loop, "silent.test", 80, NULL, NULL));
    mf_loop_run(loop, MF_RUN_NOWAIT);
    mf_loop_destroy(loop); /* the sanitizer twin checks for leaks */
    ASSERT_EQ(silent.calls, 0);
    dns_stub_stop();
}

/* ---- the dns task ------------------------------------------------------ */

static int task_state, task_error, task_calls;
static char task_addr[64];

static void on_dns_task(mf_task_t *task)
{
    task_calls++;
    task_state = mf_task_state(task);
    task_error = mf_task_error(task);
    task_addr[0] = '\0';
    if (mf_task_dns_count(task) > 0)
        mf_sockaddr_format(mf_task_dns_addr(task, 0), task_addr,
                           sizeof task_addr);
    ASSERT(mf_task_dns_addr(task, mf_task_dns_count(task)) == NULL);
}

static void run_dns_task(mf_loop_t *loop, const char *host, uint16_t port)
{
    task_calls = 0;
    mf_task_start(mf_task_dns_create(loop, host, port, on_dns_task, NULL));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(task_calls, 1);
}

TEST(the_dns_task_ends_dns_error_for_unknown_names_and_timeout_for_silence)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(100, 1, 60000);
    run_dns_task(loop, "missing.test", 80);
    ASSERT_EQ(task_state, MF_STATE_DNS_ERROR);
    ASSERT_EQ(task_error, MF_EDNS);
    run_dns_task(loop, "silent.test", 80);
    ASSERT_EQ(task_state, MF_STATE_TIMEOUT);
    ASSERT_EQ(task_error, MF_ETIMEDOUT);
    run_dns_task(loop, "bad host", 80);
    ASSERT_EQ(task_state, MF_STATE_DNS_ERROR);
    ASSERT_EQ(task_error, MF_EINVAL);
    mf_loop_destroy(loop);
    dns_stub_stop();
}

static char trace[256];

static void on_series_step(mf_task_t *task)
{
    char addr[64] = "-";
    if (mf_task_dns_count(task) > 0)
        mf_sockaddr_format(mf_task_dns_addr(task, 0), addr, sizeof addr);
    size_t len = strlen(trace);
    snprintf(trace + len, sizeof trace - len, "%s%s/%zu", len ? " " : "", addr,
             mf_task_dns_count(task));
}

TEST(dns_tasks_run_in_a_series_and_expose_their_addresses)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    trace[0] = '\0';
    mf_series_t *s = mf_series_create(loop, NULL);
    mf_series_push_back(
        s, mf_task_dns_create(loop, "a.test", 8080, on_series_step, NULL));
    mf_series_push_back(
        s, mf_task_dns_create(loop, "dual.test", 443, on_series_step, NULL));
    mf_series_push_back(
        s, mf_task_dns_create(loop, "[::1]", 53, on_series_step, NULL));
    mf_series_start(s);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_STR_EQ(trace, "10.0.0.1:8080/1 10.0.0.2:443/2 [::1]:53/1");
    mf_loop_destroy(loop);
    dns_stub_stop();
}

static void cancel_task(mf_timer_t *timer)
{
    mf_task_cancel(timer->data);
}

static uint64_t task_done_at;

static void on_dns_task_timed(mf_task_t *task)
{
    on_dns_task(task);
    task_done_at = mf_loop_now(mf_task_loop(task));
}

TEST(a_canceled_or_timed_out_dns_task_ends_without_waiting_for_the_server)
{
    dns_stub_start();
    mf_loop_t *loop = loop_with_server(400, 1, 60000);
    task_calls = 0;
    mf_task_t *task =
        mf_task_dns_create(loop, "silent.test", 80, on_dns_task_timed, NULL);
    mf_timer_t timer;
    mf_timer_init(&timer, cancel_task, task);
    mf_timer_start(loop, &timer, 10);
    uint64_t t0 = mf_loop_now(loop);
    mf_task_start(task);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(task_calls, 1);
    ASSERT_EQ(task_state, MF_STATE_CANCELED);
    ASSERT_EQ(task_error, MF_ECANCELED);
    ASSERT(task_done_at - t0 < 300); /* not the resolver's 400 ms */

    task = mf_task_dns_create(loop, "silent.test", 80, on_dns_task_timed, NULL);
    mf_task_set_timeout(task, 10); /* the engine's timeout, not c-ares' */
    t0 = mf_loop_now(loop);
    mf_task_start(task);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(task_calls, 2);
    ASSERT_EQ(task_state, MF_STATE_TIMEOUT);
    ASSERT_EQ(task_error, MF_ETIMEDOUT);
    ASSERT(task_done_at - t0 < 300);
    mf_loop_destroy(loop);
    dns_stub_stop();
}

TEST(sockaddr_format_writes_host_and_port)
{
    mf_sockaddr_t v4 = {.in4 = {.sin_family = AF_INET, .sin_port = htons(80)}};
    mf_sockaddr_t v6 = {
        .in6 = {.sin6_family = AF_INET6, .sin6_port = htons(443)}};
    char buf[64], tiny[6];
    inet_pton(AF_INET, "192.0.2.7", &v4.in4.sin_addr);
    inet_pton(AF_INET6, "2001:db8::7", &v6.in6.sin6_addr);
    ASSERT_STR_EQ(mf_sockaddr_format(&v4, buf, sizeof buf), "192.0.2.7:80");
    ASSERT_STR_EQ(mf_sockaddr_format(&v6, buf, sizeof buf),
                  "[2001:db8::7]:443");
    ASSERT_STR_EQ(mf_sockaddr_format(&v4, tiny, sizeof tiny), "192.0");
    ASSERT_STR_EQ(mf_sockaddr_format_ip(&v4, buf, sizeof buf), "192.0.2.7");
    ASSERT_STR_EQ(mf_sockaddr_format_ip(&v6, buf, sizeof buf), "2001:db8::7");
}
