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

/* ---- the DNS server ---------------------------------------------------- */

enum { TYPE_A = 1, TYPE_AAAA = 28, RCODE_NXDOMAIN = 3 };

typedef struct record {
    const char *name;
    int type;
    const char *addr;
    uint32_t ttl;
} record_t;

static const record_t records[] = {
    {"a.test", TYPE_A, "10.0.0.1", 300},
    {"dual.test", TYPE_AAAA, "2001:db8::2", 300},
    {"dual.test", TYPE_A, "10.0.0.2", 300},
    {"short.test", TYPE_A, "10.0.0.3", 1},
    {"many.test", TYPE_A, "10.0.1.1", 300},
    {"many.test", TYPE_A, "10.0.1.2", 300},
    {"many.test", TYPE_A, "10.0.1.3", 300},
    {"many.test", TYPE_A, "10.0.1.4", 300},
    {"many.test", TYPE_A, "10.0.1.5", 300},
    {"many.test", TYPE_AAAA, "2001:db8::5", 300},
    {"big.test", TYPE_A, "10.0.2.1", 300},
};

typedef struct name_count {
    char name[256];
    int count;
} name_count_t;

static struct {
    int fd;
    int listen_fd;
    int stop[2];
    uint16_t port;
    pthread_t thread;
    pthread_mutex_t lock;
    name_count_t counts[128];
    int ncounts;
} server = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void count_question(const char *name)
{
    pthread_mutex_lock(&server.lock);
    int i = 0;
    while (i < server.ncounts && strcmp(server.counts[i].name, name) != 0)
        i++;
    if (i == server.ncounts && i < (int)MF_ARRAY_SIZE(server.counts)) {
        snprintf(server.counts[i].name, sizeof server.counts[i].name, "%s",
                 name);
        server.counts[i].count = 0;
        server.ncounts++;
    }
    if (i < server.ncounts)
        server.counts[i].count++;
    pthread_mutex_unlock(&server.lock);
}

/* Questions received for name (A and AAAA alike: one lookup asks both). */
static int questions(const char *name)
{
    int n = 0;
    pthread_mutex_lock(&server.lock);
    for (int i = 0; i < server.ncounts; i++)
        if (strcmp(server.counts[i].name, name) == 0)
            n = server.counts[i].count;
    pthread_mutex_unlock(&server.lock);
    return n;
}

static int total_questions(void)
{
    int n = 0;
    pthread_mutex_lock(&server.lock);
    for (int i = 0; i < server.ncounts; i++)
        n += server.counts[i].count;
    pthread_mutex_unlock(&server.lock);
    return n;
}

/* Reads the question name as lowercase dots; returns the offset after it,
 * or 0 on a malformed (or compressed) name. */
static size_t parse_qname(const unsigned char *msg, size_t len, char *name,
                          size_t size)
{
    size_t pos = 12, out = 0;
    while (pos < len && msg[pos] != 0) {
        size_t label = msg[pos++];
        if (label > 63 || pos + label > len || out + label + 2 > size)
            return 0;
        if (out)
            name[out++] = '.';
        for (size_t i = 0; i < label; i++) {
            char c = (char)msg[pos + i];
            name[out++] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
        }
        pos += label;
    }
    name[out] = '\0';
    return pos < len ? pos + 1 : 0;
}

static void put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

/* "nN.test" (N a number) are generated names with A 10.1.x.y. */
static bool generated_name(const char *name, unsigned char addr[4])
{
    char *end;
    if (name[0] != 'n' || name[1] < '0' || name[1] > '9')
        return false;
    unsigned long n = strtoul(name + 1, &end, 10);
    if (strcmp(end, ".test") != 0 || n > 65535)
        return false;
    addr[0] = 10, addr[1] = 1, addr[2] = (unsigned char)(n >> 8),
    addr[3] = (unsigned char)n;
    return true;
}

static size_t put_answer(unsigned char *p, int type, const void *addr,
                         uint32_t ttl)
{
    size_t rdlen = type == TYPE_A ? 4 : 16;
    put16(p, 0xc00c); /* the question's name */
    put16(p + 2, (unsigned)type);
    put16(p + 4, 1); /* IN */
    put16(p + 6, ttl >> 16);
    put16(p + 8, ttl & 0xffff);
    put16(p + 10, (unsigned)rdlen);
    memcpy(p + 12, addr, rdlen);
    return 12 + rdlen;
}

/* Appends the records of name and type; returns how many, or -1 when the
 * name is unknown. */
static int put_answers(const char *name, int type, unsigned char *out,
                       size_t *len)
{
    unsigned char gen[4];
    if (generated_name(name, gen)) {
        if (type == TYPE_A)
            *len += put_answer(out + *len, TYPE_A, gen, 300);
        return type == TYPE_A;
    }
    int known = -1;
    for (size_t i = 0; i < MF_ARRAY_SIZE(records); i++) {
        if (strcmp(records[i].name, name) != 0)
            continue;
        known = known < 0 ? 0 : known;
        if (records[i].type != type)
            continue;
        unsigned char addr[16];
        inet_pton(type == TYPE_A ? AF_INET : AF_INET6, records[i].addr, addr);
        *len += put_answer(out + *len, type, addr, records[i].ttl);
        known++;
    }
    return known;
}

/* Builds the reply to one query into out; returns its length, 0 for none. */
static size_t answer(const unsigned char *msg, size_t len, unsigned char *out,
                     bool udp)
{
    char name[256];
    size_t qend = len >= 12 ? parse_qname(msg, len, name, sizeof name) : 0;
    if (!qend || qend + 4 > len)
        return 0;
    count_question(name);
    if (strcmp(name, "silent.test") == 0)
        return 0;
    int type = msg[qend] << 8 | msg[qend + 1];
    size_t n = qend + 4;
    memcpy(out, msg, n); /* id, flags, and the question verbatim */
    int nanswers = put_answers(name, type, out, &n);
    bool truncate = udp && strcmp(name, "big.test") == 0;
    if (truncate)
        n = qend + 4, nanswers = 0;
    out[2] = (unsigned char)(0x80 | (truncate ? 0x02 : 0) | /* QR, TC */
                             (msg[2] & 0x79));              /* opcode, RD */
    out[3] = (unsigned char)(0x80 | (nanswers < 0 ? RCODE_NXDOMAIN : 0));
    put16(out + 4, 1);
    put16(out + 6, nanswers < 0 ? 0 : (unsigned)nanswers);
    put16(out + 8, 0);
    put16(out + 10, 0);
    return n;
}

static void serve_udp(void)
{
    unsigned char msg[512], out[1024];
    struct sockaddr_storage from;
    socklen_t fromlen = sizeof from;
    ssize_t n;
    while ((n = recvfrom(server.fd, msg, sizeof msg, MSG_DONTWAIT,
                         (struct sockaddr *)&from, &fromlen)) > 0) {
        size_t m = answer(msg, (size_t)n, out, true);
        if (m)
            sendto(server.fd, out, m, 0, (struct sockaddr *)&from, fromlen);
        fromlen = sizeof from;
    }
}

static bool read_full(int fd, unsigned char *buf, size_t len)
{
    for (size_t got = 0; got < len;) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

/* One TCP client until it hangs up: 2-byte length, message, in and out.
 * Each reply goes out in one write, length word and body together: the
 * resolver must read both from a single readiness edge. */
static void serve_tcp(void)
{
    int fd = accept(server.listen_fd, NULL, NULL);
    unsigned char len[2], msg[512], out[1026];
    while (fd >= 0 && read_full(fd, len, 2)) {
        size_t n = (size_t)(len[0] << 8 | len[1]);
        if (n > sizeof msg || !read_full(fd, msg, n))
            break;
        size_t m = answer(msg, n, out + 2, false);
        put16(out, (unsigned)m);
        if (m && write(fd, out, m + 2) != (ssize_t)(m + 2))
            break;
    }
    if (fd >= 0)
        close(fd);
}

static void *server_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd fds[3] = {{server.fd, POLLIN, 0},
                                {server.listen_fd, POLLIN, 0},
                                {server.stop[0], POLLIN, 0}};
        if (poll(fds, 3, -1) < 0 || fds[2].revents)
            return NULL;
        if (fds[0].revents)
            serve_udp();
        if (fds[1].revents)
            serve_tcp();
    }
}

/* Binds UDP and TCP sockets to one ephemeral port: the TCP listener takes
 * a free port, the UDP socket tries the same number, and a collision (the
 * port busy on the UDP side) just means another round. */
static bool server_bind(void)
{
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    int one = 1;
    server.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    server.fd = socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT(server.listen_fd >= 0 && server.fd >= 0);
    setsockopt(server.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ASSERT_EQ(bind(server.listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
    ASSERT_EQ(getsockname(server.listen_fd, (struct sockaddr *)&addr, &len), 0);
    if (bind(server.fd, (struct sockaddr *)&addr, sizeof addr) == 0) {
        server.port = ntohs(addr.sin_port);
        return true;
    }
    close(server.listen_fd);
    close(server.fd);
    return false;
}

static void server_start(void)
{
    int tries = 0;
    while (!server_bind())
        ASSERT(++tries < 100);
    int rcvbuf = 1 << 20; /* bursts of concurrent questions */
    setsockopt(server.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    ASSERT_EQ(listen(server.listen_fd, 8), 0);
    server.ncounts = 0;
    ASSERT_EQ(pipe(server.stop), 0);
    ASSERT_EQ(pthread_create(&server.thread, NULL, server_main, NULL), 0);
}

static void server_stop(void)
{
    ASSERT_EQ(write(server.stop[1], "x", 1), 1);
    pthread_join(server.thread, NULL);
    close(server.stop[0]);
    close(server.stop[1]);
    close(server.fd);
    close(server.listen_fd);
}

/* ---- helpers ----------------------------------------------------------- */

/* A loop whose resolver asks only our server. */
static mf_loop_t *loop_with_server(uint32_t timeout_ms, unsigned tries,
                                   uint32_t max_ttl_ms)
{
    char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", server.port);
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
    ASSERT(mf_loop_ext(loop, MF_LOOP_EXT_DNS) == NULL); /* no c-ares */
    mf_loop_destroy(loop);
}

TEST(localhost_resolves_from_etc_hosts_without_asking_the_server)
{
    server_start();
    mf_loop_t *loop = loop_with_server(500, 1, 60000);
    result_t r = resolve(loop, "localhost", 6379);
    ASSERT_EQ(r.status, 0);
    ASSERT(r.naddrs >= 1);
    ASSERT_STR_EQ(r.addrs[0], "127.0.0.1:6379"); /* IPv4 first */
    ASSERT_EQ(total_questions(), 0);
    mf_loop_destroy(loop);
    server_stop();
}

TEST(a_name_served_by_the_dns_server_resolves_with_its_address_and_port)
{
    server_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    result_t r = resolve(loop, "a.test", 8080);
    ASSERT_EQ(r.status, 0);
    ASSERT_EQ(r.naddrs, 1);
    ASSERT_STR_EQ(r.addrs[0], "10.0.0.1:8080");
    ASSERT_EQ(questions("a.test"), 2); /* one lookup: A and AAAA */
    mf_loop_destroy(loop);
    server_stop();
}

TEST(ipv4_addresses_come_first_and_at_most_max_addrs_are_kept)
{
    server_start();
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
    server_stop();
}

TEST(a_truncated_answer_is_fetched_again_over_tcp)
{
    server_start();
    mf_loop_t *loop = loop_with_server(2000, 1, 60000);
    uint64_t t0 = mf_loop_now(loop);
    result_t r = resolve(loop, "big.test", 80);
    ASSERT_EQ(r.status, 0);
    ASSERT_STR_EQ(r.addrs[0], "10.0.2.1:80");
    ASSERT_EQ(questions("big.test"), 4);   /* A, AAAA: UDP then TCP */
    ASSERT(mf_loop_now(loop) - t0 < 1000); /* no stall until a timeout */
    mf_loop_destroy(loop);
    server_stop();
}

TEST(an_unknown_name_fails_with_edns)
{
    server_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    result_t r = resolve(loop, "missing.test", 80);
    ASSERT_EQ(r.status, MF_EDNS);
    ASSERT_EQ(r.naddrs, 0);
    mf_loop_destroy(loop);
    server_stop();
}

TEST(a_silent_server_fails_with_etimedout)
{
    server_start();
    mf_loop_t *loop = loop_with_server(100, 1, 60000);
    uint64_t t0 = mf_loop_now(loop);
    result_t r = resolve(loop, "silent.test", 80);
    ASSERT_EQ(r.status, MF_ETIMEDOUT);
    ASSERT(mf_loop_now(loop) - t0 < 1000);
    ASSERT(questions("silent.test") >= 1);
    mf_loop_destroy(loop);
    server_stop();
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
    server_start();
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
    server_stop();
}

TEST(max_ttl_caps_how_long_an_answer_is_cached)
{
    server_start();
    mf_loop_t *loop = loop_with_server(500, 2, 50); /* a.test has TTL 300 */
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0);
    int asked = questions("a.test");
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0);
    ASSERT_EQ(questions("a.test"), asked);
    wait_ms(loop, 80);
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0);
    ASSERT_EQ(questions("a.test"), 2 * asked);
    mf_loop_destroy(loop);
    server_stop();
}

TEST(failures_are_cached_for_the_negative_ttl)
{
    server_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    ASSERT_EQ(resolve(loop, "missing.test", 80).status, MF_EDNS);
    int asked = questions("missing.test");
    ASSERT_EQ(resolve(loop, "missing.test", 80).status, MF_EDNS);
    ASSERT_EQ(questions("missing.test"), asked);
    mf_dns_cache_clear(loop);
    ASSERT_EQ(resolve(loop, "missing.test", 80).status, MF_EDNS);
    ASSERT_EQ(questions("missing.test"), 2 * asked);
    mf_loop_destroy(loop);
    server_stop();
}

TEST(a_cache_hit_makes_no_allocation)
{
    server_start();
    mf_loop_t *loop = loop_with_server(500, 2, 60000);
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0);
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0); /* warm */
    uint64_t before = mf_alloc_count();
    result_t r = resolve(loop, "a.test", 443);
    ASSERT_EQ(mf_alloc_count(), before);
    ASSERT_STR_EQ(r.addrs[0], "10.0.0.1:443");
    mf_loop_destroy(loop);
    server_stop();
}

/* ---- concurrency and cancel -------------------------------------------- */

TEST(concurrent_queries_for_one_name_share_one_lookup)
{
    server_start();
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
    server_stop();
}

TEST(two_hundred_concurrent_queries_all_complete)
{
    server_start();
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
    server_stop();
}

TEST(cancel_delivers_ecanceled_exactly_once_and_not_inside_the_call)
{
    server_start();
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
    server_stop();
}

TEST(reconfiguring_cancels_lookups_in_flight_and_rejects_bad_servers)
{
    server_start();
    mf_loop_t *loop = loop_with_server(2000, 2, 60000);
    result_t r;
    start(loop, &r, "silent.test", 80);
    mf_loop_run(loop, MF_RUN_NOWAIT); /* the question is on the wire */
    mf_dns_config_t bad = {.servers = "not a server list"};
    ASSERT_EQ(mf_dns_configure(loop, &bad), MF_EINVAL);
    ASSERT_EQ(r.calls, 0); /* a failed configure changes nothing */
    char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", server.port);
    mf_dns_config_t good = {.max_ttl_ms = 60000, .servers = servers};
    ASSERT_EQ(mf_dns_configure(loop, &good), 0);
    ASSERT_EQ(r.calls, 0);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(r.calls, 1);
    ASSERT_EQ(r.status, MF_ECANCELED);
    ASSERT_EQ(resolve(loop, "a.test", 80).status, 0); /* still serving */
    mf_loop_destroy(loop);
    server_stop();
}

TEST(destroying_the_loop_with_queries_in_flight_frees_everything)
{
    server_start();
    mf_loop_t *loop = loop_with_server(2000, 2, 60000);
    result_t silent, other;
    start(loop, &silent, "silent.test", 80);
    start(loop, &other, "a.test", 80);
    mf_task_start(mf_task_dns_create(loop, "silent.test", 80, NULL, NULL));
    mf_loop_run(loop, MF_RUN_NOWAIT);
    mf_loop_destroy(loop); /* the sanitizer twin checks for leaks */
    ASSERT_EQ(silent.calls, 0);
    server_stop();
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
    server_start();
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
    server_stop();
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
    server_start();
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
    server_stop();
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
    server_start();
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
    server_stop();
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
}
