/*
 * http_request_line.h — the request line of a request head: the method,
 * the four forms of the request-target and the version. Inline, shared by
 * the one-pass parse of a complete head (http_request_parser.c, where it
 * stays inlined on the hot path) and the judge of a head still arriving
 * (http_request_prefix.c). Internal to the parser; authorities come from
 * http_uri.c through http_parser_int.h. The request target is skipped
 * eight bytes at a time, like field values.
 */
#ifndef MF_HTTP_REQUEST_LINE_H
#define MF_HTTP_REQUEST_LINE_H

#include "http/http_parser_int.h"

/* Splits path and query at the first '?'; query stays NULL without one. */
static inline void mf__split_query(mf_http_request_t *req, const char *path,
                                   const char *end)
{
    const char *q = memchr(path, '?', (size_t)(end - path));
    req->path = path;
    req->path_len = (size_t)((q ? q : end) - path);
    if (q) {
        req->query = q + 1;
        req->query_len = (size_t)(end - q - 1);
    }
}

/*
 * absolute-form = scheme "://" authority path-abempty ["?" query] (RFC 9112
 * §3.2.2). The authority, not the Host field, names the host, so it becomes
 * req->host. Userinfo ('@') fails, as RFC 9110 §4.2.4 advises, and so does
 * any authority that is not host[:port]. An empty path is "/" (RFC 9110
 * §4.2.3 makes them equivalent), a literal outside the buffer.
 */
static inline int mf__parse_absolute_form(mf_http_request_t *req)
{
    const char *p = req->target, *end = p + req->target_len;
    char first = mf__lower(*p);
    if (first < 'a' || first > 'z')
        return 400;
    while (p < end && mf__is(*p, MF__C_SCHEME))
        p++;
    if (end - p < 3 || memcmp(p, "://", 3) != 0)
        return 400;
    const char *auth = p += 3;
    while (p < end && *p != '/' && *p != '?')
        p++;
    if (!mf__http_is_authority(auth, (size_t)(p - auth)))
        return 400;
    req->host = auth;
    req->host_len = (size_t)(p - auth);
    mf__split_query(req, p, end);
    if (req->path_len == 0) {
        req->path = "/";
        req->path_len = 1;
    }
    return 0;
}

/* authority-form = uri-host ":" port (RFC 9112 §3.2.3), for CONNECT: the
 * port is required. */
static inline int mf__parse_authority_form(mf_http_request_t *req)
{
    mf_http_authority_t a;
    if (mf_http_parse_authority(req->target, req->target_len, &a) != 0 ||
        a.port < 0)
        return 400;
    req->path = req->target;
    req->path_len = 0;
    return 0;
}

/* The four request-target forms (RFC 9112 §3.2), each only where allowed:
 * authority-form for CONNECT alone, "*" for OPTIONS alone. */
static MF__HOT_INLINE int mf__parse_target(mf_http_request_t *req)
{
    const char *t = req->target, *m = req->method;
    size_t n = req->target_len, ml = req->method_len;
    /* Methods are case-sensitive (RFC 9110 §9.1). */
    if (ml == 7 && memcmp(m, "CONNECT", 7) == 0)
        return mf__parse_authority_form(req);
    if (t[0] == '/') {
        mf__split_query(req, t, t + n);
        return 0;
    }
    if (t[0] == '*') {
        if (n != 1 || ml != 7 || memcmp(m, "OPTIONS", 7) != 0)
            return 400;
        req->path = t;
        req->path_len = 1;
        return 0;
    }
    return mf__parse_absolute_form(req);
}

/*
 * request-line = method SP request-target SP HTTP-version CRLF (RFC 9112
 * §3). Exactly one SP between the parts: every real client sends that, and
 * the whitespace variants RFC 9112 tolerates are ambiguity we do not need.
 * A '#' stops the target: a fragment is never part of one (RFC 9112 §3.2).
 */
static MF__HOT_INLINE int
mf__parse_request_line(const char **pp, const char *end, mf_http_request_t *req)
{
    const char *p = *pp, *start = p;
    while (mf__is(*p, MF__C_TOKEN))
        p++;
    if (p == start || *p != ' ')
        return 400;
    req->method = start;
    req->method_len = (size_t)(p - start);
    start = ++p;
    p = mf__skip_class_but(p, end, MF__C_TARGET, 0x21, '#');
    if (p == start || *p != ' ')
        return 400;
    req->target = start;
    req->target_len = (size_t)(p - start);
    p++;
    if (end - p < 10 || p[8] != '\r' || p[9] != '\n')
        return 400;
    int status = mf__http_parse_version(p, &req->minor_version);
    if (status != 0)
        return status;
    *pp = p + 10;
    return mf__parse_target(req);
}

#endif /* MF_HTTP_REQUEST_LINE_H */
