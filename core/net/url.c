/*
 * url.c — what is wrong with a client's URL (moonflow/url.h): the scheme,
 * then the host and port after the user info, which is skipped unread.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "moonflow/dns.h"
#include "moonflow/url.h"
#include "net.h"

/* "http:// or https://" into out. */
static void mf__url_schemes_text(const char *const *schemes, char *out,
                                 size_t size)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; schemes[i] && len < size; i++) {
        const char *sep = i == 0 ? "" : schemes[i + 1] ? ", " : " or ";
        int n = snprintf(out + len, size - len, "%s%s://", sep, schemes[i]);
        if (n < 0)
            break;
        len += (size_t)n;
    }
}

static bool mf__url_scheme_known(const char *url, size_t n,
                                 const char *const *schemes)
{
    for (size_t i = 0; schemes[i]; i++)
        if (strlen(schemes[i]) == n && strncasecmp(url, schemes[i], n) == 0)
            return true;
    return false;
}

/* Whether s[0..n) is a port: 1 to 65535 in decimal. */
static bool mf__url_port_ok(const char *s, size_t n)
{
    uint16_t port;
    return mf__net_parse_port(s, n, &port);
}

/* The fault of the authority's host[:port] hp[0..n), written into what;
 * false when there is none. */
static bool mf__url_hostport_problem(const char *hp, size_t n, char *what,
                                     size_t size)
{
    const char *end = hp + n, *port = NULL;
    size_t hlen;
    if (n && hp[0] == '[') {
        const char *close = memchr(hp, ']', n);
        if (!close) {
            snprintf(what, size, "an IPv6 address without its ']'");
            return true;
        }
        hlen = (size_t)(close - hp - 1);
        if (close + 1 < end && close[1] != ':') {
            snprintf(what, size, "something other than ':port' after ']'");
            return true;
        }
        port = close + 1 < end ? close + 2 : NULL;
    } else {
        const char *colon = memchr(hp, ':', n);
        hlen = colon ? (size_t)(colon - hp) : n;
        port = colon ? colon + 1 : NULL;
    }
    if (hlen == 0) {
        snprintf(what, size, "no host");
    } else if (hlen > MF_DNS_MAX_HOST) {
        snprintf(what, size, "a host name longer than %d bytes",
                 MF_DNS_MAX_HOST);
    } else if (port && !mf__url_port_ok(port, (size_t)(end - port))) {
        snprintf(what, size, "port '%.*s' (1 to 65535 expected)",
                 (int)(end - port > 16 ? 16 : end - port), port);
    } else {
        return false;
    }
    return true;
}

/* url as it may be shown, into out: a password in the user info becomes
 * "***", and a long URL is cut ("..."). */
static void mf__url_masked(const char *url, char *out, size_t size)
{
    enum { SHOWN = 96 };
    const char *auth = strstr(url, "://");
    size_t alen = auth ? strcspn(auth + 3, "/?#") : 0;
    const char *at = NULL;
    for (size_t i = 0; auth && i < alen; i++)
        if (auth[3 + i] == '@')
            at = auth + 3 + i;
    const char *colon =
        at ? memchr(auth + 3, ':', (size_t)(at - (auth + 3))) : NULL;
    char whole[SHOWN + 8];
    if (colon)
        snprintf(whole, sizeof whole, "%.*s***%s", (int)(colon + 1 - url), url,
                 at);
    else
        snprintf(whole, sizeof whole, "%s", url);
    if (strlen(whole) > SHOWN)
        memcpy(whole + SHOWN - 3, "...", 4);
    snprintf(out, size, "%s", whole);
}

const char *mf_url_problem(const char *url, const char *const *schemes,
                           const char *otherwise, char *buf, size_t size)
{
    char what[160], expected[96], shown[104];
    mf__url_masked(url, shown, sizeof shown);
    mf__url_schemes_text(schemes, expected, sizeof expected);
    const char *sep = strstr(url, "://");
    if (!sep) {
        snprintf(what, sizeof what, "no scheme (%s expected)", expected);
    } else if (!mf__url_scheme_known(url, (size_t)(sep - url), schemes)) {
        size_t n = (size_t)(sep - url);
        snprintf(what, sizeof what, "scheme '%.*s' (%s expected)",
                 (int)(n > 16 ? 16 : n), url, expected);
    } else {
        const char *auth = sep + 3;
        size_t alen = strcspn(auth, "/?#");
        const char *hp = auth;
        for (size_t i = 0; i < alen; i++)
            if (auth[i] == '@')
                hp = auth + i + 1; /* the last one: a password may hold '@' */
        bool socket = strncasecmp(hp, "unix:/", 6) == 0; /* MySQL's */
        if (socket || !mf__url_hostport_problem(hp, (size_t)(auth + alen - hp),
                                                what, sizeof what))
            snprintf(what, sizeof what, "%s",
                     otherwise ? otherwise : "a part the client does not take");
    }
    snprintf(buf, size, "malformed URL '%s': %s", shown, what);
    return buf;
}
