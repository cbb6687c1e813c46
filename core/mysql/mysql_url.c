/*
 * mysql_url.c — the mysql:// URL (grammar in moonflow/mysql.h): user,
 * password and database %-decoded, a host name, IPv4 or [IPv6] with a
 * port, or a unix socket path, and the query keys charset,
 * connect_timeout, ssl and ca. Anything else makes the URL malformed.
 *
 * Ownership: the endpoint owns its strings (mf_xmalloc'd).
 */
#include <string.h>
#include <strings.h>

#include "mysql_int.h"
#include "net/net.h"

/* *out becomes the %-decoded copy of s[0..n) (a key given twice: the last
 * one wins); MF_EINVAL for a bad escape or an encoded NUL (the connector
 * takes C strings). */
static int mf__decoded(char **out, const char *s, size_t n)
{
    char *d = mf__net_pct_decode(s, n, false);
    if (!d)
        return MF_EINVAL;
    mf_free(*out);
    *out = d;
    return 0;
}

static const char *const mf__ssl_modes[] = {"disabled", "preferred", "required",
                                            "verify_ca", "verify_identity"};

static int mf__parse_ssl(mf_mysql_endpoint_t *ep, const char *v, size_t n)
{
    for (size_t i = 0; i < sizeof mf__ssl_modes / sizeof *mf__ssl_modes; i++)
        if (strlen(mf__ssl_modes[i]) == n &&
            strncasecmp(v, mf__ssl_modes[i], n) == 0) {
            ep->ssl = (mf_mysql_ssl_t)i;
            return 0;
        }
    return MF_EINVAL;
}

/* connect_timeout: 1 ms to an hour. */
static int mf__parse_timeout(mf_mysql_endpoint_t *ep, const char *v, size_t n)
{
    uint64_t ms;
    if (!mf__net_parse_decimal(v, n, 3600000, &ms) || ms == 0)
        return MF_EINVAL;
    ep->connect_timeout_ms = (uint32_t)ms;
    return 0;
}

/* One key=value of the query string. */
static int mf__parse_key(mf_mysql_endpoint_t *ep, const char *k, size_t kn,
                         const char *v, size_t vn)
{
#define MF__KEY(name) (kn == sizeof(name) - 1 && memcmp(k, name, kn) == 0)
    if (MF__KEY("charset"))
        return vn ? mf__decoded(&ep->charset, v, vn) : MF_EINVAL;
    if (MF__KEY("ca"))
        return vn ? mf__decoded(&ep->ca, v, vn) : MF_EINVAL;
    if (MF__KEY("ssl"))
        return mf__parse_ssl(ep, v, vn);
    if (MF__KEY("connect_timeout"))
        return mf__parse_timeout(ep, v, vn);
    return MF_EINVAL;
#undef MF__KEY
}

static int mf__parse_query(mf_mysql_endpoint_t *ep, const char *q)
{
    while (*q) {
        size_t n = strcspn(q, "&");
        const char *eq = memchr(q, '=', n);
        if (!eq)
            return MF_EINVAL;
        size_t kn = (size_t)(eq - q);
        if (mf__parse_key(ep, q, kn, eq + 1, n - kn - 1) < 0)
            return MF_EINVAL;
        q += n;
        if (*q == '&' && !*++q)
            return MF_EINVAL; /* a trailing '&' */
    }
    return 0;
}

/* user[:password] */
static int mf__parse_userinfo(mf_mysql_endpoint_t *ep, const char *s, size_t n)
{
    const char *colon = memchr(s, ':', n);
    size_t un = colon ? (size_t)(colon - s) : n;
    if (un == 0 || mf__decoded(&ep->user, s, un) < 0)
        return MF_EINVAL;
    return colon ? mf__decoded(&ep->password, colon + 1, n - un - 1) : 0;
}

/* unix:/path[:/db] */
static int mf__parse_socket(mf_mysql_endpoint_t *ep, const char *s, size_t n)
{
    const char *path = s + 5;
    size_t pn = n - 5;
    for (size_t i = 0; i + 1 < pn; i++)
        if (path[i] == ':' && path[i + 1] == '/') {
            if (i + 2 < pn && mf__decoded(&ep->db, path + i + 2, pn - i - 2))
                return MF_EINVAL;
            pn = i;
            break;
        }
    if (pn == 0 || path[0] != '/')
        return MF_EINVAL;
    return mf__decoded(&ep->socket_path, path, pn);
}

/* A name is letters, digits, '-', '.' and '_'; an address in brackets is
 * hex digits, ':' and '.' (IPv6, IPv4-mapped). Anything else could never
 * resolve, or would not mean one host. */
static bool mf__host_valid(const char *host, bool bracketed)
{
    for (const char *p = host; *p; p++) {
        char c = *p;
        bool hex =
            (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
        bool ok = bracketed ? hex || c == ':' || c == '.'
                            : hex || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
                                  c == '-' || c == '.' || c == '_';
        if (!ok)
            return false;
    }
    return true;
}

/* host[:port][/db] */
static int mf__parse_host(mf_mysql_endpoint_t *ep, const char *s, size_t n)
{
    size_t hn = n;
    const char *slash = memchr(s, '/', n);
    if (s[0] == '[') { /* a '/' is not inside [v6] anyway */
        const char *close = memchr(s, ']', n);
        if (!close)
            return MF_EINVAL;
        slash = memchr(close, '/', n - (size_t)(close - s));
    }
    if (slash) {
        hn = (size_t)(slash - s);
        if (n - hn > 1 && mf__decoded(&ep->db, slash + 1, n - hn - 1) < 0)
            return MF_EINVAL;
    }
    ep->port = 3306;
    if (hn == 0 || mf__net_parse_hostport(s, hn, ep->host, &ep->port) < 0 ||
        !mf__host_valid(ep->host, s[0] == '['))
        return MF_EINVAL;
    return 0;
}

static int mf__parse(mf_mysql_endpoint_t *ep, const char *url)
{
    if (strncasecmp(url, "mysql://", 8) != 0)
        return MF_EINVAL;
    const char *rest = url + 8;
    const char *q = strchr(rest, '?');
    size_t n = q ? (size_t)(q - rest) : strlen(rest);
    if (memchr(rest, '#', n))
        return MF_EINVAL;
    const char *at = NULL;
    for (size_t i = 0; i < n; i++)
        if (rest[i] == '@')
            at = rest + i; /* the last one: a password may hold '@' */
    if (at && mf__parse_userinfo(ep, rest, (size_t)(at - rest)) < 0)
        return MF_EINVAL;
    const char *hp = at ? at + 1 : rest;
    size_t hn = n - (size_t)(hp - rest);
    /* "unix:/..." is a socket; "unix:3306" a host named unix. */
    int rc = hn > 5 && strncasecmp(hp, "unix:/", 6) == 0
                 ? mf__parse_socket(ep, hp, hn)
                 : mf__parse_host(ep, hp, hn);
    if (rc == 0 && q)
        rc = mf__parse_query(ep, q + 1);
    return rc;
}

int mf__mysql_endpoint_parse(mf_mysql_endpoint_t *ep, const char *url)
{
    memset(ep, 0, sizeof(*ep));
    if (mf__parse(ep, url) < 0)
        return MF_EINVAL;
    if (!ep->charset)
        mf__decoded(&ep->charset, "utf8mb4", 7);
    if (ep->ca && ep->ssl < MF_MYSQL_SSL_VERIFY_CA)
        return MF_EINVAL; /* a CA that nothing would check */
    return 0;
}

void mf__mysql_endpoint_free(mf_mysql_endpoint_t *ep)
{
    mf_free(ep->socket_path);
    mf_free(ep->user);
    mf_free(ep->password);
    mf_free(ep->db);
    mf_free(ep->charset);
    mf_free(ep->ca);
    memset(ep, 0, sizeof(*ep));
}
