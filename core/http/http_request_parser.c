/*
 * http_request_parser.c — request heads: the request line, the four forms
 * of the request-target, the Host rules and the body's framing, and the
 * order of checks that keeps the answer independent of how the bytes were
 * split. The contract is mf_http_parse_request in moonflow/http_parser.h;
 * the request line comes from http_request_line.h (inline here), the field
 * lines and the end of the head from http_head_parser.c, and the judgement
 * of a head still arriving from http_request_prefix.c.
 */
#include <limits.h>

#include "http/http_request_line.h"

/* RFC 9112 §2.2: a server should ignore empty lines before a request line.
 * Only whole CRLFs are skipped; they count toward the head's size. */
static size_t mf__skip_empty_lines(const char *buf, size_t len)
{
    size_t i = 0;
    while (len - i >= 2 && buf[i] == '\r' && buf[i + 1] == '\n')
        i += 2;
    return i;
}

/* Host rules of RFC 9112 §3.2: exactly one Host in HTTP/1.1, at most one in
 * 1.0, and a value that is empty or a valid authority, even when an
 * absolute-form target names the host instead. */
static int mf__check_host(mf_http_request_t *req, const mf__fields_t *f)
{
    if (f->n_host > 1 || (f->n_host == 0 && req->minor_version == 1) ||
        f->host_bad)
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
 * resolved: a proxy in front of us may have resolved it the other way. A
 * well-framed body in a coding we do not undo is 501 (RFC 9112 §6.1).
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
    const char *line = p;
    size_t cap = req->num_headers, count;
    if (cap > lim->max_headers)
        cap = lim->max_headers;
    req->host = NULL;
    req->query = NULL;
    req->query_len = 0;
    req->http2 = false;
    int status = mf__parse_request_line(&p, end, req);
    if (status == 0 && (size_t)(p - 2 - line) > lim->max_request_line)
        status = 414;
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
 * a final answer, every longer one gets the same. So the first byte that
 * rules the head out decides it, and both paths agree on which byte that
 * is. A complete head (the common case) is parsed in one pass; only when
 * that fails is it judged again byte by byte (http_request_prefix.c), and
 * that judgement wins, unless it finds nothing: then the fault is one only
 * the whole head shows (a missing Host, 501, too many fields). An
 * incomplete head is judged from where the last call stopped, up to one
 * byte past max_head_bytes (where 431, or 414 at the same byte, is due).
 * On success or error `*scanned` goes back to 0, ready for the next
 * message.
 */
int mf_http_parse_request(const char *buf, size_t len, mf_http_request_t *req,
                          const mf_http_limits_t *limits, size_t *scanned)
{
    const mf_http_limits_t *lim = limits ? limits : &mf__http_default_limits;
    size_t window = len < lim->max_head_bytes ? len : lim->max_head_bytes;
    size_t seen = len > lim->max_head_bytes ? lim->max_head_bytes + 1 : len;
    size_t start = mf__skip_empty_lines(buf, window);
    size_t from = scanned ? *scanned : 0, end = 0;
    int found = mf__http_find_head_end(buf, start, from, window, &end);
    int status;

    if (found == MF__HEAD_DONE) {
        if (end > INT_MAX) /* the return value must hold the length */
            return mf__request_error(req, scanned, 431);
        status = mf__parse_request_head(buf + start, buf + end, req, lim);
        if (status == 0) {
            req->error_status = 0;
            if (scanned)
                *scanned = 0;
            return (int)end;
        }
        int first = mf__http_request_prefix(buf, start, start, end, lim);
        return mf__request_error(req, scanned, first ? first : status);
    }
    status = mf__http_request_prefix(buf, start, from, seen, lim);
    /* Both are found by the judge already; never INCOMPLETE after them. */
    if (status == 0 && found == MF__HEAD_BARE_LF)
        status = 400;
    if (status == 0 && len > lim->max_head_bytes)
        status = 431;
    if (status != 0)
        return mf__request_error(req, scanned, status);
    if (scanned)
        *scanned = window;
    return MF_HTTP_INCOMPLETE;
}
