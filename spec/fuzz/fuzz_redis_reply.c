/*
 * fuzz_redis_reply.c — libFuzzer target for the Redis reply adapter
 * (core/redis/redis_reply.c): hiredis's redisReader building mf_redis_reply_t
 * trees in arena memory.
 *
 * Input: byte 0 picks the arena limit (bit 0: 64 bytes, else 1 MiB: over
 * it a reply is discarded, as max_reply does) and byte 1 seeds the cut of
 * the rest into pieces. The rest is fed to our reader piece by piece and,
 * whole, to hiredis's own reader with its default reply objects. Every
 * reply we build must be a well-formed tree (strings NUL-terminated at
 * their length, arrays with their elements) and equal to hiredis's reply,
 * and both readers must fail on the same input, until our arena first
 * refuses memory: from there on only ours runs (hiredis's would allocate
 * what a header like "*91191111" asks for).
 *
 * The loop allocator is replaced by malloc here: the adapter only needs
 * memory, and the fuzz build compiles single files with clang.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "redis/redis_int.h"
#include "fuzz_check.h"

void *mf_loop_alloc(mf_loop_t *loop, size_t size)
{
    (void)loop;
    return malloc(size);
}

void mf_loop_free(mf_loop_t *loop, void *p, size_t size)
{
    (void)loop;
    (void)size;
    free(p);
}

static void check_tree(const mf_redis_reply_t *r, int depth)
{
    FUZZ_CHECK(depth < 16);
    switch (r->type) {
    case MF_REDIS_STATUS:
    case MF_REDIS_ERROR:
    case MF_REDIS_STRING:
        FUZZ_CHECK(r->str != NULL);
        FUZZ_CHECK(r->str[r->len] == 0);
        FUZZ_CHECK(memchr(r->str, 0, r->len) || 1); /* reads every byte */
        break;
    case MF_REDIS_ARRAY:
        FUZZ_CHECK(r->elements != NULL || r->len == 0);
        for (size_t i = 0; r->elements && i < r->len; i++)
            check_tree(&r->elements[i], depth + 1);
        break;
    case MF_REDIS_INTEGER:
    case MF_REDIS_NIL:
        break;
    default:
        FUZZ_CHECK(!"unknown reply type");
    }
}

/* Our tree against hiredis's redisReply. */
static void check_same(const mf_redis_reply_t *ours, const redisReply *ref)
{
    switch (ref->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        FUZZ_CHECK(ours->type ==
                   (ref->type == REDIS_REPLY_STRING   ? MF_REDIS_STRING
                    : ref->type == REDIS_REPLY_STATUS ? MF_REDIS_STATUS
                                                      : MF_REDIS_ERROR));
        FUZZ_CHECK(ours->len == ref->len);
        FUZZ_CHECK(memcmp(ours->str, ref->str, ref->len) == 0);
        break;
    case REDIS_REPLY_INTEGER:
        FUZZ_CHECK(ours->type == MF_REDIS_INTEGER);
        FUZZ_CHECK(ours->integer == ref->integer);
        break;
    case REDIS_REPLY_NIL:
        /* hiredis 0.14 gives "*-1" and "$-1" the same NIL reply; ours
         * tells a nil array (ARRAY without elements) from a nil string. */
        FUZZ_CHECK(ours->type == MF_REDIS_NIL ||
                   (ours->type == MF_REDIS_ARRAY && !ours->elements));
        break;
    case REDIS_REPLY_ARRAY:
        FUZZ_CHECK(ours->type == MF_REDIS_ARRAY && ours->elements);
        FUZZ_CHECK(ours->len == ref->elements);
        for (size_t i = 0; i < ref->elements; i++)
            check_same(&ours->elements[i], ref->element[i]);
        break;
    default:
        FUZZ_CHECK(!"unexpected hiredis reply type");
    }
}

/* The next piece length from a small xorshift generator. */
static size_t next_cut(uint32_t *state, size_t left)
{
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    size_t n = 1 + *state % 64;
    return n < left ? n : left;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    bool tight = data[0] & 1;
    uint32_t seed = 0x9e3779b9u ^ data[1];
    char *buf = fuzz_copy(data + 2, size - 2);
    size_t len = size - 2;

    mf_redis_arena_t arena;
    mf__redis_arena_init(&arena, tight ? 64 : 1 << 20);
    mf_redis_reply_t slot;
    mf_redis_sink_t sink = {&arena, &slot, false};
    redisReader *ours = mf__redis_reader_create(NULL, &sink);
    redisReader *ref = redisReaderCreate();
    FUZZ_CHECK(ours && ref);
    FUZZ_CHECK(redisReaderFeed(ref, buf, len) == REDIS_OK);

    bool failed = false, compare = true;
    for (size_t off = 0; off < len && !failed;) {
        size_t n = next_cut(&seed, len - off);
        FUZZ_CHECK(redisReaderFeed(ours, buf + off, n) == REDIS_OK);
        off += n;
        for (;;) {
            void *reply = NULL;
            if (redisReaderGetReply(ours, &reply) != REDIS_OK) {
                failed = true;
                break;
            }
            if (!reply)
                break;
            compare = compare && !sink.overflow;
            if (compare) {
                void *expected = NULL;
                FUZZ_CHECK(redisReaderGetReply(ref, &expected) == REDIS_OK);
                FUZZ_CHECK(expected != NULL);
                check_tree(&slot, 0);
                check_same(&slot, expected);
                freeReplyObject(expected);
            }
            mf__redis_arena_reset(NULL, &arena);
            sink.root = &slot;
            sink.overflow = false;
        }
    }
    if (failed && compare && !sink.overflow) { /* hiredis fails alike */
        void *expected = NULL;
        int rc;
        while ((rc = redisReaderGetReply(ref, &expected)) == REDIS_OK &&
               expected)
            freeReplyObject(expected);
        FUZZ_CHECK(rc == REDIS_ERR);
    }
    mf__redis_arena_reset(NULL, &arena);
    mf__redis_reader_free(ours);
    redisReaderFree(ref);
    free(buf);
    return 0;
}
