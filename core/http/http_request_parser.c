/*
 * http_request_parser.c — request heads: the request line, the four forms
 * of the request-target, the Host rules and the body's framing, and the
 * order of checks that keeps the answer independent of how the bytes were
 * split. The contract is mf_http_parse_request in moonflow/http_parser.h;
 * the field lines and the end of the head come from http_head_parser.c.
 * The request target is skipped eight bytes at a time, like field values.
 */
#include <limits.h>

#include "http/http_parser_int.h"

/* RFC 9112 §2.2: a server should ignore empty lines before a request line.
 * Only whole CRLFs are skipped; they count toward the head's size. */
static size_t mf__skip_empty_lines(const char *buf, size_t len)
{
    size_t i = 0;
    while (len - i >= 2 && buf[i] == '\r' && buf[i + 1] == '\n')
        i += 2;
    return i;
}

/*
 * Whether the request line at buf[start] is known to be longer than max
 * bytes (CRLF excluded). Called only once more than max bytes have arrived,
 * so the hot path never pays for it. Without an LF yet, a CR in the last
 * byte may still end a line of exactly max bytes.
 */
static bool mf__line_too_long(const char *buf, size_t start, size_t len,
                              size_t max)
{
    size_t avail = len - start;
    size_t look = avail - max >= 2 ? max + 2 : avail;
    const char *line = buf + start;
    const char *lf = memchr(line, '\n', look);
    size_t n;
    if (lf)
        n = (size_t)(lf - line) - (lf > line && lf[-1] == '\r');
    else
        n = look - (line[look - 1] == '\r');
    return n > max;
}

/* Splits path and query at the first '?'; query stays NULL without one. */
static void mf__split_query(mf_http_request_t *req, const char *path,
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
 * req->host. Userinfo ('@') fails, as RFC 9110 §4.2.4 advises. The path is
 * empty, not "/", when the target has none: it points into the buffer.
 */
static int mf__parse_absolute_form(mf_http_request_t *req)
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
    if (p == auth || !mf__all_of(auth, (size_t)(p - auth), MF__C_HOST))
        return 400;
    req->host = auth;
    req->host_len = (size_t)(p - auth);
    mf__split_query(req, p, end);
    return 0;
}

/* authority-form = uri-host ":" port (RFC 9112 §3.2.3), for CONNECT. The
 * port is found from the end, so an IPv6 literal keeps its colons. */
static int mf__parse_authority_form(mf_http_request_t *req)
{
    const char *t = req->target, *end = t + req->target_len, *p = end;
    while (p > t && mf__is_digit(p[-1]))
        p--;
    if (p == end || p - t < 2 || p[-1] != ':' ||
        !mf__all_of(t, (size_t)(p - 1 - t), MF__C_HOST))
        return 400;
    req->path = t;
    req->path_len = 0;
    return 0;
}

/* The four request-target forms (RFC 9112 §3.2), each only where allowed:
 * authority-form for CONNECT alone, "*" for OPTIONS alone. */
static int mf__parse_target(mf_http_request_t *req)
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
 * Sets *pp to the first field line. Returns 0 or an HTTP status.
 */
static int mf__parse_request_line(const char **pp, const char *end,
                                  mf_http_request_t *req)
{
    const char *p = *pp, *start = p;
    while (mf__is(*p, MF__C_TOKEN))
        p++;
    if (p == start || *p != ' ')
        return 400;
    req->method = start;
    req->method_len = (size_t)(p - start);
    start = ++p;
    p = mf__skip_class(p, end, MF__C_TARGET, 0x21);
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

/* Host rules of RFC 9112 §3.2: exactly one Host in HTTP/1.1, at most one in
 * 1.0, and a value that can only be an authority (no '/', '@', spaces...). */
static int mf__check_host(mf_http_request_t *req, const mf__fields_t *f)
{
    if (f->n_host > 1 || (f->n_host == 0 && req->minor_version == 1))
        return 400;
    if (f->n_host && !mf__all_of(f->host, f->host_len, MF__C_HOST))
        return 400;
    if (!req->host) { /* absolute-form already named the host */
        req->host = f->host;
        req->host_len = f->host_len;
    }
    return 0;
}

/*
 * Request body framing (RFC 9112 §6.1, §6.3). Transfer-Encoding with
 * Content-Length, or in HTTP/1.0 (as nginx does), is refused rather than
 * resolved: a proxy in front of us may have resolved it the other way.
 */
static int mf__request_body(mf_http_request_t *req, const mf__fields_t *f)
{
    req->content_length = 0;
    req->body = MF_HTTP_BODY_NONE;
    if (f->n_te) {
        if (f->n_cl || req->minor_version == 0 || f->te_bad ||
            f->te_misplaced || !f->te_chunked)
            return 400;
        if (f->te_unknown)
            return 501;
        req->body = MF_HTTP_BODY_CHUNKED;
        return 0;
    }
    if (f->cl_bad)
        return 400;
    if (f->n_cl && f->content_length > 0) {
        req->body = MF_HTTP_BODY_LENGTH;
        req->content_length = f->content_length;
    }
    return 0;
}

/* The head from its request line on; fills the derived fields too. */
static int mf__parse_request_head(const char *p, const char *end,
                                  mf_http_request_t *req,
                                  const mf_http_limits_t *lim)
{
    mf__fields_t f;
    size_t cap = req->num_headers, count;
    if (cap > lim->max_headers)
        cap = lim->max_headers;
    req->host = NULL;
    req->query = NULL;
    req->query_len = 0;
    int status = mf__parse_request_line(&p, end, req);
    if (status == 0)
        status =
            mf__http_parse_fields(p, end, req->headers, cap, &count, &f, 431);
    if (status == 0)
        status = mf__check_host(req, &f);
    if (status == 0)
        status = mf__request_body(req, &f);
    if (status != 0)
        return status;
    req->num_headers = count;
    req->keep_alive =
        req->minor_version == 1 ? !f.close : f.keep_alive && !f.close;
    /* RFC 9110 §10.1.1: ignore 100-continue from an HTTP/1.0 client. */
    req->expect_continue = f.expect_continue && req->minor_version == 1;
    req->upgrade = f.conn_upgrade && f.has_upgrade;
    return 0;
}

static int mf__request_error(mf_http_request_t *req, size_t *scanned,
                             int status)
{
    req->error_status = status;
    if (scanned)
        *scanned = 0;
    return MF_HTTP_ERROR;
}

/*
 * The answer must not depend on how the bytes were split: once a prefix gets
 * a final answer, every longer one gets the same. Hence the order of the
 * checks (the request line's length: 414; the blank line, with bare LFs:
 * 400; the head's length: 431; then the parse), and hence each check reads
 * at most one byte past max_head_bytes: beyond that, more bytes cannot turn
 * a 431 into a 414. On success or error `*scanned` goes back to 0, ready
 * for the next message.
 */
int mf_http_parse_request(const char *buf, size_t len, mf_http_request_t *req,
                          const mf_http_limits_t *limits, size_t *scanned)
{
    const mf_http_limits_t *lim = limits ? limits : &mf__http_default_limits;
    size_t window = len < lim->max_head_bytes ? len : lim->max_head_bytes;
    size_t seen = len > lim->max_head_bytes ? lim->max_head_bytes + 1 : len;
    size_t start = mf__skip_empty_lines(buf, window);
    size_t end = 0;

    if (seen - start > lim->max_request_line &&
        mf__line_too_long(buf, start, seen, lim->max_request_line))
        return mf__request_error(req, scanned, 414);
    int found = mf__http_find_head_end(buf, start, scanned ? *scanned : 0,
                                       window, &end);
    switch (found) {
    case MF__HEAD_BARE_LF:
        return mf__request_error(req, scanned, 400);
    case MF__HEAD_MORE:
        if (len > lim->max_head_bytes)
            return mf__request_error(req, scanned, 431);
        if (scanned)
            *scanned = window;
        return MF_HTTP_INCOMPLETE;
    }
    if (end > INT_MAX) /* the return value must hold the length */
        return mf__request_error(req, scanned, 431);
    int status = mf__parse_request_head(buf + start, buf + end, req, lim);
    if (status != 0)
        return mf__request_error(req, scanned, status);
    req->error_status = 0;
    if (scanned)
        *scanned = 0;
    return (int)end;
}
