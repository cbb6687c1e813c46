/*
 * http_response_parser.c — response heads, for the HTTP client: the status
 * line and the response body's framing (RFC 9112 §6.3). The contract is
 * mf_http_parse_response in moonflow/http_parser.h; the field lines and the
 * end of the head come from http_head_parser.c. A response is parsed with
 * the same strictness as a request and fails with 502, with one leniency:
 * empty lines (whole CRLFs) before the status line are skipped, as a server
 * skips them before a request line (RFC 9112 §2.2): some servers send one
 * after an interim 1xx answer. They count toward the head's size.
 */
#include <limits.h>

#include "http/http_parser_int.h"

/*
 * status-line = HTTP-version SP status-code SP [reason-phrase] CRLF (RFC 9112
 * §4). The SP before an empty reason may be missing, as some servers send it.
 * The shortest head, "HTTP/1.1 200\r\n\r\n", has 16 bytes, which bounds every
 * fixed index below. Returns the first field line, or NULL.
 */
static const char *mf__parse_status_line(const char *p, const char *end,
                                         mf_http_response_t *resp)
{
    if (end - p < 16 || mf__http_parse_version(p, &resp->minor_version) != 0 ||
        p[8] != ' ')
        return NULL;
    p += 9;
    if (!mf__is_digit(p[0]) || !mf__is_digit(p[1]) || !mf__is_digit(p[2]) ||
        p[0] == '0')
        return NULL;
    resp->status = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
    p += 3;
    if (*p == ' ')
        p++;
    else if (*p != '\r')
        return NULL;
    resp->reason = p;
    p = mf__skip_class(p, end, MF__C_VALUE, 0x20);
    if (p[0] != '\r' || p[1] != '\n')
        return NULL;
    resp->reason_len = (size_t)(p - resp->reason);
    return p + 2;
}

/*
 * Response body framing (RFC 9112 §6.3), rules in their order: no body for
 * HEAD, 1xx, 204 and 304; then Transfer-Encoding, which wins over
 * Content-Length (but the pair closes the connection: it may be response
 * splitting) and delimits the body only with a final "chunked", else the
 * body runs until close; then Content-Length; with neither, until close. A
 * bad Content-Length is a 502 whatever else is present.
 */
static int mf__response_body(mf_http_response_t *resp, const mf__fields_t *f,
                             bool head_request)
{
    int s = resp->status;
    resp->content_length = f->n_cl ? f->content_length : 0;
    if (f->cl_bad)
        return 502;
    if (f->n_te && (f->n_cl || resp->minor_version == 0))
        resp->keep_alive = false;
    if (head_request || s / 100 == 1 || s == 204 || s == 304)
        resp->body = MF_HTTP_BODY_NONE;
    else if (f->n_te && f->te_chunked && !f->te_misplaced && !f->te_bad)
        resp->body = MF_HTTP_BODY_CHUNKED;
    else if (!f->n_te && f->n_cl)
        resp->body =
            f->content_length ? MF_HTTP_BODY_LENGTH : MF_HTTP_BODY_NONE;
    else
        resp->body = MF_HTTP_BODY_UNTIL_CLOSE;
    if (resp->body == MF_HTTP_BODY_UNTIL_CLOSE)
        resp->keep_alive = false;
    return 0;
}

static int mf__response_error(mf_http_response_t *resp, size_t *scanned)
{
    resp->error_status = 502;
    if (scanned)
        *scanned = 0;
    return MF_HTTP_ERROR;
}

int mf_http_parse_response(const char *buf, size_t len,
                           mf_http_response_t *resp, bool head_request,
                           const mf_http_limits_t *limits, size_t *scanned)
{
    const mf_http_limits_t *lim = limits ? limits : &mf__http_default_limits;
    size_t window = len < lim->max_head_bytes ? len : lim->max_head_bytes;
    size_t start = 0, end = 0, count, cap = resp->num_headers;
    mf__fields_t f;
    if (cap > lim->max_headers)
        cap = lim->max_headers;
    while (window - start >= 2 && buf[start] == '\r' && buf[start + 1] == '\n')
        start += 2;

    switch (mf__http_find_head_end(buf, start, scanned ? *scanned : 0, window,
                                   &end)) {
    case MF__HEAD_BARE_LF:
        return mf__response_error(resp, scanned);
    case MF__HEAD_MORE:
        if (len > lim->max_head_bytes)
            return mf__response_error(resp, scanned);
        if (scanned)
            *scanned = window;
        return MF_HTTP_INCOMPLETE;
    }
    const char *p = mf__parse_status_line(buf + start, buf + end, resp);
    if (!p || end > INT_MAX ||
        mf__http_parse_fields(p, buf + end, resp->headers, cap, &count, &f,
                              502))
        return mf__response_error(resp, scanned);
    resp->keep_alive =
        resp->minor_version == 1 ? !f.close : f.keep_alive && !f.close;
    if (mf__response_body(resp, &f, head_request) != 0)
        return mf__response_error(resp, scanned);
    resp->num_headers = count;
    resp->error_status = 0;
    if (scanned)
        *scanned = 0;
    return (int)end;
}
