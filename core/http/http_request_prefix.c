/*
 * http_request_prefix.c — judging a request head while it arrives, so that
 * a bad one is answered at its first bad byte instead of at its blank line
 * or the header timeout. The contract is mf__http_request_prefix in
 * http_parser_int.h; mf_http_parse_request (http_request_parser.c) calls it
 * for every incomplete head and for a complete one that failed to parse.
 *
 * It keeps no state between calls: bytes before `from` were judged by an
 * earlier call, and where byte `from` stands (which line, which part of
 * it) follows from them: the last LF before it starts its line, the SPs of
 * the request line or the colon of a field line tell the part. Each byte is
 * judged once, so a head sent a byte at a time costs linear time, plus a
 * memrchr/memchr over the current line per call. At the end of a line the
 * same functions as the full parse judge it whole: the request line, and a
 * framing field (Host, Content-Length, Transfer-Encoding) with the framing
 * fields before it, re-read from the buffer when one such line ends.
 *
 * Every fault found here is one the full parse also fails on, so a prefix
 * never gets an answer that a longer input would not.
 */
#include "http/http_request_line.h"

/* The request line judged whole when its line ends: the full parse's own
 * code (http_request_line.h), out of line here (two callers, cold). */
static __attribute__((noinline)) int
mf__prefix_parse_line(const char **pp, const char *end, mf_http_request_t *req)
{
    return mf__parse_request_line(pp, end, req);
}

/* A line that ends the head: no fault, and nothing more to judge. */
#define MF__PREFIX_END 1

typedef struct mf__prefix {
    const char *buf;
    size_t start; /* the request line */
    const mf_http_limits_t *lim;
    mf_http_request_t req; /* the request line, for the framing checks */
    mf__fields_t fields;   /* framing fields of the lines judged so far */
    bool have_fields;
} mf__prefix_t;

/* Whether byte p makes the request line starting at line longer than max
 * bytes (CRLF excluded). A CR or LF only ends the line, so it counts the
 * bytes before it; any other byte is one more. */
static bool mf__line_over(const char *line, const char *p, size_t max)
{
    size_t j = (size_t)(p - line);
    if (j < max)
        return false;
    if (*p == '\n' && p > line && p[-1] == '\r')
        return j - 1 > max;
    return *p == '\r' || *p == '\n' ? j > max : true;
}

/* Whether byte p, not a separating SP, may stand where it is in the request
 * line: the method (a token), the target, or "HTTP/" DIGIT "." DIGIT CR. A
 * CR as the very first byte may still begin an empty line to skip. */
static bool mf__request_line_byte(const char *line, const char *sp1,
                                  const char *sp2, const char *p)
{
    static const char version[] = "HTTP/0.0\r";
    if (!sp1)
        return mf__is(*p, MF__C_TOKEN) || (*p == '\r' && p == line);
    if (!sp2)
        return mf__is(*p, MF__C_TARGET);
    size_t k = (size_t)(p - sp2 - 1);
    if (k >= sizeof version - 1)
        return false;
    return version[k] == '0' ? mf__is_digit(*p) : *p == version[k];
}

/* The request line has ended before `next`: judged whole, as the full
 * parse will (its version, its target's form). */
static int mf__prefix_request_line_end(mf__prefix_t *px, const char *next)
{
    const char *p = px->buf + px->start;
    memset(&px->req, 0, sizeof px->req);
    return mf__prefix_parse_line(&p, next, &px->req);
}

/* Bytes [i, stop) of the request line; stop is at most one past its LF. */
static int mf__prefix_request_line(mf__prefix_t *px, size_t i, size_t stop)
{
    const char *b = px->buf, *line = b + px->start;
    const char *sp1 = memchr(line, ' ', (size_t)(b + i - line));
    const char *sp2 =
        sp1 ? memchr(sp1 + 1, ' ', (size_t)(b + i - sp1 - 1)) : NULL;
    for (const char *p = b + i; p < b + stop; p++) {
        if (mf__line_over(line, p, px->lim->max_request_line))
            return 414;
        if (p > line && p[-1] == '\r') /* only the CR of the version */
            return *p == '\n' ? mf__prefix_request_line_end(px, p + 1) : 400;
        if (*p == ' ' && !sp2) {
            if (p == line || (sp1 && p == sp1 + 1)) /* no method or target */
                return 400;
            if (sp1)
                sp2 = p;
            else
                sp1 = p;
            continue;
        }
        if (!mf__request_line_byte(line, sp1, sp2, p))
            return 400;
    }
    return 0;
}

/* The framing fields of the field lines before `line`, with the request
 * line's version: read again from the buffer (they were judged already),
 * once per call and only when a framing field ends. */
static void mf__prefix_fields_before(mf__prefix_t *px, const char *line)
{
    const char *p = px->buf + px->start;
    const char *lf = memchr(p, '\n', (size_t)(line - p));
    mf_http_header_t h;
    memset(&px->req, 0, sizeof px->req);
    memset(&px->fields, 0, sizeof px->fields);
    px->have_fields = true;
    if (!lf || mf__prefix_parse_line(&p, lf + 1, &px->req) != 0)
        return; /* cannot be: the line was judged good */
    while (p && p < line) {
        p = mf__http_parse_field(p, line, &h);
        if (p)
            mf__http_note_field(&px->fields, &h);
    }
}

/* A field line [line, next) has ended: the blank line ends the head; a
 * framing field is judged with those before it. */
static int mf__prefix_field_end(mf__prefix_t *px, const char *line,
                                const char *next)
{
    mf_http_header_t h;
    if (next - line == 2)
        return MF__PREFIX_END;
    const char *colon = memchr(line, ':', (size_t)(next - line));
    size_t n = (size_t)(colon - line);
    if (!MF__IS(line, n, "host") && !MF__IS(line, n, "content-length") &&
        !MF__IS(line, n, "transfer-encoding"))
        return 0;
    if (!px->have_fields)
        mf__prefix_fields_before(px, line);
    if (mf__http_parse_field(line, next, &h))
        mf__http_note_field(&px->fields, &h);
    return mf__http_fields_refused(&px->fields, px->req.minor_version) ? 400
                                                                       : 0;
}

/* Bytes [i, stop) of the field line at `line` (or of the blank line):
 * field-name ":" field-value CRLF, the name a token, the value
 * field-content; nothing may start the line but a token byte or the CR of
 * the blank line. */
static int mf__prefix_field_line(mf__prefix_t *px, size_t line, size_t i,
                                 size_t stop)
{
    const char *b = px->buf, *l = b + line, *end = b + stop;
    bool in_value = memchr(l, ':', i - line) != NULL;
    for (const char *p = b + i; p < end; p++) {
        if (p > l && p[-1] == '\r')
            return *p == '\n' ? mf__prefix_field_end(px, l, p + 1) : 400;
        if (p == l) { /* SP/HTAB (obs-fold), ':' (no name), a bare LF ... */
            if (*p != '\r' && !mf__is(*p, MF__C_TOKEN))
                return 400;
        } else if (!in_value) {
            in_value = *p == ':';
            if (!in_value && !mf__is(*p, MF__C_TOKEN))
                return 400;
        } else {
            p = mf__skip_class(p, end, MF__C_VALUE, 0x20);
            if (p == end)
                break;
            if (*p != '\r') /* a CTL or DEL, or a bare LF */
                return 400;
        }
    }
    return 0;
}

int mf__http_request_prefix(const char *buf, size_t start, size_t from,
                            size_t to, const mf_http_limits_t *lim)
{
    mf__prefix_t px = {.buf = buf, .start = start, .lim = lim};
    size_t limit = to < lim->max_head_bytes ? to : lim->max_head_bytes;
    size_t i = from < start ? start : from > limit ? limit : from;
    const char *lf = memrchr(buf + start, '\n', i - start);
    size_t line = lf ? (size_t)(lf - buf) + 1 : start;
    while (i < limit) {
        const char *nl = memchr(buf + i, '\n', limit - i);
        size_t stop = nl ? (size_t)(nl - buf) + 1 : limit;
        int status = line == start ? mf__prefix_request_line(&px, i, stop)
                                   : mf__prefix_field_line(&px, line, i, stop);
        if (status)
            return status == MF__PREFIX_END ? 0 : status;
        i = stop;
        if (nl)
            line = stop;
    }
    if (to <= limit)
        return 0;
    /* The byte past the head's limit: 431, unless it is also the one that
     * makes the request line too long (414 is the more precise answer). */
    if (line == start &&
        mf__line_over(buf + start, buf + limit, lim->max_request_line))
        return 414;
    return 431;
}
