/*
 * http_compress_filter.c — the exchange's compression step
 * (http_compress_filter.h): the choice, the head's lines, the body whole
 * or in pieces, and the loop's pool and scratch buffer. May call:
 * http_compress.c, the parser's public helpers, engine. Knows no
 * protocol: the exchange sends what it returns.
 */
#include "http_compress_filter.h"

#include <string.h>
#include <strings.h>

#include "moonflow/common.h"
#include "moonflow/error.h"

/* ---- the loop's pool and scratch buffer ---------------------------------- */

typedef struct mf_compress_loop {
    mf_http_compress_pool_t *pool;
    char *scratch; /* a stream's compressed piece, until the next one */
    size_t scratch_cap;
} mf_compress_loop_t;

static void mf__compress_loop_free(mf_loop_t *loop, void *value)
{
    (void)loop;
    mf_compress_loop_t *cl = value;
    mf__http_compress_pool_destroy(cl->pool);
    mf_free(cl->scratch);
    mf_free(cl);
}

/* Low: freed after everything that could still hold an encoder (servers
 * and their exchanges go first). */
#define MF_COMPRESS_LOOP_RANK 5
static mf_loop_key_t mf__compress_key =
    MF_LOOP_KEY_INIT(MF_COMPRESS_LOOP_RANK, mf__compress_loop_free);

/* The loop's state, made at its first compressed answer; NULL when out of
 * memory. */
static mf_compress_loop_t *mf__compress_loop(mf_loop_t *loop)
{
    mf_compress_loop_t *cl = mf_loop_get(loop, &mf__compress_key);
    if (cl)
        return cl;
    cl = mf_try_malloc(sizeof(*cl));
    if (!cl)
        return NULL;
    memset(cl, 0, sizeof(*cl));
    cl->pool = mf__http_compress_pool_create();
    if (!cl->pool) {
        mf_free(cl);
        return NULL;
    }
    mf_loop_set(loop, &mf__compress_key, cl);
    return cl;
}

/* ---- the head's lines ------------------------------------------------------
 */

/* The value of the first line named name (its length nlen) in
 * lines[0..len), "Name: value\r\n" each; NULL when none. */
static const char *mf__line_value(const char *lines, size_t len,
                                  const char *name, size_t nlen,
                                  size_t *value_len)
{
    const char *p = lines, *end = lines + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *next = eol ? eol + 1 : end;
        const char *colon = memchr(p, ':', (size_t)(next - p));
        if (colon && (size_t)(colon - p) == nlen &&
            strncasecmp(p, name, nlen) == 0) {
            const char *v = colon + 1, *ve = eol ? eol : end;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v &&
                   (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *value_len = (size_t)(ve - v);
            return v;
        }
        p = next;
    }
    return NULL;
}

/* What the choice reads of an answer's head, found in one pass. */
typedef struct mf_answer_fields {
    const char *type; /* Content-Type's value, NULL when none */
    size_t type_len;
    bool encoded;     /* a Content-Encoding of its own */
    bool static_etag; /* an ETag among the static lines: not weakened in
                         place, so not compressed */
    bool varies;      /* a Vary names Accept-Encoding, or is "*" */
} mf_answer_fields_t;

static bool mf__name_is(const char *p, size_t len, const char *name,
                        size_t nlen)
{
    return len == nlen && strncasecmp(p, name, nlen) == 0;
}

static bool mf__vary_names_it(const char *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i] == '*')
            return true;
        if (n - i >= 15 && strncasecmp(v + i, "accept-encoding", 15) == 0)
            return true;
    }
    return false;
}

/* One field line's name p[0..nlen) and value v[0..vlen) into f. */
static void mf__note_field(const char *p, size_t nlen, const char *v,
                           size_t vlen, bool in_static, mf_answer_fields_t *f)
{
    switch (nlen) { /* most names have none of these lengths */
    case 4:
        if (in_static && mf__name_is(p, nlen, "etag", 4))
            f->static_etag = true;
        else if (mf__name_is(p, nlen, "vary", 4) && mf__vary_names_it(v, vlen))
            f->varies = true;
        break;
    case 12:
        if (!f->type && mf__name_is(p, nlen, "content-type", 12)) {
            f->type = v;
            f->type_len = vlen;
        }
        break;
    case 16:
        if (mf__name_is(p, nlen, "content-encoding", 16))
            f->encoded = true;
        break;
    default:
        break;
    }
}

/* Every "Name: value\r\n" line of p[0..len), each byte read once. */
static void mf__scan_lines(const char *p, size_t len, bool in_static,
                           mf_answer_fields_t *f)
{
    const char *end = p + len;
    while (p < end) {
        const char *colon = memchr(p, ':', (size_t)(end - p));
        if (!colon)
            return;
        const char *v = colon + 1;
        const char *eol = memchr(v, '\n', (size_t)(end - v));
        const char *ve = eol ? eol : end;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        mf__note_field(p, (size_t)(colon - p), v, (size_t)(ve - v), in_static,
                       f);
        p = eol ? eol + 1 : end;
    }
}

/* The handler's lines, then the static ones. */
static void mf__scan_answer(const mf_http_compress_answer_t *a,
                            mf_answer_fields_t *f)
{
    memset(f, 0, sizeof(*f));
    mf__scan_lines(a->lines->data, a->lines->len, false, f);
    for (unsigned i = 0; i < a->nstatic; i++)
        mf__scan_lines(a->static_lines[i], a->static_lens[i], true, f);
}

static bool mf__is_head_request(const mf_http_request_t *req)
{
    return req->method_len == 4 && memcmp(req->method, "HEAD", 4) == 0;
}

/* ---- the choice ------------------------------------------------------------
 */

mf_http_coding_t mf__http_compress_choose(const mf_http_compress_answer_t *a,
                                          bool known_length, uint64_t length,
                                          bool *vary)
{
    const mf_http_compress_config_t *c = a->config;
    *vary = false;
    /* Cheapest first: most answers that are not compressed stop here. */
    if (known_length && length < c->min_length)
        return MF_HTTP_CODING_IDENTITY;
    if (a->status < 200 || a->status == 204 || a->status == 206 ||
        a->status == 304 || mf__is_head_request(a->req))
        return MF_HTTP_CODING_IDENTITY;
    mf_answer_fields_t f;
    mf__scan_answer(a, &f);
    if (!f.type || !mf__http_compress_type_listed(c, f.type, f.type_len) ||
        f.encoded || f.static_etag)
        return MF_HTTP_CODING_IDENTITY;
    *vary = !f.varies;
    unsigned offered = 1u << MF_HTTP_CODING_GZIP;
    if (c->brotli)
        offered |= 1u << MF_HTTP_CODING_BR;
    return mf__http_accept_encoding_fields(a->req->headers, a->req->num_headers,
                                           offered);
}

/* ---- the head's lines for the choice --------------------------------------
 */

/* "ETag: "x"" becomes "ETag: W/"x"" in place: a compressed body is not
 * byte for byte the tagged one (nginx does the same). */
static int mf__weaken_etag(mf_loop_t *loop, mf_buf_t *lines)
{
    size_t n;
    const char *v = mf__line_value(lines->data, lines->len, "ETag", 4, &n);
    if (!v || (n >= 2 && v[0] == 'W' && v[1] == '/'))
        return 0;
    size_t at = (size_t)(v - lines->data);
    if (lines->cap - lines->len < 2 && mf__buf_reserve(loop, lines, 2) < 0)
        return MF_ENOMEM;
    memmove(lines->data + at + 2, lines->data + at, lines->len - at);
    memcpy(lines->data + at, "W/", 2);
    lines->len += 2;
    return 0;
}

int mf__http_compress_head(mf_loop_t *loop, mf_buf_t *lines,
                           mf_http_coding_t coding, bool vary)
{
    if (vary) {
        static const char line[] = "Vary: Accept-Encoding\r\n";
        if (mf__buf_append(loop, lines, line, sizeof line - 1) < 0)
            return MF_ENOMEM;
    }
    if (coding == MF_HTTP_CODING_IDENTITY)
        return 0;
    static const char gzip[] = "Content-Encoding: gzip\r\n";
    static const char br[] = "Content-Encoding: br\r\n";
    int rc = coding == MF_HTTP_CODING_GZIP
                 ? mf__buf_append(loop, lines, gzip, sizeof gzip - 1)
                 : mf__buf_append(loop, lines, br, sizeof br - 1);
    return rc < 0 ? MF_ENOMEM : mf__weaken_etag(loop, lines);
}

/* ---- bodies ----------------------------------------------------------------
 */

static int mf__level(const mf_http_compress_config_t *c,
                     mf_http_coding_t coding)
{
    return coding == MF_HTTP_CODING_BR ? c->brotli_level : c->level;
}

/* Runs enc over data until done, appending to out (grown as needed). */
static int mf__encode_into(mf_loop_t *loop, mf_http_encoder_t *enc,
                           const char *data, size_t len, mf_http_encode_op_t op,
                           mf_buf_t *out)
{
    for (;;) {
        size_t room = mf__http_encode_room(len);
        if (out->cap - out->len < room && mf__buf_reserve(loop, out, room) < 0)
            return MF_ENOMEM;
        size_t used, written;
        int rc =
            mf__http_encoder_step(enc, data, len, &used, out->data + out->len,
                                  out->cap - out->len, &written, op);
        out->len += written;
        data += used;
        len -= used;
        if (rc <= 0)
            return rc < 0 ? MF_ENOMEM : 0;
    }
}

int mf__http_compress_whole(mf_loop_t *loop,
                            const mf_http_compress_config_t *config,
                            mf_http_coding_t coding, const void *body,
                            size_t len, mf_buf_t *out)
{
    mf_http_encoder_t *enc = mf__http_compress_open(loop, config, coding);
    if (!enc)
        return MF_ENOMEM;
    int rc = mf__encode_into(loop, enc, body, len, MF_HTTP_ENCODE_FINISH, out);
    mf__http_compress_close(enc);
    if (rc < 0)
        mf__buf_release(loop, out);
    return rc;
}

mf_http_encoder_t *mf__http_compress_open(mf_loop_t *loop,
                                          const mf_http_compress_config_t *c,
                                          mf_http_coding_t coding)
{
    mf_compress_loop_t *cl = mf__compress_loop(loop);
    if (!cl)
        return NULL;
    return mf__http_encoder_open(cl->pool, coding, mf__level(c, coding));
}

/* The scratch buffer with at least need bytes, its first keep bytes
 * kept; 0 or MF_ENOMEM. */
static int mf__scratch_reserve(mf_compress_loop_t *cl, size_t need, size_t keep)
{
    if (cl->scratch_cap >= need)
        return 0;
    size_t cap = cl->scratch_cap ? cl->scratch_cap : 16384;
    while (cap < need)
        cap *= 2;
    char *p = mf_try_malloc(cap);
    if (!p)
        return MF_ENOMEM;
    if (keep)
        memcpy(p, cl->scratch, keep);
    mf_free(cl->scratch);
    cl->scratch = p;
    cl->scratch_cap = cap;
    return 0;
}

int mf__http_compress_piece(mf_loop_t *loop, mf_http_encoder_t *enc,
                            const void *data, size_t len, bool finish,
                            const char **out, size_t *out_len)
{
    mf_compress_loop_t *cl = mf_loop_get(loop, &mf__compress_key);
    mf_http_encode_op_t op =
        finish ? MF_HTTP_ENCODE_FINISH : MF_HTTP_ENCODE_FLUSH;
    size_t have = 0;
    const char *in = data;
    for (;;) {
        if (mf__scratch_reserve(cl, have + mf__http_encode_room(len), have) < 0)
            return MF_ENOMEM;
        size_t used, written;
        int rc = mf__http_encoder_step(enc, in, len, &used, cl->scratch + have,
                                       cl->scratch_cap - have, &written, op);
        have += written;
        in += used;
        len -= used;
        if (rc < 0)
            return MF_ENOMEM;
        if (rc == 0)
            break;
    }
    *out = cl->scratch;
    *out_len = have;
    return 0;
}

void mf__http_compress_close(mf_http_encoder_t *enc)
{
    mf__http_encoder_close(enc);
}
