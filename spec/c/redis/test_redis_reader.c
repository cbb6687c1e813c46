/* The reply adapter over hiredis's reader, without a server: protocol cases
 * as data, each replayed at every split point of its bytes, must build the
 * same mf_redis_reply_t tree; a sink without a root discards; a sink over
 * its arena limit flags the overflow; malformed input is an error. */
#include <hiredis/hiredis.h>

#include <moonflow/moonflow.h>

#include "redis/redis_int.h"
#include "test.h"

static void put(char *out, size_t cap, const char *s, size_t n)
{
    size_t len = strlen(out);
    if (len + n + 1 > cap)
        n = cap - len - 1;
    memcpy(out + len, s, n);
    out[len + n] = 0;
}

static void render(char *out, size_t cap, const mf_redis_reply_t *r)
{
    char num[32];
    switch (r->type) {
    case MF_REDIS_NIL:
        put(out, cap, "nil", 3);
        return;
    case MF_REDIS_STATUS:
    case MF_REDIS_ERROR:
    case MF_REDIS_STRING:
        put(out, cap,
            r->type == MF_REDIS_STATUS  ? "+"
            : r->type == MF_REDIS_ERROR ? "-"
                                        : "$",
            1);
        for (size_t i = 0; i < r->len; i++)
            put(out, cap, r->str[i] ? &r->str[i] : "\\0", r->str[i] ? 1 : 2);
        ASSERT(r->str[r->len] == 0);
        return;
    case MF_REDIS_INTEGER:
        snprintf(num, sizeof num, ":%lld", r->integer);
        put(out, cap, num, strlen(num));
        return;
    case MF_REDIS_ARRAY:
        if (!r->elements) {
            put(out, cap, "*nil", 4);
            return;
        }
        put(out, cap, "[", 1);
        for (size_t i = 0; i < r->len; i++) {
            if (i)
                put(out, cap, ",", 1);
            render(out, cap, &r->elements[i]);
        }
        put(out, cap, "]", 1);
        return;
    }
}

typedef struct rcase {
    const char *bytes;
    size_t len; /* 0: strlen */
    const char *want;
} rcase_t;

static const rcase_t cases[] = {
    {"+OK\r\n", 0, "+OK"},
    {"-ERR wrong type\r\n", 0, "-ERR wrong type"},
    {":-42\r\n", 0, ":-42"},
    {":9223372036854775807\r\n", 0, ":9223372036854775807"},
    {"$5\r\nhello\r\n", 0, "$hello"},
    {"$0\r\n\r\n", 0, "$"},
    {"$5\r\na\0b\r\n\r\n", 11, "$a\\0b\r\n"},
    {"$-1\r\n", 0, "nil"},
    {"*-1\r\n", 0, "*nil"},
    {"*0\r\n", 0, "[]"},
    {"*3\r\n:1\r\n$-1\r\n*2\r\n+a\r\n*0\r\n", 0, "[:1,nil,[+a,[]]]"},
    {"*2\r\n*1\r\n*1\r\n*1\r\n:7\r\n-E\r\n", 0, "[[[[:7]]],-E]"},
};

/* Feeds bytes[0..split) and bytes[split..len) and expects one reply. */
static void replay(const rcase_t *c, size_t len, size_t split)
{
    mf_loop_t *loop = mf_loop_create();
    mf_redis_arena_t arena;
    mf_redis_reply_t root;
    mf__redis_arena_init(&arena, 0);
    mf_redis_sink_t sink = {&arena, &root, false};
    redisReader *r = mf__redis_reader_create(loop, &sink);
    void *obj = NULL;
    ASSERT_EQ(redisReaderFeed(r, c->bytes, split), REDIS_OK);
    ASSERT_EQ(redisReaderGetReply(r, &obj), REDIS_OK);
    if (split < len) {
        if (obj)
            MF_TEST_FAIL("case %s: a reply after %zu bytes", c->want, split);
        ASSERT_EQ(redisReaderFeed(r, c->bytes + split, len - split), REDIS_OK);
        ASSERT_EQ(redisReaderGetReply(r, &obj), REDIS_OK);
    }
    ASSERT(obj == &root);
    char got[256] = "";
    render(got, sizeof got, &root);
    if (strcmp(got, c->want) != 0)
        MF_TEST_FAIL("split %zu: got \"%s\", want \"%s\"", split, got, c->want);
    mf__redis_reader_free(r);
    mf__redis_arena_reset(loop, &arena);
    mf_loop_destroy(loop);
}

TEST(every_case_parses_the_same_at_every_split_point)
{
    for (size_t i = 0; i < MF_ARRAY_SIZE(cases); i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].bytes);
        for (size_t split = 1; split <= len; split++)
            replay(&cases[i], len, split);
    }
}

TEST(a_sink_without_root_discards_and_the_next_reply_is_kept)
{
    mf_loop_t *loop = mf_loop_create();
    mf_redis_arena_t arena;
    mf_redis_reply_t root;
    mf__redis_arena_init(&arena, 0);
    mf_redis_sink_t sink = {&arena, NULL, false};
    redisReader *r = mf__redis_reader_create(loop, &sink);
    const char *in = "*2\r\n$3\r\nabc\r\n*1\r\n:1\r\n$2\r\nok\r\n";
    ASSERT_EQ(redisReaderFeed(r, in, strlen(in)), REDIS_OK);
    void *obj = NULL;
    ASSERT_EQ(redisReaderGetReply(r, &obj), REDIS_OK);
    ASSERT(obj != NULL && obj != &root);
    ASSERT_EQ(arena.total, 0); /* nothing was copied */
    sink.root = &root;
    ASSERT_EQ(redisReaderGetReply(r, &obj), REDIS_OK);
    ASSERT(obj == &root);
    ASSERT_EQ(root.type, MF_REDIS_STRING);
    ASSERT_STR_EQ(root.str, "ok");
    mf__redis_reader_free(r);
    mf__redis_arena_reset(loop, &arena);
    mf_loop_destroy(loop);
}

TEST(a_reply_over_the_arena_limit_flags_overflow_and_is_dropped)
{
    mf_loop_t *loop = mf_loop_create();
    mf_redis_arena_t arena;
    mf_redis_reply_t root;
    mf__redis_arena_init(&arena, 64);
    mf_redis_sink_t sink = {&arena, &root, false};
    redisReader *r = mf__redis_reader_create(loop, &sink);
    const char *in = "*3\r\n$4\r\nabcd\r\n$100\r\n"
                     "0123456789012345678901234567890123456789"
                     "0123456789012345678901234567890123456789"
                     "01234567890123456789\r\n:5\r\n";
    ASSERT_EQ(redisReaderFeed(r, in, strlen(in)), REDIS_OK);
    void *obj = NULL;
    ASSERT_EQ(redisReaderGetReply(r, &obj), REDIS_OK);
    ASSERT(obj != NULL);
    ASSERT(sink.overflow);
    ASSERT(arena.total <= 64);
    mf__redis_reader_free(r);
    mf__redis_arena_reset(loop, &arena);
    mf_loop_destroy(loop);
}

TEST(malformed_input_is_an_error)
{
    const char *bad[] = {"?x\r\n", ":12a\r\n", "$abc\r\n"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(bad); i++) {
        mf_loop_t *loop = mf_loop_create();
        mf_redis_arena_t arena;
        mf_redis_reply_t root;
        mf__redis_arena_init(&arena, 0);
        mf_redis_sink_t sink = {&arena, &root, false};
        redisReader *r = mf__redis_reader_create(loop, &sink);
        void *obj = NULL;
        ASSERT_EQ(redisReaderFeed(r, bad[i], strlen(bad[i])), REDIS_OK);
        if (redisReaderGetReply(r, &obj) == REDIS_OK)
            MF_TEST_FAIL("accepted %s", bad[i]);
        mf__redis_reader_free(r);
        mf__redis_arena_reset(loop, &arena);
        mf_loop_destroy(loop);
    }
}

TEST(arena_keeps_small_nodes_in_slab_chunks_and_big_blocks_apart)
{
    mf_loop_t *loop = mf_loop_create();
    mf_redis_arena_t a;
    mf__redis_arena_init(&a, 0);
    char *small = mf__redis_arena_alloc(loop, &a, 16);
    char *big = mf__redis_arena_alloc(loop, &a, 100000);
    char *small2 = mf__redis_arena_alloc(loop, &a, 16);
    ASSERT(small && big && small2);
    ASSERT_EQ(small2 - small, 16); /* the head chunk stayed in use */
    memset(big, 1, 100000);
    ASSERT_EQ(a.total, 100032);
    uint64_t before = mf_alloc_count();
    mf__redis_arena_reset(loop, &a);
    for (int i = 0; i < 100; i++) { /* warm: slab only, no malloc */
        ASSERT(mf__redis_arena_alloc(loop, &a, 200) != NULL);
        mf__redis_arena_reset(loop, &a);
    }
    ASSERT_EQ(mf_alloc_count(), before);
    mf_loop_destroy(loop);
}

/* Mutated cases must never crash or leak (the ASan twin watches); a
 * deterministic generator keeps the run bounded and reproducible. */
TEST(mutated_input_is_parsed_or_refused_but_never_crashes)
{
    uint32_t seed = 12345;
    mf_loop_t *loop = mf_loop_create();
    for (int round = 0; round < 20000; round++) {
        const rcase_t *c = &cases[round % MF_ARRAY_SIZE(cases)];
        char buf[64];
        size_t len = c->len ? c->len : strlen(c->bytes);
        memcpy(buf, c->bytes, len);
        for (int k = 0; k < 3; k++) {
            seed = seed * 1103515245u + 12345u;
            buf[(seed >> 8) % len] = (char)(seed >> 20);
        }
        mf_redis_arena_t arena;
        mf_redis_reply_t root;
        mf__redis_arena_init(&arena, 4096);
        mf_redis_sink_t sink = {&arena, &root, false};
        redisReader *r = mf__redis_reader_create(loop, &sink);
        void *obj = NULL;
        redisReaderFeed(r, buf, len);
        for (int k = 0; k < 4; k++)
            if (redisReaderGetReply(r, &obj) != REDIS_OK || !obj)
                break;
        mf__redis_reader_free(r);
        mf__redis_arena_reset(loop, &arena);
    }
    mf_loop_destroy(loop);
}

/* Our command encoding (written in place, no malloc per command) must be
 * byte for byte what hiredis's own formatter makes: hiredis is the oracle
 * here, over random binary argument vectors (NUL bytes, empty arguments,
 * lengths across digit counts). */
TEST(commands_encode_exactly_as_hiredis_formats_them)
{
    mf_loop_t *loop = mf_loop_create();
    unsigned seed = 12345;
    static char data[4][20000];
    for (int round = 0; round < 2000; round++) {
        int argc = 1 + (int)(rand_r(&seed) % 4);
        const char *argv[4];
        size_t lens[4];
        for (int i = 0; i < argc; i++) {
            size_t cap = round % 10 == 0 ? sizeof data[i] : 200;
            lens[i] = (size_t)rand_r(&seed) % cap;
            for (size_t k = 0; k < lens[i]; k++)
                data[i][k] = (char)(rand_r(&seed) & 0xff);
            argv[i] = data[i];
        }
        mf_buf_t ours;
        mf__buf_init(&ours);
        ASSERT_EQ(mf__redis_format(loop, &ours, argc, argv, lens), 0);
        char *ref = NULL;
        long long n = redisFormatCommandArgv(&ref, argc, argv, lens);
        ASSERT(n > 0);
        ASSERT_EQ(ours.len, (size_t)n);
        ASSERT(memcmp(ours.data, ref, ours.len) == 0);
        redisFreeCommand(ref);
        mf__buf_release(loop, &ours);
    }
    mf_loop_destroy(loop);
}
