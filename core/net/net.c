/*
 * net.c — socket helpers, and the URL pieces the clients share (host and
 * port, %-decoding, decimals).
 */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moonflow/common.h"
#include "moonflow/error.h"

static int mf__parse_port(const char *text, uint16_t *port)
{
    char *end;
    if (!*text)
        return MF_EINVAL;
    unsigned long value = strtoul(text, &end, 10);
    if (*end || value > 65535)
        return MF_EINVAL;
    *port = (uint16_t)value;
    return 0;
}

int mf__net_parse_listen(const char *text, mf_sockaddr_t *addr)
{
    char host[64];
    const char *colon;
    memset(addr, 0, sizeof(*addr));
    if (!text)
        return MF_EINVAL;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' ||
            (size_t)(close - text - 1) >= sizeof host)
            return MF_EINVAL;
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = 0;
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (!colon || (size_t)(colon - text) >= sizeof host)
            return MF_EINVAL;
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = 0;
    }
    uint16_t port;
    if (mf__parse_port(colon + 1, &port) < 0)
        return MF_EINVAL;
    if (inet_pton(AF_INET6, host, &addr->in6.sin6_addr) == 1) {
        addr->in6.sin6_family = AF_INET6;
        addr->in6.sin6_port = htons(port);
        return 0;
    }
    addr->in4.sin_family = AF_INET;
    addr->in4.sin_port = htons(port);
    if (!host[0] || strcmp(host, "*") == 0)
        return 0; /* INADDR_ANY */
    if (strcmp(host, "localhost") == 0)
        strcpy(host, "127.0.0.1");
    return inet_pton(AF_INET, host, &addr->in4.sin_addr) == 1 ? 0 : MF_EINVAL;
}

int mf_sockaddr_parse_listen(const char *text, mf_sockaddr_t *addr)
{
    return mf__net_parse_listen(text, addr);
}

socklen_t mf__net_addr_len(const mf_sockaddr_t *addr)
{
    return addr->sa.sa_family == AF_INET6 ? sizeof(addr->in6)
                                          : sizeof(addr->in4);
}

uint16_t mf__net_port(const mf_sockaddr_t *addr)
{
    return ntohs(addr->sa.sa_family == AF_INET6 ? addr->in6.sin6_port
                                                : addr->in4.sin_port);
}

/* A non-blocking TCP socket for addr's family with one option turned on. */
static int mf__net_socket(const mf_sockaddr_t *addr, int level, int option)
{
    int fd = socket(addr->sa.sa_family,
                    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return mf_err_from_errno(errno);
    int one = 1;
    setsockopt(fd, level, option, &one, sizeof one);
    return fd;
}

/* Closes a socket whose setup failed; returns the errno of that failure. */
static int mf__net_fail(int fd)
{
    int err = mf_err_from_errno(errno);
    close(fd);
    return err;
}

int mf__net_listen(const mf_sockaddr_t *addr, int backlog)
{
    int fd = mf__net_socket(addr, SOL_SOCKET, SO_REUSEADDR);
    if (fd < 0)
        return fd;
    int one = 1;
    /* One listener per worker on the same port: the kernel balances. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (bind(fd, &addr->sa, mf__net_addr_len(addr)) < 0 ||
        listen(fd, backlog) < 0)
        return mf__net_fail(fd);
    return fd;
}

int mf__net_check_free(const mf_sockaddr_t *addr)
{
    int fd = mf__net_socket(addr, SOL_SOCKET, SO_REUSEADDR);
    if (fd < 0)
        return fd;
    if (bind(fd, &addr->sa, mf__net_addr_len(addr)) < 0)
        return mf__net_fail(fd);
    close(fd);
    return 0;
}

void mf__net_addr_text(const mf_sockaddr_t *addr, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN];
    bool v6 = addr->sa.sa_family == AF_INET6;
    inet_ntop(addr->sa.sa_family,
              v6 ? (const void *)&addr->in6.sin6_addr
                 : (const void *)&addr->in4.sin_addr,
              host, sizeof host);
    snprintf(buf, len, v6 ? "[%s]:%u" : "%s:%u", host,
             (unsigned)mf__net_port(addr));
}

int mf__net_connect(const mf_sockaddr_t *addr)
{
    int fd = mf__net_socket(addr, IPPROTO_TCP, TCP_NODELAY);
    if (fd < 0)
        return fd;
    if (connect(fd, &addr->sa, mf__net_addr_len(addr)) < 0 &&
        errno != EINPROGRESS)
        return mf__net_fail(fd);
    return fd;
}

int mf__net_socket_error(int fd)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        return mf_err_from_errno(errno);
    return err ? mf_err_from_errno(err) : 0;
}

bool mf__net_parse_port(const char *s, size_t n, uint16_t *port)
{
    unsigned long v = 0;
    if (n == 0 || n > 5)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (v == 0 || v > 65535)
        return false;
    *port = (uint16_t)v;
    return true;
}

int mf__net_parse_hostport(const char *s, size_t n,
                           char host[MF_DNS_MAX_HOST + 1], uint16_t *port)
{
    const char *name = s, *colon_port = NULL;
    size_t hlen = n;
    if (n && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return MF_EINVAL;
        name = s + 1;
        hlen = (size_t)(close - s - 1);
        if (close + 1 < s + n) {
            if (close[1] != ':')
                return MF_EINVAL;
            colon_port = close + 2;
        }
    } else {
        const char *colon = memchr(s, ':', n);
        if (colon) {
            hlen = (size_t)(colon - s);
            colon_port = colon + 1;
        }
    }
    if (hlen == 0 || hlen > MF_DNS_MAX_HOST)
        return MF_EINVAL;
    if (colon_port &&
        !mf__net_parse_port(colon_port, (size_t)(s + n - colon_port), port))
        return MF_EINVAL;
    memcpy(host, name, hlen);
    host[hlen] = 0;
    return 0;
}

static int mf__net_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)(c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

char *mf__net_pct_decode(const char *s, size_t n, bool nul_ok)
{
    char *out = mf_xmalloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            *o++ = s[i];
            continue;
        }
        int hi = i + 2 < n ? mf__net_hex(s[i + 1]) : -1;
        int lo = i + 2 < n ? mf__net_hex(s[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (!nul_ok && (hi | lo) == 0)) {
            mf_free(out);
            return NULL;
        }
        *o++ = (char)(hi * 16 + lo);
        i += 2;
    }
    *o = 0;
    return out;
}

bool mf__net_parse_decimal(const char *s, size_t n, uint64_t max, uint64_t *v)
{
    uint64_t x = 0;
    if (n == 0 || n > 10)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    return x <= max;
}
