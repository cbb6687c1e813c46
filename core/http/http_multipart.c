/*
 * core/http/http_multipart.c — multipart/form-data bodies (RFC 7578 over
 * RFC 2046 §5.1): the boundary of a Content-Type, and the parts of a whole
 * body held in memory, each with its form name, file name, type and data
 * (moonflow/http_parser.h).
 *
 * Owns nothing: parts point into the caller's body. May call: libc, the
 * parser's helpers. Never reads past the body's length.
 */
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include <moonflow/http_parser.h>

static const char *mf__find(const char *hay, size_t n, const char *needle,
                            size_t m)
{
    return m <= n ? memmem(hay, n, needle, m) : NULL;
}

/* A Content-Type / Content-Disposition parameter's value: token or
 * quoted-string (its quotes dropped; no escapes are undone). */
static bool mf__param(const char *s, size_t n, const char *name,
                      const char **value, size_t *len)
{
    size_t nl = strlen(name);
    for (const char *p = s; p < s + n;) {
        const char *semi = memchr(p, ';', (size_t)(s + n - p));
        const char *q = p;
        while (q < s + n && (*q == ' ' || *q == '\t' || *q == ';'))
            q++;
        if ((size_t)(s + n - q) > nl && !strncasecmp(q, name, nl) &&
            q[nl] == '=') {
            const char *v = q + nl + 1, *end = s + n;
            if (v < end && *v == '"') {
                const char *close = memchr(v + 1, '"', (size_t)(end - v - 1));
                if (!close)
                    return false;
                *value = v + 1;
                *len = (size_t)(close - v - 1);
                return true;
            }
            const char *stop = v;
            while (stop < end && *stop != ';' && *stop != ' ' && *stop != '\t')
                stop++;
            *value = v;
            *len = (size_t)(stop - v);
            return *len > 0;
        }
        if (!semi)
            break;
        p = semi + 1;
    }
    return false;
}

int mf_http_multipart_boundary(const char *type, size_t n, const char **b,
                               size_t *len)
{
    static const char form[] = "multipart/form-data";
    if (n < sizeof form - 1 || strncasecmp(type, form, sizeof form - 1))
        return -1;
    if (!mf__param(type, n, "boundary", b, len) || *len == 0 || *len > 70)
        return -1;
    return 0;
}

void mf_http_multipart_init(mf_http_multipart_t *mp, const char *body, size_t n,
                            const char *boundary, size_t blen)
{
    memset(mp, 0, sizeof *mp);
    mp->pos = body;
    mp->end = body + n;
    mp->boundary = boundary;
    mp->blen = blen;
}

/* Reads one part's header lines (up to the empty line); 0 or -1. */
static int mf__part_headers(const char *h, const char *end,
                            mf_http_part_t *part)
{
    while (h < end) {
        const char *eol = mf__find(h, (size_t)(end - h), "\r\n", 2);
        const char *line_end = eol ? eol : end;
        const char *colon = memchr(h, ':', (size_t)(line_end - h));
        if (!colon)
            return -1;
        const char *v = colon + 1;
        while (v < line_end && (*v == ' ' || *v == '\t'))
            v++;
        size_t name_len = (size_t)(colon - h), vlen = (size_t)(line_end - v);
        if (name_len == 19 && !strncasecmp(h, "Content-Disposition", 19)) {
            if (vlen < 9 || strncasecmp(v, "form-data", 9) ||
                !mf__param(v, vlen, "name", &part->name, &part->name_len))
                return -1;
            if (!mf__param(v, vlen, "filename", &part->filename,
                           &part->filename_len))
                part->filename = NULL;
        } else if (name_len == 12 && !strncasecmp(h, "Content-Type", 12)) {
            part->type = v;
            part->type_len = vlen;
        }
        h = eol ? eol + 2 : end;
    }
    return part->name ? 0 : -1;
}

/* Whether a delimiter ends at p: "--" (the last) or optional transport
 * padding and CRLF follow it (RFC 2046 §5.1.1); a look-alike inside data
 * does not. */
static bool mf__delimiter_ends(const char *p, const char *end)
{
    if (end - p >= 2 && !memcmp(p, "--", 2))
        return true;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return end - p >= 2 && !memcmp(p, "\r\n", 2);
}

/* The next whole delimiter in [p, end), or NULL. */
static const char *mf__next_delimiter(const char *p, const char *end,
                                      const char *delim, size_t dlen)
{
    while ((p = mf__find(p, (size_t)(end - p), delim, dlen))) {
        if (mf__delimiter_ends(p + dlen, end))
            return p;
        p++;
    }
    return NULL;
}

int mf_http_multipart_next(mf_http_multipart_t *mp, mf_http_part_t *part)
{
    char delim[2 + 70 + 2];
    if (mp->done)
        return 0;
    /* "--boundary" at the body's start or after CRLF */
    memcpy(delim, "\r\n--", 4);
    memcpy(delim + 4, mp->boundary, mp->blen);
    size_t dlen = 4 + mp->blen;
    const char *p = mp->pos;
    if (!mp->started) {
        if ((size_t)(mp->end - p) >= dlen - 2 &&
            !memcmp(p, delim + 2, dlen - 2))
            p += dlen - 2;
        else if ((p = mf__find(p, (size_t)(mp->end - p), delim, dlen)))
            p += dlen;
        else
            return -1;
        mp->started = true;
    }
    if ((size_t)(mp->end - p) >= 2 && !memcmp(p, "--", 2)) {
        mp->done = true; /* the closing delimiter: the rest is epilogue */
        return 0;
    }
    while (p < mp->end && (*p == ' ' || *p == '\t'))
        p++; /* transport padding */
    if ((size_t)(mp->end - p) < 2 || memcmp(p, "\r\n", 2))
        return -1;
    p += 2;
    /* a part without header lines has no Content-Disposition: refused */
    const char *blank = mf__find(p, (size_t)(mp->end - p), "\r\n\r\n", 4);
    if (!blank || blank == p)
        return -1;
    memset(part, 0, sizeof *part);
    if (mf__part_headers(p, blank, part) < 0)
        return -1;
    const char *data = blank + 4;
    const char *next = mf__next_delimiter(data, mp->end, delim, dlen);
    if (!next)
        return -1; /* a part that never ends: the body was cut */
    part->data = data;
    part->data_len = (size_t)(next - data);
    mp->pos = next + dlen;
    mp->parts++;
    return 1;
}
