/* Response compression: the Accept-Encoding chooser (RFC 9110 §12.5.3)
 * as data, the gzip and brotli encoders checked by zlib's and libbrotli's
 * decoders piece by piece, the pool's reuse and memory bound, and the
 * exchange's step (choice, Vary, Content-Encoding, weakened ETag). */
#include <moonflow/http_compress.h>
#include <moonflow/loop.h>

#include "http/decode_check.h"
#include "http/http_compress.h"
#include "http/http_compress_filter.h"
#include "test.h"

#define GZ (1u << MF_HTTP_CODING_GZIP)
#define BR (1u << MF_HTTP_CODING_BR)

static const struct {
    const char *value; /* NULL: no Accept-Encoding */
    unsigned offered;
    mf_http_coding_t want;
} accept_cases[] = {
    {NULL, GZ | BR, MF_HTTP_CODING_IDENTITY},
    {"", GZ | BR, MF_HTTP_CODING_IDENTITY},
    {"gzip", GZ | BR, MF_HTTP_CODING_GZIP},
    {"gzip", BR, MF_HTTP_CODING_IDENTITY},
    {"GZip", GZ, MF_HTTP_CODING_GZIP},
    {"x-gzip", GZ, MF_HTTP_CODING_GZIP},
    {"gzip, deflate, br", GZ | BR, MF_HTTP_CODING_BR},
    {"gzip, deflate, br", GZ, MF_HTTP_CODING_GZIP},
    {"gzip;q=0", GZ | BR, MF_HTTP_CODING_IDENTITY},
    {"gzip;q=0, br", GZ | BR, MF_HTTP_CODING_BR},
    {"gzip;q=1, br;q=0.5", GZ | BR, MF_HTTP_CODING_GZIP},
    {"gzip ; Q=0.2 , br ;q=0.3", GZ | BR, MF_HTTP_CODING_BR},
    {"br;q=0.5, gzip;q=0.5", GZ | BR, MF_HTTP_CODING_BR},
    {"identity", GZ | BR, MF_HTTP_CODING_IDENTITY},
    {"identity, gzip;q=0.5", GZ | BR, MF_HTTP_CODING_IDENTITY},
    {"identity;q=0.5, gzip", GZ | BR, MF_HTTP_CODING_GZIP},
    {"identity;q=1, gzip;q=1", GZ, MF_HTTP_CODING_GZIP},
    {"*", GZ | BR, MF_HTTP_CODING_BR},
    {"*", GZ, MF_HTTP_CODING_GZIP},
    {"*;q=0", GZ | BR, MF_HTTP_CODING_IDENTITY},
    {"*;q=0, gzip", GZ | BR, MF_HTTP_CODING_GZIP},
    {"*, br;q=0", GZ | BR, MF_HTTP_CODING_GZIP},
    {"gzip;q=0.001", GZ, MF_HTTP_CODING_GZIP},
    {"gzip;q=1.000", GZ, MF_HTTP_CODING_GZIP},
    /* malformed members are skipped, not the whole list */
    {"gzip;q=2", GZ, MF_HTTP_CODING_IDENTITY},
    {"gzip;q=1.5, br", GZ | BR, MF_HTTP_CODING_BR},
    {"gzip;q=0.1234", GZ, MF_HTTP_CODING_IDENTITY},
    {"gzip;q=", GZ, MF_HTTP_CODING_IDENTITY},
    {"gzip;level=1", GZ, MF_HTTP_CODING_IDENTITY},
    {",,gzip,,", GZ, MF_HTTP_CODING_GZIP},
    {"gzipx, brr", GZ | BR, MF_HTTP_CODING_IDENTITY},
    /* a coding named twice keeps its first weight */
    {"gzip;q=0, gzip", GZ, MF_HTTP_CODING_IDENTITY},
};

TEST(accept_encoding_follows_q_values_identity_and_star)
{
    for (size_t i = 0; i < sizeof accept_cases / sizeof accept_cases[0]; i++) {
        const char *v = accept_cases[i].value;
        mf_http_coding_t got = mf_http_accept_encoding(v, v ? strlen(v) : 0,
                                                       accept_cases[i].offered);
        if (got != accept_cases[i].want)
            MF_TEST_FAIL("\"%s\" (offered %u): %d, want %d", v ? v : "(none)",
                         accept_cases[i].offered, (int)got,
                         (int)accept_cases[i].want);
    }
}

TEST(several_accept_encoding_lines_are_one_list)
{
    mf_http_header_t h[] = {
        {"Host", 4, "t", 1},
        {"Accept-Encoding", 15, "gzip;q=0.5", 10},
        {"accept-encoding", 15, "br;q=0.9, gzip", 14},
    };
    /* gzip keeps its first weight; br, named on the second line, wins */
    ASSERT_EQ(mf__http_accept_encoding_fields(h, 3, GZ | BR),
              MF_HTTP_CODING_BR);
    ASSERT_EQ(mf__http_accept_encoding_fields(h, 3, GZ), MF_HTTP_CODING_GZIP);
    ASSERT_EQ(mf__http_accept_encoding_fields(h, 1, GZ | BR),
              MF_HTTP_CODING_IDENTITY); /* no field */
}

TEST(types_compare_without_case_or_parameters)
{
    mf_http_compress_config_t c;
    mf_http_compress_config_init(&c);
    ASSERT(mf__http_compress_type_listed(&c, "text/html", 9));
    ASSERT(mf__http_compress_type_listed(&c, " Text/HTML ; charset=utf-8", 26));
    ASSERT(mf__http_compress_type_listed(&c, "application/json", 16));
    ASSERT(!mf__http_compress_type_listed(&c, "image/png", 9));
    ASSERT(!mf__http_compress_type_listed(&c, "text/htmlx", 10));
    ASSERT(!mf__http_compress_type_listed(&c, "", 0));
}

static unsigned char input[1 << 20];
static unsigned char decoded[(1 << 20) + 1];
static unsigned char packed[(1 << 20) + 4096];

/* Text that compresses like a page, with some noise. */
static void fill_input(size_t n, unsigned seed)
{
    static const char words[] = "moonflow serves compressed answers ";
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        input[i] = (seed >> 24) % 7 == 0 ? (unsigned char)(seed >> 16)
                                         : (unsigned char)words[i % 35];
    }
}

/* n bytes through a fresh encoder in pieces of piece bytes, each flushed;
 * after every piece the decoder has everything sent so far. Returns the
 * compressed size. */
static size_t round_trip(mf_http_compress_pool_t *pool, mf_http_coding_t coding,
                         int level, size_t n, size_t piece)
{
    mf_http_encoder_t *enc = mf__http_encoder_open(pool, coding, level);
    ASSERT(enc != NULL);
    mf_decode_check_t d;
    ASSERT(mf_decode_check_init(&d, coding, decoded, sizeof decoded));
    size_t at = 0, total = 0;
    do {
        size_t len = n - at < piece ? n - at : piece;
        bool last = at + len == n;
        const unsigned char *in = input + at;
        size_t left = len;
        int rc;
        do { /* a small room on purpose: the step says when it is full */
            size_t used, written;
            rc = mf__http_encoder_step(
                enc, in, left, &used, packed, 700, &written,
                last ? MF_HTTP_ENCODE_FINISH : MF_HTTP_ENCODE_FLUSH);
            ASSERT(rc >= 0);
            in += used;
            left -= used;
            total += written;
            mf_decode_check_feed(&d, packed, written);
        } while (rc == 1);
        ASSERT(left == 0);
        at += len;
        ASSERT(!d.failed);
        ASSERT_EQ(d.len, at); /* flushed: nothing waits for the next piece */
    } while (at < n);
    ASSERT(d.ended);
    ASSERT(memcmp(decoded, input, n) == 0);
    size_t used, written;
    ASSERT_EQ(mf__http_encoder_step(enc, "x", 1, &used, packed, 100, &written,
                                    MF_HTTP_ENCODE_FLUSH),
              MF_EINVAL); /* finished */
    mf_decode_check_close(&d);
    mf__http_encoder_close(enc);
    return total;
}

TEST(gzip_and_brotli_streams_decode_after_every_flushed_piece)
{
    mf_http_compress_pool_t *pool = mf__http_compress_pool_create();
    ASSERT(pool != NULL);
    fill_input(sizeof input, 7);
    static const size_t sizes[] = {0, 1, 100, 5000, 65536, sizeof input};
    static const size_t pieces[] = {1, 333, 4096, 1 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
            if (sizes[s] / pieces[p] > 20000)
                continue; /* a megabyte byte by byte adds nothing */
            round_trip(pool, MF_HTTP_CODING_GZIP, 6, sizes[s], pieces[p]);
            round_trip(pool, MF_HTTP_CODING_BR, 4, sizes[s], pieces[p]);
        }
    size_t gz = round_trip(pool, MF_HTTP_CODING_GZIP, 6, 65536, 65536);
    size_t br = round_trip(pool, MF_HTTP_CODING_BR, 4, 65536, 65536);
    printf("# 64 KiB of text: gzip 6 %zu bytes, br 4 %zu\n", gz, br);
    ASSERT(gz < 65536 / 2 && br < 65536 / 2); /* it compresses */
    mf__http_compress_pool_destroy(pool);
}

TEST(a_warm_pool_allocates_nothing_more_and_stays_bounded)
{
    mf_http_compress_pool_t *pool = mf__http_compress_pool_create();
    fill_input(65536, 3);
    round_trip(pool, MF_HTTP_CODING_GZIP, 6, 65536, 4096);
    size_t gzip_bytes = mf__http_compress_pool_bytes(pool);
    round_trip(pool, MF_HTTP_CODING_BR, 4, 65536, 4096);
    size_t both = mf__http_compress_pool_bytes(pool);
    printf("# library memory: gzip encoder %zu bytes, + brotli q4 %zu\n",
           gzip_bytes, both - gzip_bytes);
    /* 2^17 window + 2^17 hash + zlib's pending buffer and state */
    ASSERT(gzip_bytes <= 300 * 1024);
    ASSERT(both - gzip_bytes <= 2 * 1024 * 1024);
    uint64_t before = mf_alloc_count();
    for (int i = 0; i < 50; i++) {
        round_trip(pool, MF_HTTP_CODING_GZIP, i % 2 ? 1 : 6, 65536, 4096);
        round_trip(pool, MF_HTTP_CODING_BR, 4, 65536, 4096);
    }
    ASSERT_EQ(mf_alloc_count(), before); /* no malloc per response */
    ASSERT_EQ(mf__http_compress_pool_bytes(pool), both);
    mf__http_compress_pool_destroy(pool);
}

TEST(a_room_too_small_for_a_flush_marker_is_refused)
{
    mf_http_compress_pool_t *pool = mf__http_compress_pool_create();
    mf_http_encoder_t *enc =
        mf__http_encoder_open(pool, MF_HTTP_CODING_GZIP, 6);
    size_t used, written;
    ASSERT_EQ(mf__http_encoder_step(enc, "", 0, &used, packed,
                                    MF_HTTP_ENCODE_MIN_ROOM - 1, &written,
                                    MF_HTTP_ENCODE_FLUSH),
              MF_EINVAL);
    /* the least room ends a flush of nothing, where one byte never did */
    int rc, steps = 0;
    do {
        rc = mf__http_encoder_step(enc, "", 0, &used, packed,
                                   MF_HTTP_ENCODE_MIN_ROOM, &written,
                                   MF_HTTP_ENCODE_FLUSH);
    } while (rc == 1 && ++steps < 100);
    ASSERT_EQ(rc, 0);
    mf__http_encoder_close(enc);
    mf__http_compress_pool_destroy(pool);
}

TEST(many_encoders_at_once_leave_a_bounded_pool_behind)
{
    mf_http_compress_pool_t *pool = mf__http_compress_pool_create();
    mf_http_encoder_t *open[20];
    fill_input(5000, 5);
    for (int i = 0; i < 20; i++) {
        open[i] = mf__http_encoder_open(
            pool, i % 2 ? MF_HTTP_CODING_BR : MF_HTTP_CODING_GZIP, 4);
        ASSERT(open[i] != NULL);
        size_t used, written; /* brotli allocates at its first input */
        ASSERT(mf__http_encoder_step(open[i], input, 5000, &used, packed,
                                     sizeof packed, &written,
                                     MF_HTTP_ENCODE_FLUSH) == 0);
    }
    size_t busy = mf__http_compress_pool_bytes(pool);
    for (int i = 0; i < 20; i++)
        mf__http_encoder_close(open[i]);
    size_t left = mf__http_compress_pool_bytes(pool);
    printf("# 20 encoders: %zu bytes in use, %zu kept idle\n", busy, left);
    ASSERT(mf__http_compress_pool_idle_bytes(pool) <=
           MF_HTTP_BLOCKS_IDLE_BYTES);
    /* the idle blocks, and at most 8 idle gzip encoders' deflate state */
    ASSERT(left <=
           MF_HTTP_BLOCKS_IDLE_BYTES + MF_HTTP_ENCODERS_IDLE * 300 * 1024);
    ASSERT(left < busy);
    mf__http_compress_pool_destroy(pool);
}

TEST(an_encoder_that_cannot_get_memory_is_refused_cleanly)
{
    mf_http_compress_pool_t *pool = mf__http_compress_pool_create();
    for (unsigned n = 1; n < 12; n++) {
        mf_alloc_fail_next(n);
        mf_http_encoder_t *enc =
            mf__http_encoder_open(pool, MF_HTTP_CODING_BR, 4);
        mf_alloc_fail_next(0);
        mf__http_encoder_close(enc); /* NULL or whole: both go back */
    }
    fill_input(5000, 1);
    round_trip(pool, MF_HTTP_CODING_GZIP, 6, 5000, 5000); /* still works */
    mf__http_compress_pool_destroy(pool);
}

/* ---- the exchange's step ------------------------------------------------ */

typedef struct answer {
    mf_loop_t *loop;
    mf_http_compress_config_t config;
    mf_http_header_t req_headers[2];
    mf_http_request_t req;
    mf_buf_t lines;
    const char *statics[1];
    uint16_t static_lens[1];
    mf_http_compress_answer_t a;
} answer_t;

static void answer_init(answer_t *t, const char *method, const char *accept,
                        const char *lines)
{
    memset(t, 0, sizeof(*t));
    t->loop = mf_loop_create();
    mf_http_compress_config_init(&t->config);
    t->req.method = method;
    t->req.method_len = strlen(method);
    if (accept)
        t->req_headers[t->req.num_headers++] =
            (mf_http_header_t){"Accept-Encoding", 15, accept, strlen(accept)};
    t->req.headers = t->req_headers;
    ASSERT(mf__buf_append(t->loop, &t->lines, lines, strlen(lines)) == 0);
    t->a = (mf_http_compress_answer_t){.config = &t->config,
                                       .req = &t->req,
                                       .status = 200,
                                       .lines = &t->lines,
                                       .static_lines = t->statics,
                                       .static_lens = t->static_lens};
}

static void answer_close(answer_t *t)
{
    mf__buf_release(t->loop, &t->lines);
    mf_loop_destroy(t->loop);
}

static mf_http_coding_t choose(answer_t *t, bool known, uint64_t len,
                               bool *vary)
{
    return mf__http_compress_choose(&t->a, known, len, vary);
}

TEST(the_step_compresses_only_listed_long_bodies_with_bodies)
{
    answer_t t;
    bool vary;
    answer_init(&t, "GET", "gzip, br", "Content-Type: text/html\r\n");
    ASSERT_EQ(choose(&t, true, 2000, &vary), MF_HTTP_CODING_BR);
    ASSERT(vary);
    ASSERT_EQ(choose(&t, true, 1023, &vary), MF_HTTP_CODING_IDENTITY);
    ASSERT(!vary); /* too short: the client's header decided nothing */
    ASSERT_EQ(choose(&t, false, 0, &vary), MF_HTTP_CODING_BR); /* stream */
    t.config.brotli = false;
    ASSERT_EQ(choose(&t, true, 2000, &vary), MF_HTTP_CODING_GZIP);
    static const int no_body[] = {101, 204, 206, 304};
    for (size_t i = 0; i < 4; i++) {
        t.a.status = no_body[i];
        ASSERT_EQ(choose(&t, true, 2000, &vary), MF_HTTP_CODING_IDENTITY);
        ASSERT(!vary);
    }
    t.a.status = 404; /* an error page is compressed too */
    ASSERT_EQ(choose(&t, true, 2000, &vary), MF_HTTP_CODING_GZIP);
    answer_close(&t);

    answer_init(&t, "HEAD", "gzip", "Content-Type: text/html\r\n");
    ASSERT_EQ(choose(&t, true, 2000, &vary), MF_HTTP_CODING_IDENTITY);
    answer_close(&t);

    answer_init(&t, "GET", "gzip", "Content-Type: image/png\r\n");
    ASSERT_EQ(choose(&t, true, 2000, &vary), MF_HTTP_CODING_IDENTITY);
    ASSERT(!vary);
    answer_close(&t);

    answer_init(&t, "GET", "gzip",
                "Content-Type: text/html\r\nContent-Encoding: gzip\r\n");
    ASSERT_EQ(choose(&t, true, 2000, &vary), MF_HTTP_CODING_IDENTITY);
    answer_close(&t);

    answer_init(&t, "GET", NULL, "");
    t.statics[0] = "Content-Type: application/json\r\n";
    t.static_lens[0] = 32;
    t.a.nstatic = 1;
    ASSERT_EQ(choose(&t, true, 2000, &vary), MF_HTTP_CODING_IDENTITY);
    ASSERT(vary); /* listed and long: the (absent) header decided */
    answer_close(&t);
}

TEST(the_head_gets_vary_content_encoding_and_a_weak_etag)
{
    answer_t t;
    answer_init(&t, "GET", "gzip",
                "ETag: \"v1\"\r\nContent-Type: text/html\r\n");
    ASSERT(mf__http_compress_head(t.loop, &t.lines, MF_HTTP_CODING_GZIP,
                                  true) == 0);
    ASSERT(mf__buf_append(t.loop, &t.lines, "", 1) == 0);
    ASSERT_STR_EQ(t.lines.data,
                  "ETag: W/\"v1\"\r\nContent-Type: text/html\r\n"
                  "Vary: Accept-Encoding\r\nContent-Encoding: gzip\r\n");
    answer_close(&t);

    answer_init(&t, "GET", "br",
                "ETag: W/\"v1\"\r\nVary: Cookie, accept-encoding\r\n"
                "Content-Type: text/html\r\n");
    bool vary;
    ASSERT_EQ(choose(&t, true, 2000, &vary), MF_HTTP_CODING_BR);
    ASSERT(!vary); /* a Vary names it already */
    ASSERT(mf__http_compress_head(t.loop, &t.lines, MF_HTTP_CODING_BR, vary) ==
           0);
    ASSERT(mf__buf_append(t.loop, &t.lines, "", 1) == 0);
    ASSERT_STR_EQ(t.lines.data,
                  "ETag: W/\"v1\"\r\nVary: Cookie, accept-encoding\r\n"
                  "Content-Type: text/html\r\nContent-Encoding: br\r\n");
    answer_close(&t);

    answer_init(&t, "GET", "identity", "ETag: \"v1\"\r\n");
    ASSERT(mf__http_compress_head(t.loop, &t.lines, MF_HTTP_CODING_IDENTITY,
                                  true) == 0);
    ASSERT(mf__buf_append(t.loop, &t.lines, "", 1) == 0);
    ASSERT_STR_EQ(t.lines.data, "ETag: \"v1\"\r\nVary: Accept-Encoding\r\n");
    answer_close(&t);
}

TEST(whole_bodies_and_pieces_through_the_loop_decode)
{
    mf_loop_t *loop = mf_loop_create();
    mf_http_compress_config_t c;
    mf_http_compress_config_init(&c);
    fill_input(200000, 9);
    for (int coding = 1; coding <= 2; coding++) {
        mf_buf_t out = {0};
        ASSERT(mf__http_compress_whole(loop, &c, coding, input, 200000, &out) ==
               0);
        mf_decode_check_t d;
        ASSERT(mf_decode_check_init(&d, coding, decoded, sizeof decoded));
        mf_decode_check_feed(&d, out.data, out.len);
        ASSERT(d.ended && !d.failed && d.len == 200000);
        ASSERT(memcmp(decoded, input, 200000) == 0);
        mf_decode_check_close(&d);
        mf__buf_release(loop, &out);

        mf_http_encoder_t *enc = mf__http_compress_open(loop, &c, coding);
        ASSERT(mf_decode_check_init(&d, coding, decoded, sizeof decoded));
        for (size_t at = 0; at < 200000; at += 50000) {
            const char *piece;
            size_t n;
            ASSERT(mf__http_compress_piece(loop, enc, input + at, 50000, false,
                                           &piece, &n) == 0);
            mf_decode_check_feed(&d, piece, n);
            ASSERT_EQ(d.len, at + 50000);
        }
        const char *tail;
        size_t n;
        ASSERT(mf__http_compress_piece(loop, enc, NULL, 0, true, &tail, &n) ==
               0);
        mf_decode_check_feed(&d, tail, n);
        ASSERT(d.ended && !d.failed);
        mf_decode_check_close(&d);
        mf__http_compress_close(enc);
    }
    mf_loop_destroy(loop); /* frees the loop's pool */
}

TEST(a_whole_body_without_memory_fails_and_keeps_nothing)
{
    mf_loop_t *loop = mf_loop_create();
    mf_http_compress_config_t c;
    mf_http_compress_config_init(&c);
    fill_input(100000, 2);
    unsigned failed = 0;
    for (unsigned n = 1; n < 8; n++) {
        mf_buf_t out = {0};
        mf_alloc_fail_next(n);
        int rc = mf__http_compress_whole(loop, &c, MF_HTTP_CODING_GZIP, input,
                                         100000, &out);
        mf_alloc_fail_next(0);
        ASSERT(rc == 0 || rc == MF_ENOMEM);
        if (rc < 0) {
            ASSERT(out.data == NULL && out.len == 0); /* released */
            failed++;
        }
        mf__buf_release(loop, &out);
    }
    ASSERT(failed > 0);
    mf_buf_t out = {0}; /* and the loop's pool still works */
    ASSERT(mf__http_compress_whole(loop, &c, MF_HTTP_CODING_BR, input, 100000,
                                   &out) == 0);
    mf__buf_release(loop, &out);
    mf_loop_destroy(loop);
}
