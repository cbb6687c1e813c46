/*
 * dns_stub.h — a small real DNS server for tests: a responder on 127.0.0.1
 * (an ephemeral port, UDP and TCP) in a thread of the test process. It
 * answers A and AAAA questions from a table, NXDOMAIN for names it does not
 * know, never answers "silent.test", truncates UDP answers for "big.test"
 * (so a resolver must ask again over TCP), and counts the questions it
 * receives per name. Start with dns_stub_start(), point a resolver at
 * 127.0.0.1:dns_stub.port, stop with dns_stub_stop().
 */
#ifndef MF_TEST_DNS_STUB_H
#define MF_TEST_DNS_STUB_H

#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include <moonflow/dns.h>

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
} dns_stub = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void count_question(const char *name)
{
    pthread_mutex_lock(&dns_stub.lock);
    int i = 0;
    while (i < dns_stub.ncounts && strcmp(dns_stub.counts[i].name, name) != 0)
        i++;
    if (i == dns_stub.ncounts && i < (int)MF_ARRAY_SIZE(dns_stub.counts)) {
        snprintf(dns_stub.counts[i].name, sizeof dns_stub.counts[i].name, "%s",
                 name);
        dns_stub.counts[i].count = 0;
        dns_stub.ncounts++;
    }
    if (i < dns_stub.ncounts)
        dns_stub.counts[i].count++;
    pthread_mutex_unlock(&dns_stub.lock);
}

/* Questions received for name (A and AAAA alike: one lookup asks both). */
__attribute__((unused)) static int questions(const char *name)
{
    int n = 0;
    pthread_mutex_lock(&dns_stub.lock);
    for (int i = 0; i < dns_stub.ncounts; i++)
        if (strcmp(dns_stub.counts[i].name, name) == 0)
            n = dns_stub.counts[i].count;
    pthread_mutex_unlock(&dns_stub.lock);
    return n;
}

__attribute__((unused)) static int total_questions(void)
{
    int n = 0;
    pthread_mutex_lock(&dns_stub.lock);
    for (int i = 0; i < dns_stub.ncounts; i++)
        n += dns_stub.counts[i].count;
    pthread_mutex_unlock(&dns_stub.lock);
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
    while ((n = recvfrom(dns_stub.fd, msg, sizeof msg, MSG_DONTWAIT,
                         (struct sockaddr *)&from, &fromlen)) > 0) {
        size_t m = answer(msg, (size_t)n, out, true);
        if (m)
            sendto(dns_stub.fd, out, m, 0, (struct sockaddr *)&from, fromlen);
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
    int fd = accept(dns_stub.listen_fd, NULL, NULL);
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

static void *dns_stub_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd fds[3] = {{dns_stub.fd, POLLIN, 0},
                                {dns_stub.listen_fd, POLLIN, 0},
                                {dns_stub.stop[0], POLLIN, 0}};
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
static bool dns_stub_bind(void)
{
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    int one = 1;
    dns_stub.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    dns_stub.fd = socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT(dns_stub.listen_fd >= 0 && dns_stub.fd >= 0);
    setsockopt(dns_stub.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ASSERT_EQ(bind(dns_stub.listen_fd, (struct sockaddr *)&addr, sizeof addr),
              0);
    ASSERT_EQ(getsockname(dns_stub.listen_fd, (struct sockaddr *)&addr, &len),
              0);
    if (bind(dns_stub.fd, (struct sockaddr *)&addr, sizeof addr) == 0) {
        dns_stub.port = ntohs(addr.sin_port);
        return true;
    }
    close(dns_stub.listen_fd);
    close(dns_stub.fd);
    return false;
}

static void dns_stub_start(void)
{
    int tries = 0;
    while (!dns_stub_bind())
        ASSERT(++tries < 100);
    int rcvbuf = 1 << 20; /* bursts of concurrent questions */
    setsockopt(dns_stub.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    ASSERT_EQ(listen(dns_stub.listen_fd, 8), 0);
    dns_stub.ncounts = 0;
    ASSERT_EQ(pipe(dns_stub.stop), 0);
    ASSERT_EQ(pthread_create(&dns_stub.thread, NULL, dns_stub_main, NULL), 0);
}

static void dns_stub_stop(void)
{
    ASSERT_EQ(write(dns_stub.stop[1], "x", 1), 1);
    pthread_join(dns_stub.thread, NULL);
    close(dns_stub.stop[0]);
    close(dns_stub.stop[1]);
    close(dns_stub.fd);
    close(dns_stub.listen_fd);
}

/* Points loop's resolver at the running stub only: one try, 1 s timeout,
 * short cache lifetimes. */
static inline void dns_stub_use(mf_loop_t *loop)
{
    char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", dns_stub.port);
    mf_dns_config_t dc = {.timeout_ms = 1000,
                          .tries = 1,
                          .max_ttl_ms = 1000,
                          .negative_ttl_ms = 100,
                          .servers = servers};
    ASSERT_EQ(mf_dns_configure(loop, &dc), 0);
}

#endif /* MF_TEST_DNS_STUB_H */
