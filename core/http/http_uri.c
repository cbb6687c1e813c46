/*
 * http_uri.c — the pieces of a URI that requests carry and handlers read:
 * the authority of a Host field or a request target (RFC 3986 §3.2, as
 * RFC 9110 §4.2 restricts it), the pairs of a query string and %-decoding.
 * The contracts are in moonflow/http_parser.h. Pure functions over the
 * caller's bytes, like the rest of the parser; the request parser validates
 * Host and target authorities here.
 */
#include <arpa/inet.h>

#include "http/http_chars.h"
#include "http/http_uri.h"
#include "moonflow/http_parser.h"

/* ---- authority ----------------------------------------------------------- */

/* reg-name = *( unreserved / pct-encoded / sub-delims ): the first byte
 * after it, or NULL at a '%' without two HEXDIG. */
static const char *mf__skip_reg_name(const char *p, const char *end)
{
    while (p < end) {
        if (mf__is(*p, MF__C_HOST))
            p++;
        else if (*p != '%')
            break;
        else if (end - p >= 3 && mf__is(p[1], MF__C_HEX) &&
                 mf__is(p[2], MF__C_HEX))
            p += 3;
        else
            return NULL;
    }
    return p;
}

/* IPvFuture = "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" ), at p
 * (its 'v') up to end. */
static bool mf__ipvfuture(const char *p, const char *end)
{
    const char *hex = ++p;
    while (p < end && mf__is(*p, MF__C_HEX))
        p++;
    if (p == hex || p == end || *p != '.')
        return false;
    const char *rest = ++p;
    while (p < end && (mf__is(*p, MF__C_HOST) || *p == ':'))
        p++;
    return p == end && p > rest;
}

/* What is inside the brackets of IP-literal = "[" ( IPv6address /
 * IPvFuture ) "]". An IPv6 address is checked by inet_pton once its bytes
 * are known to be HEXDIG, ':' and '.' only (no NUL ends it early). Zone
 * identifiers (RFC 6874) are refused: they mean nothing to a server. */
static bool mf__ip_literal(const char *p, const char *end)
{
    char text[INET6_ADDRSTRLEN];
    struct in6_addr addr;
    size_t n = (size_t)(end - p);
    if (n && (*p == 'v' || *p == 'V'))
        return mf__ipvfuture(p, end);
    if (n == 0 || n >= sizeof text)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!mf__is(p[i], MF__C_HEX) && p[i] != ':' && p[i] != '.')
            return false;
    memcpy(text, p, n);
    text[n] = 0;
    return inet_pton(AF_INET6, text, &addr) == 1;
}

/* port = *DIGIT (RFC 3986 §3.2.3), here at most 65535; -1 when empty. */
static bool mf__port(const char *p, const char *end, int *port)
{
    unsigned v = 0;
    *port = -1;
    if (p == end)
        return true;
    for (; p < end; p++) {
        if (!mf__is_digit(*p))
            return false;
        v = v * 10 + (unsigned)(*p - '0');
        if (v > 65535)
            return false;
    }
    *port = (int)v;
    return true;
}

int mf_http_parse_authority(const char *s, size_t len, mf_http_authority_t *out)
{
    const char *end = s + len, *p;
    if (len && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (!close || !mf__ip_literal(s + 1, close))
            return -1;
        p = close + 1;
    } else {
        p = mf__skip_reg_name(s, end);
        if (!p || p == s) /* RFC 9110 §4.2.1: never an empty host */
            return -1;
    }
    out->host = s;
    out->host_len = (size_t)(p - s);
    if (p == end) {
        out->port = -1;
        return 0;
    }
    return *p == ':' && mf__port(p + 1, end, &out->port) ? 0 : -1;
}

bool mf__http_authority_valid(const char *s, size_t n)
{
    mf_http_authority_t a;
    return mf_http_parse_authority(s, n, &a) == 0;
}

/* ---- query strings ------------------------------------------------------- */

bool mf_http_query_next(const char **pos, const char *end,
                        mf_http_query_pair_t *pair)
{
    const char *p = *pos;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        const char *start = p;
        p = amp ? amp + 1 : end;
        if (stop == start)
            continue; /* "a&&b": nothing between the '&'s */
        const char *eq = memchr(start, '=', (size_t)(stop - start));
        pair->key = start;
        pair->key_len = (size_t)((eq ? eq : stop) - start);
        pair->value = eq ? eq + 1 : NULL;
        pair->value_len = eq ? (size_t)(stop - eq - 1) : 0;
        *pos = p;
        return true;
    }
    *pos = end;
    return false;
}

/* ---- %-decoding ---------------------------------------------------------- */

ssize_t mf_http_url_decode(char *s, size_t len, bool plus_is_space)
{
    size_t out = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '%') {
            if (len - i < 3 || !mf__is(s[i + 1], MF__C_HEX) ||
                !mf__is(s[i + 2], MF__C_HEX))
                return -1;
            c = (char)(mf__hex_value(s[i + 1]) << 4 | mf__hex_value(s[i + 2]));
            i += 2;
        } else if (c == '+' && plus_is_space) {
            c = ' ';
        }
        s[out++] = c;
    }
    return (ssize_t)out;
}
