/*
 * http_head_parser.c — what request and response heads share: finding the
 * blank line that ends a head, the HTTP version, and the field lines, with
 * the framing fields (Content-Length, Transfer-Encoding, Connection, Host,
 * Expect, Upgrade) noted during the same pass so that callers never scan
 * the header array again. Declared in http_parser_int.h; called by
 * http_request_parser.c and http_response_parser.c.
 *
 * A server calls the parser each time bytes arrive, so the most common call
 * is "not complete yet", and that call must be cheap: it only looks for the
 * blank line that ends the head, with one memchr per LF from where the
 * previous call stopped (`*scanned`), and rejects a bare LF on the spot.
 * Once the blank line is in, a single pass parses the head. Every loop of
 * that pass stops at a byte outside the class it accepts, and the head is
 * known to end in CRLF CRLF, whose CR no class accepts: the loops need no
 * length check of their own. Field values are skipped eight bytes at a time
 * (SWAR); the class table decides the rest.
 *
 * Strictness follows RFC 9112 wherever leniency has served request
 * smuggling or response splitting; moonflow/http_parser.h lists the cases.
 */
#include "http/http_parser_int.h"

const mf_http_limits_t mf__http_default_limits = MF_HTTP_LIMITS_DEFAULT;

/* ---- numbers and lists --------------------------------------------------- */

/* 1*DIGIT at p into *out; NULL when there is no digit or it overflows. */
static const char *mf__parse_decimal(const char *p, const char *end,
                                     uint64_t *out)
{
    const char *start = p;
    uint64_t v = 0;
    for (; p < end && mf__is_digit(*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return NULL;
        v = v * 10 + d;
    }
    if (p == start)
        return NULL;
    *out = v;
    return p;
}

static const char *mf__skip_ows(const char *p, const char *end)
{
    while (p < end && mf__is_ows(*p))
        p++;
    return p;
}

/* A field value read as a comma-separated list (RFC 9110 §5.6.1). */
typedef struct mf__list {
    const char *p, *end;
} mf__list_t;

/* Next non-empty element, OWS trimmed (recipients must accept empty
 * elements); false after the last one. */
static bool mf__list_next(mf__list_t *l, const char **elem, size_t *len)
{
    while (l->p < l->end) {
        const char *s = mf__skip_ows(l->p, l->end);
        const char *comma = memchr(s, ',', (size_t)(l->end - s));
        const char *e = comma ? comma : l->end;
        l->p = comma ? comma + 1 : l->end;
        while (e > s && mf__is_ows(e[-1]))
            e--;
        if (e > s) {
            *elem = s;
            *len = (size_t)(e - s);
            return true;
        }
    }
    return false;
}

/* ---- finding the end of a head ------------------------------------------ */

int mf__http_find_head_end(const char *buf, size_t start, size_t from,
                           size_t to, size_t *end)
{
    size_t i = from < start ? start : from;
    while (i < to) {
        const char *lf = memchr(buf + i, '\n', to - i);
        if (!lf)
            return MF__HEAD_MORE;
        i = (size_t)(lf - buf);
        if (i == start || buf[i - 1] != '\r')
            return MF__HEAD_BARE_LF;
        if (i - start >= 3 && buf[i - 2] == '\n' && buf[i - 3] == '\r') {
            *end = i + 1;
            return MF__HEAD_DONE;
        }
        i++;
    }
    return MF__HEAD_MORE;
}

/* ---- field lines ------------------------------------------------------- */

/*
 * field-line = field-name ":" OWS field-value OWS CRLF (RFC 9112 §5). A line
 * starting with SP/HTAB (obs-fold) or with whitespace before the colon fails:
 * proxies that read either differently have been used to smuggle requests.
 * Returns the next line, or NULL when this one is malformed.
 */
static MF__HOT_INLINE const char *
mf__parse_field(const char *p, const char *end, mf_http_header_t *h)
{
    const char *name = p;
    while (mf__is(*p, MF__C_TOKEN))
        p++;
    if (p == name || *p != ':')
        return NULL;
    h->name = name;
    h->name_len = (size_t)(p - name);
    do
        p++;
    while (mf__is_ows(*p));
    const char *value = p;
    p = mf__skip_class(p, end, MF__C_VALUE, 0x20);
    if (p[0] != '\r' || p[1] != '\n') /* a CTL, or a bare CR */
        return NULL;
    const char *vend = p;
    while (vend > value && mf__is_ows(vend[-1]))
        vend--;
    h->value = value;
    h->value_len = (size_t)(vend - value);
    return p + 2;
}

/*
 * Content-Length = 1*DIGIT (RFC 9110 §8.6). A list of identical values
 * ("5, 5") or a repeated identical field is one value; anything else (a
 * differing value, a sign, an empty element, overflow) marks the length bad,
 * since two parties choosing different lengths is request smuggling.
 */
static void mf__note_content_length(mf__fields_t *f, const char *v, size_t n)
{
    const char *p = v, *end = v + n;
    bool first = f->n_cl++ == 0; /* counted even when bad: CL+TE is a 400 */
    for (;;) {
        uint64_t x;
        p = mf__parse_decimal(p, end, &x);
        if (!p || (!first && x != f->content_length)) {
            f->cl_bad = true;
            return;
        }
        f->content_length = x;
        first = false;
        p = mf__skip_ows(p, end);
        if (p == end)
            return;
        if (*p != ',') {
            f->cl_bad = true;
            return;
        }
        p = mf__skip_ows(p + 1, end);
    }
}

/* Transfer-Encoding: the codings of all such fields form one list, in order
 * (RFC 9110 §5.3); only a final "chunked" delimits the body. Any other
 * coding (gzip, deflate, compress, x-gzip ...) is one we do not undo: a
 * server answers 501 rather than hand a handler a still-coded body. */
static void mf__note_transfer_encoding(mf__fields_t *f, const char *v, size_t n)
{
    mf__list_t l = {v, v + n};
    const char *e;
    size_t len;
    f->n_te++;
    while (mf__list_next(&l, &e, &len)) {
        if (!mf__all_of(e, len, MF__C_TOKEN)) { /* parameters included */
            f->te_bad = true;
            continue;
        }
        if (f->te_chunked)
            f->te_misplaced = true;
        f->te_chunked = MF__IS(e, len, "chunked");
        if (!f->te_chunked)
            f->te_unknown = true;
    }
}

/* Connection is a list of case-insensitive tokens (RFC 9110 §7.6.1). */
static void mf__note_connection(mf__fields_t *f, const char *v, size_t n)
{
    mf__list_t l = {v, v + n};
    const char *e;
    size_t len;
    while (mf__list_next(&l, &e, &len)) {
        if (MF__IS(e, len, "close"))
            f->close = true;
        else if (MF__IS(e, len, "keep-alive"))
            f->keep_alive = true;
        else if (MF__IS(e, len, "upgrade"))
            f->conn_upgrade = true;
    }
}

/* Host = uri-host [ ":" port ] (RFC 9112 §3.2), or empty when the target
 * has no authority. */
static MF__HOT_INLINE void mf__note_host(mf__fields_t *f, const char *v,
                                         size_t n)
{
    f->n_host++;
    f->host = v;
    f->host_len = n;
    if (n && !mf__http_is_authority(v, n))
        f->host_bad = true;
}

/* Notes a framing field. The switch on the name's length sends almost every
 * other field away after one comparison. */
static MF__HOT_INLINE void mf__note_field(mf__fields_t *f,
                                          const mf_http_header_t *h)
{
    const char *n = h->name, *v = h->value;
    size_t nl = h->name_len, vl = h->value_len;
    switch (nl) {
    case 4:
        if (MF__IS(n, nl, "host"))
            mf__note_host(f, v, vl);
        break;
    case 6:
        if (MF__IS(n, nl, "expect") && MF__IS(v, vl, "100-continue"))
            f->expect_continue = true;
        break;
    case 7:
        if (MF__IS(n, nl, "upgrade"))
            f->has_upgrade = true;
        break;
    case 10:
        if (MF__IS(n, nl, "connection"))
            mf__note_connection(f, v, vl);
        break;
    case 14:
        if (MF__IS(n, nl, "content-length"))
            mf__note_content_length(f, v, vl);
        break;
    case 17:
        if (MF__IS(n, nl, "transfer-encoding"))
            mf__note_transfer_encoding(f, v, vl);
        break;
    }
}

/* The two above for the judge of an arriving head (http_request_prefix.c),
 * out of line: the loop below keeps its inlined copies. */
const char *mf__http_parse_field(const char *p, const char *end,
                                 mf_http_header_t *h)
{
    return mf__parse_field(p, end, h);
}

void mf__http_note_field(mf__fields_t *f, const mf_http_header_t *h)
{
    mf__note_field(f, h);
}

int mf__http_parse_fields(const char *p, const char *end, mf_http_header_t *h,
                          size_t cap, size_t *count, mf__fields_t *f, int over)
{
    size_t n = 0;
    memset(f, 0, sizeof *f);
    while (end - p > 2) {
        if (n == cap)
            return over;
        p = mf__parse_field(p, end, &h[n]);
        if (!p)
            return 400;
        mf__note_field(f, &h[n]);
        n++;
    }
    *count = n;
    return 0;
}

/* RFC 9110 §2.5: a recipient handles a higher minor version of a major
 * version it implements as the highest minor it conforms to, so HTTP/1.2
 * and later 1.x read as 1.1 (and are answered as 1.1); only another major
 * version is 505. */
int mf__http_parse_version(const char *p, int *minor)
{
    if (memcmp(p, "HTTP/", 5) != 0 || !mf__is_digit(p[5]) || p[6] != '.' ||
        !mf__is_digit(p[7]))
        return 400;
    if (p[5] != '1')
        return 505;
    *minor = p[7] > '1' ? 1 : p[7] - '0';
    return 0;
}
