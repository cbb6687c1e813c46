/*
 * http_compress.c — gzip and brotli encoders over caller buffers, their
 * pool, the Accept-Encoding chooser and the type check
 * (http_compress.h, moonflow/http_compress.h). Pure: no I/O, no loop.
 * May call: zlib, libbrotlienc, engine/alloc.c.
 */
#include "http_compress.h"

#include <brotli/encode.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "moonflow/error.h"

/* ---- the config's defaults ---------------------------------------------- */

static const char *const mf__default_types[] = {
    "text/html",        "text/plain",      "text/css",
    "text/xml",         "text/javascript", "application/javascript",
    "application/json", "application/xml", "image/svg+xml"};

void mf_http_compress_config_init(mf_http_compress_config_t *config)
{
    config->types = mf__default_types;
    config->ntypes = sizeof mf__default_types / sizeof mf__default_types[0];
    config->min_length = 1024;
    config->level = 6;
    config->brotli = true;
    config->brotli_level = 4;
}

/* ---- Accept-Encoding (RFC 9110 §12.5.3) ---------------------------------- */

/* q in thousandths; -1: not named. */
typedef struct mf_accept_q {
    int gzip, br, identity, star;
} mf_accept_q_t;

static bool mf__is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ): thousandths,
 * or -1 when malformed. */
static int mf__parse_qvalue(const char *p, size_t len)
{
    if (len == 0 || (p[0] != '0' && p[0] != '1'))
        return -1;
    int q = (p[0] - '0') * 1000;
    if (len == 1)
        return q;
    if (p[1] != '.' || len > 5)
        return -1;
    int scale = 100;
    for (size_t i = 2; i < len; i++, scale /= 10) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        q += (p[i] - '0') * scale;
    }
    return q <= 1000 ? q : -1;
}

/* The weight of one member's parameters ";q=0.5" (p[0..len), after the
 * coding): 1000 when none, -1 when malformed. Other parameters are not
 * defined for Accept-Encoding: a member with one is skipped. */
static int mf__member_weight(const char *p, size_t len)
{
    size_t i = 0;
    while (i < len && mf__is_ows(p[i]))
        i++;
    if (i == len)
        return 1000;
    if (p[i] != ';')
        return -1;
    i++;
    while (i < len && mf__is_ows(p[i]))
        i++;
    if (len - i < 2 || (p[i] != 'q' && p[i] != 'Q') || p[i + 1] != '=')
        return -1;
    i += 2;
    size_t end = len;
    while (end > i && mf__is_ows(p[end - 1]))
        end--;
    return mf__parse_qvalue(p + i, end - i);
}

static bool mf__token_is(const char *p, size_t len, const char *name)
{
    return strlen(name) == len && strncasecmp(p, name, len) == 0;
}

/* One member "coding [weight]" of the list; malformed ones change
 * nothing. A coding named twice keeps its first weight. */
static void mf__accept_member(const char *p, size_t len, mf_accept_q_t *q)
{
    while (len && mf__is_ows(*p)) {
        p++;
        len--;
    }
    size_t n = 0; /* the coding: a token */
    while (n < len && p[n] != ';' && !mf__is_ows(p[n]) && p[n] != ',')
        n++;
    if (n == 0)
        return;
    int w = mf__member_weight(p + n, len - n);
    if (w < 0)
        return;
    int *slot = NULL;
    if (mf__token_is(p, n, "gzip") || mf__token_is(p, n, "x-gzip"))
        slot = &q->gzip;
    else if (mf__token_is(p, n, "br"))
        slot = &q->br;
    else if (mf__token_is(p, n, "identity"))
        slot = &q->identity;
    else if (mf__token_is(p, n, "*"))
        slot = &q->star;
    if (slot && *slot < 0)
        *slot = w;
}

/* One field line's list into q (a coding named before keeps its weight:
 * several lines are one list, RFC 9110 §5.3). */
static void mf__accept_parse(const char *value, size_t len, mf_accept_q_t *q)
{
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || value[i] == ',') {
            mf__accept_member(value + start, i - start, q);
            start = i + 1;
        }
    }
}

/* A coding's weight: its own, else "*"'s, else refused. */
static int mf__coding_q(int own, int star)
{
    return own >= 0 ? own : star >= 0 ? star : 0;
}

static mf_http_coding_t mf__accept_pick(const mf_accept_q_t *q,
                                        unsigned offered)
{
    int br =
        offered & (1u << MF_HTTP_CODING_BR) ? mf__coding_q(q->br, q->star) : 0;
    int gzip = offered & (1u << MF_HTTP_CODING_GZIP)
                   ? mf__coding_q(q->gzip, q->star)
                   : 0;
    /* Identity not named ranks below every accepted coding: 0 here, as
     * a coding wins a tie with it anyway. */
    int identity = q->identity >= 0 ? q->identity : 0;
    int best = br > gzip ? br : gzip;
    if (best == 0 || best < identity)
        return MF_HTTP_CODING_IDENTITY;
    return br >= gzip ? MF_HTTP_CODING_BR : MF_HTTP_CODING_GZIP;
}

mf_http_coding_t mf_http_accept_encoding(const char *value, size_t len,
                                         unsigned offered)
{
    if (!value)
        return MF_HTTP_CODING_IDENTITY; /* no field: the server's choice */
    mf_accept_q_t q = {-1, -1, -1, -1};
    mf__accept_parse(value, len, &q);
    return mf__accept_pick(&q, offered);
}

mf_http_coding_t mf__http_accept_encoding_fields(const mf_http_header_t *h,
                                                 size_t n, unsigned offered)
{
    mf_accept_q_t q = {-1, -1, -1, -1};
    bool named = false;
    for (size_t i = 0; i < n; i++) {
        if (h[i].name_len == 15 &&
            strncasecmp(h[i].name, "accept-encoding", 15) == 0) {
            mf__accept_parse(h[i].value, h[i].value_len, &q);
            named = true;
        }
    }
    return named ? mf__accept_pick(&q, offered) : MF_HTTP_CODING_IDENTITY;
}

/* ---- the type check ------------------------------------------------------ */

bool mf__http_compress_type_listed(const mf_http_compress_config_t *config,
                                   const char *value, size_t len)
{
    size_t end = 0;
    while (end < len && value[end] != ';')
        end++;
    while (end && mf__is_ows(value[end - 1]))
        end--;
    size_t start = 0;
    while (start < end && mf__is_ows(value[start]))
        start++;
    for (unsigned i = 0; i < config->ntypes; i++)
        if (mf__token_is(value + start, end - start, config->types[i]))
            return true;
    return false;
}

/* ---- the pool: encoders and the libraries' blocks ------------------------ */

/* A library block: its size before it, for the free calls that do not
 * say it. 16 bytes keep the caller's memory aligned for any type. */
typedef struct mf_block {
    size_t size;
    struct mf_block *next; /* while idle */
} mf_block_t;
_Static_assert(sizeof(mf_block_t) == 16, "blocks keep 16-byte alignment");

struct mf_http_encoder {
    mf_http_compress_pool_t *pool;
    mf_http_encoder_t *next; /* while idle */
    mf_http_coding_t coding;
    bool finished;
    bool z_ready; /* z holds an initialised deflate stream */
    int z_level;
    z_stream z;
    BrotliEncoderState *br;
};

struct mf_http_compress_pool {
    mf_block_t *blocks; /* idle, any size */
    unsigned nblocks;
    size_t idle_bytes;           /* of the idle blocks */
    mf_http_encoder_t *encoders; /* idle; a gzip one keeps its deflate
                                    stream (brotli's state has no reset:
                                    its blocks come back instead) */
    unsigned nencoders;
    size_t bytes; /* held by the libraries, in use or idle */
};

/* A block of size bytes: an idle one of that size, else a new one. The
 * libraries ask for the same few sizes again and again, so the idle list
 * stays short and a warm pool finds its sizes there. */
static void *mf__pool_alloc(mf_http_compress_pool_t *pool, size_t size)
{
    for (mf_block_t **b = &pool->blocks; *b; b = &(*b)->next) {
        if ((*b)->size == size) {
            mf_block_t *found = *b;
            *b = found->next;
            pool->nblocks--;
            pool->idle_bytes -= size;
            return found + 1;
        }
    }
    if (size > SIZE_MAX - sizeof(mf_block_t))
        return NULL;
    mf_block_t *block = mf_try_malloc(sizeof(mf_block_t) + size);
    if (!block)
        return NULL;
    block->size = size;
    pool->bytes += size;
    return block + 1;
}

static void mf__pool_free(mf_http_compress_pool_t *pool, void *p)
{
    if (!p)
        return;
    mf_block_t *block = (mf_block_t *)p - 1;
    if (pool->nblocks < MF_HTTP_BLOCKS_IDLE &&
        block->size <= MF_HTTP_BLOCKS_IDLE_BYTES - pool->idle_bytes) {
        block->next = pool->blocks;
        pool->blocks = block;
        pool->nblocks++;
        pool->idle_bytes += block->size;
        return;
    }
    pool->bytes -= block->size;
    mf_free(block);
}

static voidpf mf__zalloc(voidpf opaque, uInt items, uInt size)
{
    if (size && items > SIZE_MAX / size)
        return Z_NULL;
    return mf__pool_alloc(opaque, (size_t)items * size);
}

static void mf__zfree(voidpf opaque, voidpf p)
{
    mf__pool_free(opaque, p);
}

static void *mf__brotli_alloc(void *opaque, size_t size)
{
    return mf__pool_alloc(opaque, size);
}

static void mf__brotli_free(void *opaque, void *p)
{
    mf__pool_free(opaque, p);
}

mf_http_compress_pool_t *mf__http_compress_pool_create(void)
{
    mf_http_compress_pool_t *pool = mf_try_malloc(sizeof(*pool));
    if (pool)
        memset(pool, 0, sizeof(*pool));
    return pool;
}

static void mf__encoder_free(mf_http_encoder_t *enc)
{
    if (enc->z_ready)
        deflateEnd(&enc->z);
    if (enc->br)
        BrotliEncoderDestroyInstance(enc->br);
    mf_free(enc);
}

void mf__http_compress_pool_destroy(mf_http_compress_pool_t *pool)
{
    if (!pool)
        return;
    while (pool->encoders) {
        mf_http_encoder_t *enc = pool->encoders;
        pool->encoders = enc->next;
        mf__encoder_free(enc);
    }
    while (pool->blocks) {
        mf_block_t *block = pool->blocks;
        pool->blocks = block->next;
        mf_free(block);
    }
    mf_free(pool);
}

size_t mf__http_compress_pool_bytes(const mf_http_compress_pool_t *pool)
{
    return pool->bytes;
}

size_t mf__http_compress_pool_idle_bytes(const mf_http_compress_pool_t *pool)
{
    return pool->idle_bytes;
}

/* ---- encoders ------------------------------------------------------------ */

static int mf__clamp(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* A deflate stream at level: an idle one reset (and its level changed if
 * need be), else a new one. 0 or MF_ENOMEM. */
static int mf__encoder_gzip_start(mf_http_encoder_t *enc, int level)
{
    if (enc->z_ready) {
        if (deflateReset(&enc->z) != Z_OK)
            return MF_ENOMEM;
        if (enc->z_level != level &&
            deflateParams(&enc->z, level, Z_DEFAULT_STRATEGY) != Z_OK)
            return MF_ENOMEM;
        enc->z_level = level;
        return 0;
    }
    memset(&enc->z, 0, sizeof(enc->z));
    enc->z.zalloc = mf__zalloc;
    enc->z.zfree = mf__zfree;
    enc->z.opaque = enc->pool;
    if (deflateInit2(&enc->z, level, Z_DEFLATED, MF_HTTP_GZIP_WINDOW_BITS,
                     MF_HTTP_GZIP_MEM_LEVEL, Z_DEFAULT_STRATEGY) != Z_OK)
        return MF_ENOMEM;
    enc->z_ready = true;
    enc->z_level = level;
    return 0;
}

static int mf__encoder_brotli_start(mf_http_encoder_t *enc, int level)
{
    enc->br = BrotliEncoderCreateInstance(mf__brotli_alloc, mf__brotli_free,
                                          enc->pool);
    if (!enc->br)
        return MF_ENOMEM;
    BrotliEncoderSetParameter(enc->br, BROTLI_PARAM_QUALITY, (uint32_t)level);
    BrotliEncoderSetParameter(enc->br, BROTLI_PARAM_LGWIN,
                              MF_HTTP_BROTLI_LGWIN);
    return 0;
}

mf_http_encoder_t *mf__http_encoder_open(mf_http_compress_pool_t *pool,
                                         mf_http_coding_t coding, int level)
{
    mf_http_encoder_t *enc = NULL;
    if (pool->encoders) {
        enc = pool->encoders;
        pool->encoders = enc->next;
        pool->nencoders--;
    } else {
        enc = mf_try_malloc(sizeof(*enc));
        if (!enc)
            return NULL;
        memset(enc, 0, sizeof(*enc));
        enc->pool = pool;
    }
    enc->coding = coding;
    enc->finished = false;
    int rc = coding == MF_HTTP_CODING_GZIP
                 ? mf__encoder_gzip_start(enc, mf__clamp(level, 1, 9))
                 : mf__encoder_brotli_start(enc, mf__clamp(level, 0, 11));
    if (rc < 0) {
        mf__encoder_free(enc);
        return NULL;
    }
    return enc;
}

void mf__http_encoder_close(mf_http_encoder_t *enc)
{
    if (!enc)
        return;
    mf_http_compress_pool_t *pool = enc->pool;
    if (enc->br) { /* no reset in brotli: its blocks go back instead */
        BrotliEncoderDestroyInstance(enc->br);
        enc->br = NULL;
    }
    if (pool->nencoders >= MF_HTTP_ENCODERS_IDLE) {
        mf__encoder_free(enc);
        return;
    }
    enc->next = pool->encoders;
    pool->encoders = enc;
    pool->nencoders++;
}

static int mf__step_gzip(mf_http_encoder_t *enc, const void *in, size_t in_len,
                         size_t *consumed, void *out, size_t cap,
                         size_t *written, mf_http_encode_op_t op)
{
    z_stream *z = &enc->z;
    /* zlib counts in uInt: a step takes at most UINT_MAX each way. */
    uInt in_n = in_len > UINT_MAX ? UINT_MAX : (uInt)in_len;
    uInt out_n = cap > UINT_MAX ? UINT_MAX : (uInt)cap;
    z->next_in = (Bytef *)(uintptr_t)in;
    z->avail_in = in_n;
    z->next_out = out;
    z->avail_out = out_n;
    bool all_in = in_n == in_len;
    int flush = op == MF_HTTP_ENCODE_FINISH && all_in ? Z_FINISH : Z_SYNC_FLUSH;
    int rc = deflate(z, flush);
    *consumed = in_n - z->avail_in;
    *written = out_n - z->avail_out;
    if (rc == Z_STREAM_END) {
        enc->finished = true;
        return 0;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR)
        return MF_EINVAL;
    /* Done once all input is in and deflate left room in out: it wrote
     * everything it had (zlib's rule for a flush). */
    if (all_in && z->avail_in == 0 && z->avail_out > 0 && flush != Z_FINISH)
        return 0;
    return 1;
}

static int mf__step_brotli(mf_http_encoder_t *enc, const void *in,
                           size_t in_len, size_t *consumed, void *out,
                           size_t cap, size_t *written, mf_http_encode_op_t op)
{
    const uint8_t *next_in = in;
    size_t avail_in = in_len;
    uint8_t *next_out = out;
    size_t avail_out = cap;
    BrotliEncoderOperation bop = op == MF_HTTP_ENCODE_FINISH
                                     ? BROTLI_OPERATION_FINISH
                                     : BROTLI_OPERATION_FLUSH;
    if (!BrotliEncoderCompressStream(enc->br, bop, &avail_in, &next_in,
                                     &avail_out, &next_out, NULL))
        return MF_EINVAL;
    *consumed = in_len - avail_in;
    *written = cap - avail_out;
    if (avail_in || BrotliEncoderHasMoreOutput(enc->br))
        return 1;
    if (op == MF_HTTP_ENCODE_FINISH) {
        if (!BrotliEncoderIsFinished(enc->br))
            return 1;
        enc->finished = true;
    }
    return 0;
}

int mf__http_encoder_step(mf_http_encoder_t *enc, const void *in, size_t in_len,
                          size_t *consumed, void *out, size_t cap,
                          size_t *written, mf_http_encode_op_t op)
{
    *consumed = 0;
    *written = 0;
    if (enc->finished || cap < MF_HTTP_ENCODE_MIN_ROOM)
        return MF_EINVAL;
    if (enc->coding == MF_HTTP_CODING_GZIP)
        return mf__step_gzip(enc, in, in_len, consumed, out, cap, written, op);
    return mf__step_brotli(enc, in, in_len, consumed, out, cap, written, op);
}

size_t mf__http_encode_room(size_t len)
{
    /* Incompressible input grows by a few bytes per 16 KiB block; a sync
     * flush adds 5, the gzip header and trailer 18. */
    return len + len / 64 + 64;
}
