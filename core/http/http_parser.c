/*
 * http_parser.c — HTTP/1.1 heads, the chunked transfer coding and two small
 * helpers; the contract is moonflow/http_parser.h.
 *
 * Heads. A server calls the parser each time bytes arrive, so the most common
 * call is "not complete yet", and that call must be cheap: it only looks for
 * the blank line that ends the head, with one memchr per LF from where the
 * previous call stopped (`*scanned`), and rejects a bare LF on the spot. Once
 * the blank line is in, a single pass parses the head. Every loop of that
 * pass stops at a byte outside the class it accepts, and the head is known to
 * end in CRLF CRLF, whose CR no class accepts: the loops need no length check
 * of their own. Field values and the request target are skipped eight bytes
 * at a time (SWAR); a 256-byte class table decides the rest. The framing
 * fields (Content-Length, Transfer-Encoding, Connection, Host, Expect,
 * Upgrade) are noted during the same pass, so callers never scan the header
 * array again.
 *
 * Strictness follows RFC 9112 wherever leniency has served request smuggling
 * or response splitting; the header lists the cases. A response is parsed
 * with the same code and fails with 502.
 *
 * Chunked bodies. A byte-at-a-time state machine reads the framing and a
 * memmove moves the data, so the decoder accepts any split of its input.
 */
#include "moonflow/http_parser.h"

#include <limits.h>
#include <string.h>

/* ---- byte classes ------------------------------------------------------ */

enum {
    C_TOKEN = 0x01,  /* tchar (RFC 9110 §5.6.2): methods, names, codings */
    C_VALUE = 0x02,  /* field-content: VCHAR, obs-text, SP, HTAB */
    C_TARGET = 0x04, /* request-target: VCHAR and obs-text, no CTL or SP */
    C_HOST = 0x08,   /* Host and authority: reg-name, IP literal, port */
    C_HEX = 0x10,    /* HEXDIG */
    C_SCHEME = 0x20, /* URI scheme: ALPHA, DIGIT, "+", "-", "." */
};

/* clang-format off */
static const uint8_t mf__class[256] = {
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 00 */
    0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 08 HTAB */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 10 */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 18 */
    0x02, 0x0f, 0x06, 0x07, 0x0f, 0x0f, 0x0f, 0x0f, /* 20  !"#$%&' */
    0x0e, 0x0e, 0x0f, 0x2f, 0x0e, 0x2f, 0x2f, 0x06, /* 28 ()*+,-./ */
    0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, /* 30 01234567 */
    0x3f, 0x3f, 0x0e, 0x0e, 0x06, 0x0e, 0x06, 0x06, /* 38 89:;<=>? */
    0x06, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x2f, /* 40 @ABCDEFG */
    0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, /* 48 HIJKLMNO */
    0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, /* 50 PQRSTUVW */
    0x2f, 0x2f, 0x2f, 0x0e, 0x06, 0x0e, 0x07, 0x0f, /* 58 XYZ[\]^_ */
    0x07, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x2f, /* 60 `abcdefg */
    0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, /* 68 hijklmno */
    0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, 0x2f, /* 70 pqrstuvw */
    0x2f, 0x2f, 0x2f, 0x06, 0x07, 0x06, 0x0f, 0x00, /* 78 xyz{|}~ DEL */
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, /* 80-ff obs-text */
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
    0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06,
};
/* clang-format on */

static inline bool mf__is(char c, unsigned cls)
{
    return (mf__class[(unsigned char)c] & cls) != 0;
}

static inline bool mf__is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static inline bool mf__is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static inline char mf__lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c + ('a' - 'A')) : c;
}

/* Value of a byte already known to be a HEXDIG. */
static inline unsigned mf__hex_value(char c)
{
    return c <= '9' ? (unsigned)(c - '0') : (unsigned)((c | 0x20) - 'a' + 10);
}

/* ASCII case-insensitive equality of a[0..n) and b[0..n). */
static bool mf__iequal(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (mf__lower(a[i]) != mf__lower(b[i]))
            return false;
    return true;
}

/* s[0..n) equals the literal lit, ignoring ASCII case. */
#define MF__IS(s, n, lit) \
    ((n) == sizeof(lit) - 1 && mf__iequal((s), (lit), sizeof(lit) - 1))

/* ---- word-at-a-time skipping ------------------------------------------- */

#define MF__ONES 0x0101010101010101ull

static inline uint64_t mf__load64(const char *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w); /* unaligned-safe; one load on x86/arm64 */
    return w;
}

/* Nonzero iff some byte of w is below n (n <= 128): "hasless" of the Bit
 * Twiddling Hacks, exact as a yes/no answer. */
static inline uint64_t mf__has_less(uint64_t w, uint64_t n)
{
    return (w - MF__ONES * n) & ~w & (MF__ONES * 0x80);
}

static inline uint64_t mf__has_del(uint64_t w)
{
    return mf__has_less(w ^ (MF__ONES * 0x7f), 1);
}

/*
 * Returns the first byte in [p, end) outside class cls (or end). Both
 * classes skipped this way (C_VALUE, C_TARGET) hold every byte from `below`
 * up except DEL, so a word with no byte under `below` and no DEL is skipped
 * whole; a word that has one is walked byte by byte (it may only hold an
 * HTAB, which C_VALUE accepts).
 */
static inline const char *mf__skip_class(const char *p, const char *end,
                                         unsigned cls, uint64_t below)
{
    for (;;) {
        while (end - p >= 8) {
            uint64_t w = mf__load64(p);
            if (mf__has_less(w, below) | mf__has_del(w))
                break;
            p += 8;
        }
        const char *stop = end - p >= 8 ? p + 8 : end;
        for (; p < stop; p++)
            if (!mf__is(*p, cls))
                return p;
        if (p == end)
            return p;
    }
}

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

static bool mf__all_of(const char *s, size_t n, unsigned cls)
{
    for (size_t i = 0; i < n; i++)
        if (!mf__is(s[i], cls))
            return false;
    return true;
}

/* ---- finding the end of a head ------------------------------------------ */

enum { MF__HEAD_MORE, MF__HEAD_DONE, MF__HEAD_BARE_LF };

/*
 * Looks for the CRLF CRLF that ends a head starting at buf[start], among the
 * LFs in buf[from..to). The terminator ends in an LF, so LFs before `from`
 * (searched by an earlier call) need no second look; memchr finds each LF at
 * vector speed. Every LF must follow a CR: a bare LF fails here, at once,
 * rather than when a blank line that an LF-only client never sends arrives.
 */
static int mf__find_head_end(const char *buf, size_t start, size_t from,
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

/* ---- field lines ------------------------------------------------------- */

/* What the framing decisions need from the field lines. */
typedef struct mf__fields {
    uint64_t content_length;
    const char *host; /* the Host field's value */
    size_t host_len;
    unsigned n_host, n_cl, n_te;
    bool cl_bad;          /* a Content-Length that is not one number */
    bool te_chunked;      /* the last transfer coding so far is chunked */
    bool te_misplaced;    /* chunked followed by another coding */
    bool te_unknown;      /* a coding we could not undo */
    bool te_bad;          /* an element that is not a bare token */
    bool close;           /* Connection: close */
    bool keep_alive;      /* Connection: keep-alive */
    bool conn_upgrade;    /* Connection: upgrade */
    bool has_upgrade;     /* an Upgrade field */
    bool expect_continue; /* Expect: 100-continue */
} mf__fields_t;

/*
 * field-line = field-name ":" OWS field-value OWS CRLF (RFC 9112 §5). A line
 * starting with SP/HTAB (obs-fold) or with whitespace before the colon fails:
 * proxies that read either differently have been used to smuggle requests.
 * Returns the next line, or NULL when this one is malformed.
 */
static const char *mf__parse_field(const char *p, const char *end,
                                   mf_http_header_t *h)
{
    const char *name = p;
    while (mf__is(*p, C_TOKEN))
        p++;
    if (p == name || *p != ':')
        return NULL;
    h->name = name;
    h->name_len = (size_t)(p - name);
    do
        p++;
    while (mf__is_ows(*p));
    const char *value = p;
    p = mf__skip_class(p, end, C_VALUE, 0x20);
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

/* Codings a proxy may pass along undecoded; any other is "unknown" (501). */
static bool mf__known_coding(const char *s, size_t n)
{
    return MF__IS(s, n, "gzip") || MF__IS(s, n, "x-gzip") ||
           MF__IS(s, n, "deflate") || MF__IS(s, n, "compress") ||
           MF__IS(s, n, "x-compress");
}

/* Transfer-Encoding: the codings of all such fields form one list, in order
 * (RFC 9110 §5.3); only a final "chunked" delimits the body. */
static void mf__note_transfer_encoding(mf__fields_t *f, const char *v, size_t n)
{
    mf__list_t l = {v, v + n};
    const char *e;
    size_t len;
    f->n_te++;
    while (mf__list_next(&l, &e, &len)) {
        if (!mf__all_of(e, len, C_TOKEN)) { /* parameters included */
            f->te_bad = true;
            continue;
        }
        if (f->te_chunked)
            f->te_misplaced = true;
        f->te_chunked = MF__IS(e, len, "chunked");
        if (!f->te_chunked && !mf__known_coding(e, len))
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

/* Notes a framing field. The switch on the name's length sends almost every
 * other field away after one comparison. */
static void mf__note_field(mf__fields_t *f, const mf_http_header_t *h)
{
    const char *n = h->name, *v = h->value;
    size_t nl = h->name_len, vl = h->value_len;
    switch (nl) {
    case 4:
        if (MF__IS(n, nl, "host")) {
            f->n_host++;
            f->host = v;
            f->host_len = vl;
        }
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

/*
 * Parses the field lines in [p, end), the head's final CRLF included, into
 * h[0..*count). More than `cap` fields (the smaller of the caller's array and
 * the limit) is `over`, the status a head too large fails with. Returns 0 or
 * an HTTP status.
 */
static int mf__parse_fields(const char *p, const char *end, mf_http_header_t *h,
                            size_t cap, size_t *count, mf__fields_t *f,
                            int over)
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

/* HTTP-version = "HTTP/" DIGIT "." DIGIT (RFC 9112 §2.3), at p with at least
 * 8 bytes before end. 0 for 1.0 and 1.1 (minor set); 505 for any other
 * well-formed version; 400 when this is not a version at all. */
static int mf__parse_version(const char *p, int *minor)
{
    if (memcmp(p, "HTTP/", 5) != 0 || !mf__is_digit(p[5]) || p[6] != '.' ||
        !mf__is_digit(p[7]))
        return 400;
    if (p[5] != '1' || p[7] > '1')
        return 505;
    *minor = p[7] - '0';
    return 0;
}

/* ---- requests ------------------------------------------------------------ */

static const mf_http_limits_t mf__default_limits = MF_HTTP_LIMITS_DEFAULT;

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
    while (p < end && mf__is(*p, C_SCHEME))
        p++;
    if (end - p < 3 || memcmp(p, "://", 3) != 0)
        return 400;
    const char *auth = p += 3;
    while (p < end && *p != '/' && *p != '?')
        p++;
    if (p == auth || !mf__all_of(auth, (size_t)(p - auth), C_HOST))
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
        !mf__all_of(t, (size_t)(p - 1 - t), C_HOST))
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
    while (mf__is(*p, C_TOKEN))
        p++;
    if (p == start || *p != ' ')
        return 400;
    req->method = start;
    req->method_len = (size_t)(p - start);
    start = ++p;
    p = mf__skip_class(p, end, C_TARGET, 0x21);
    if (p == start || *p != ' ')
        return 400;
    req->target = start;
    req->target_len = (size_t)(p - start);
    p++;
    if (end - p < 10 || p[8] != '\r' || p[9] != '\n')
        return 400;
    int status = mf__parse_version(p, &req->minor_version);
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
    if (f->n_host && !mf__all_of(f->host, f->host_len, C_HOST))
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
        status = mf__parse_fields(p, end, req->headers, cap, &count, &f, 431);
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
    const mf_http_limits_t *lim = limits ? limits : &mf__default_limits;
    size_t window = len < lim->max_head_bytes ? len : lim->max_head_bytes;
    size_t seen = len > lim->max_head_bytes ? lim->max_head_bytes + 1 : len;
    size_t start = mf__skip_empty_lines(buf, window);
    size_t end = 0;

    if (seen - start > lim->max_request_line &&
        mf__line_too_long(buf, start, seen, lim->max_request_line))
        return mf__request_error(req, scanned, 414);
    int found =
        mf__find_head_end(buf, start, scanned ? *scanned : 0, window, &end);
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

/* ---- responses ----------------------------------------------------------- */

/*
 * status-line = HTTP-version SP status-code SP [reason-phrase] CRLF (RFC 9112
 * §4). The SP before an empty reason may be missing, as some servers send it.
 * The shortest head, "HTTP/1.1 200\r\n\r\n", has 16 bytes, which bounds every
 * fixed index below. Returns the first field line, or NULL.
 */
static const char *mf__parse_status_line(const char *p, const char *end,
                                         mf_http_response_t *resp)
{
    if (end - p < 16 || mf__parse_version(p, &resp->minor_version) != 0 ||
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
    p = mf__skip_class(p, end, C_VALUE, 0x20);
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
    const mf_http_limits_t *lim = limits ? limits : &mf__default_limits;
    size_t window = len < lim->max_head_bytes ? len : lim->max_head_bytes;
    size_t end = 0, count, cap = resp->num_headers;
    mf__fields_t f;
    if (cap > lim->max_headers)
        cap = lim->max_headers;

    switch (mf__find_head_end(buf, 0, scanned ? *scanned : 0, window, &end)) {
    case MF__HEAD_BARE_LF:
        return mf__response_error(resp, scanned);
    case MF__HEAD_MORE:
        if (len > lim->max_head_bytes)
            return mf__response_error(resp, scanned);
        if (scanned)
            *scanned = window;
        return MF_HTTP_INCOMPLETE;
    }
    const char *p = mf__parse_status_line(buf, buf + end, resp);
    if (!p || end > INT_MAX ||
        mf__parse_fields(p, buf + end, resp->headers, cap, &count, &f, 502))
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

const mf_http_header_t *mf_http_find_header(const mf_http_header_t *headers,
                                            size_t n, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < n; i++)
        if (headers[i].name_len == len &&
            mf__iequal(headers[i].name, name, len))
            return &headers[i];
    return NULL;
}

/* ---- chunked transfer coding ------------------------------------------- */

/*
 * chunked-body = *chunk last-chunk trailer-section CRLF (RFC 9112 §7.1). The
 * states follow the grammar; MF__CH_DATA is the only one that is not read a
 * byte at a time.
 */
enum {
    MF__CH_SIZE,          /* chunk-size: 1 to 16 HEXDIG */
    MF__CH_SIZE_WS,       /* BWS between the size and ';' */
    MF__CH_EXT,           /* chunk-ext, skipped up to CR */
    MF__CH_SIZE_LF,       /* LF ending the size line */
    MF__CH_DATA,          /* chunk-data, _remaining bytes left */
    MF__CH_DATA_CR,       /* CRLF after the data */
    MF__CH_DATA_LF,       /* */
    MF__CH_TRAILER,       /* start of a trailer field, or the final CRLF */
    MF__CH_TRAILER_NAME,  /* field-name up to ':' */
    MF__CH_TRAILER_VALUE, /* field-value up to CR */
    MF__CH_TRAILER_LF,    /* LF ending a trailer field */
    MF__CH_END_LF,        /* LF of the final CRLF */
    MF__CH_DONE,
    MF__CH_ERROR
};

/* Bounds on what is skipped rather than returned, so a peer cannot keep the
 * decoder busy without sending body bytes: chunk-ext bytes on one size line,
 * and the whole trailer section. _trailer_bytes counts either. */
#define MF__CHUNK_EXT_MAX 4096
#define MF__TRAILER_MAX 8192

void mf_http_chunked_init(mf_http_chunked_t *dec, uint64_t max_body)
{
    memset(dec, 0, sizeof *dec);
    dec->_state = MF__CH_SIZE;
    dec->max_body = max_body;
}

/* The size line is complete: start the data, or the trailer section after
 * the last chunk. max_body is checked before any of the data arrives. */
static int mf__chunk_begin(mf_http_chunked_t *dec)
{
    if (dec->_remaining == 0) {
        dec->_state = MF__CH_TRAILER;
        dec->_trailer_bytes = 0;
        return 0;
    }
    if (dec->max_body && dec->_remaining > dec->max_body - dec->body_bytes)
        return 413;
    dec->_state = MF__CH_DATA;
    return 0;
}

/* The byte after a chunk-size: CR, ';', or BWS before a ';'. */
static int mf__chunk_after_size(mf_http_chunked_t *dec, char c)
{
    if (c == '\r')
        dec->_state = MF__CH_SIZE_LF;
    else if (c == ';')
        dec->_state = MF__CH_EXT;
    else if (mf__is_ows(c))
        dec->_state = MF__CH_SIZE_WS;
    else
        return 400;
    return 0;
}

/* One byte of a size line, or of the CRLF that ends a chunk's data. Returns
 * 0 or an HTTP status; on a status the caller enters MF__CH_ERROR, so a
 * state may advance before its byte is judged. */
static int mf__chunk_size_byte(mf_http_chunked_t *dec, char c)
{
    switch (dec->_state) {
    case MF__CH_DATA_CR:
        dec->_state = MF__CH_DATA_LF;
        return c == '\r' ? 0 : 400;
    case MF__CH_DATA_LF:
        dec->_state = MF__CH_SIZE;
        dec->_digits = 0;
        dec->_trailer_bytes = 0;
        return c == '\n' ? 0 : 400;
    case MF__CH_SIZE:
        if (mf__is(c, C_HEX)) {
            if (dec->_digits == 16)
                return 400;
            dec->_remaining = (dec->_remaining << 4) | mf__hex_value(c);
            dec->_digits++;
            return 0;
        }
        return dec->_digits > 0 ? mf__chunk_after_size(dec, c) : 400;
    case MF__CH_SIZE_WS:
        if (c == ';')
            dec->_state = MF__CH_EXT;
        return c == ';' || mf__is_ows(c) ? 0 : 400;
    case MF__CH_EXT:
        if (c == '\r')
            dec->_state = MF__CH_SIZE_LF;
        else if (!mf__is(c, C_VALUE) ||
                 ++dec->_trailer_bytes > MF__CHUNK_EXT_MAX)
            return 400;
        return 0;
    default: /* MF__CH_SIZE_LF */
        return c == '\n' ? mf__chunk_begin(dec) : 400;
    }
}

/* One byte of the trailer section; fields are checked like header fields
 * (no obs-fold, token names, no CTL in values) and dropped. Same return
 * convention as mf__chunk_size_byte. */
static int mf__chunk_trailer_byte(mf_http_chunked_t *dec, char c)
{
    if (++dec->_trailer_bytes > MF__TRAILER_MAX)
        return 400;
    switch (dec->_state) {
    case MF__CH_TRAILER:
        dec->_state = c == '\r' ? MF__CH_END_LF : MF__CH_TRAILER_NAME;
        return c == '\r' || mf__is(c, C_TOKEN) ? 0 : 400;
    case MF__CH_TRAILER_NAME:
        if (c == ':')
            dec->_state = MF__CH_TRAILER_VALUE;
        return c == ':' || mf__is(c, C_TOKEN) ? 0 : 400;
    case MF__CH_TRAILER_VALUE:
        if (c == '\r')
            dec->_state = MF__CH_TRAILER_LF;
        return c == '\r' || mf__is(c, C_VALUE) ? 0 : 400;
    case MF__CH_TRAILER_LF:
        dec->_state = MF__CH_TRAILER;
        return c == '\n' ? 0 : 400;
    default: /* MF__CH_END_LF */
        dec->_state = MF__CH_DONE;
        return c == '\n' ? 0 : 400;
    }
}

/* Moves as much of the current chunk's data as the input holds. */
static void mf__chunk_data(mf_http_chunked_t *dec, char *buf, size_t *in,
                           size_t *out, size_t len)
{
    size_t n = len - *in;
    if (n > dec->_remaining)
        n = (size_t)dec->_remaining;
    memmove(buf + *out, buf + *in, n);
    *in += n;
    *out += n;
    dec->_remaining -= n;
    dec->body_bytes += n;
    if (dec->_remaining == 0)
        dec->_state = MF__CH_DATA_CR;
}

ssize_t mf_http_chunked_decode(mf_http_chunked_t *dec, char *buf, size_t *len)
{
    size_t in = 0, out = 0, n = *len;
    while (in < n && dec->_state < MF__CH_DONE) {
        if (dec->_state == MF__CH_DATA) {
            mf__chunk_data(dec, buf, &in, &out, n);
            continue;
        }
        char c = buf[in++];
        int status = dec->_state < MF__CH_TRAILER
                         ? mf__chunk_size_byte(dec, c)
                         : mf__chunk_trailer_byte(dec, c);
        if (status != 0) {
            dec->_state = MF__CH_ERROR;
            dec->error_status = status;
        }
    }
    *len = out;
    if (dec->_state == MF__CH_ERROR)
        return MF_HTTP_ERROR;
    if (dec->_state != MF__CH_DONE)
        return MF_HTTP_INCOMPLETE;
    if (in < n && out < in) /* the next message moves up to the data */
        memmove(buf + out, buf + in, n - in);
    return (ssize_t)(n - in);
}

/* ---- helpers ----------------------------------------------------------- */

const char *mf_http_reason(int status)
{
    /* clang-format off */
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 407: return "Proxy Authentication Required";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 451: return "Unavailable For Legal Reasons";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "";
    }
    /* clang-format on */
}

ssize_t mf_http_url_decode(char *s, size_t len, bool plus_is_space)
{
    size_t out = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '%') {
            if (len - i < 3 || !mf__is(s[i + 1], C_HEX) ||
                !mf__is(s[i + 2], C_HEX))
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
