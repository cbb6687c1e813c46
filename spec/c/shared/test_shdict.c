/*
 * test_shdict.c — the shared dict (moonflow/shdict.h): every operation and
 * its OpenResty answer, TTLs on a clock the test moves, LRU eviction order
 * and the forcible flag, safe stores, capacity accounting, lists, flushes,
 * keys, and two threads incrementing one key a million times each.
 */
#include <pthread.h>

#include <moonflow/error.h>
#include <moonflow/shdict.h>

#include "test.h"

static uint64_t fake_now = 1000;

static uint64_t fake_clock(void *ud)
{
    (void)ud;
    return fake_now;
}

static mf_shdict_t *make(size_t capacity, unsigned stripes)
{
    mf_shdict_opts_t o = {
        .capacity = capacity, .stripes = stripes, .clock = fake_clock};
    int err = 0;
    mf_shdict_t *d = mf_shdict_create(&o, &err);
    ASSERT(d != NULL);
    return d;
}

static mf_shdict_value_t str(const char *s)
{
    return (mf_shdict_value_t){
        .type = MF_SHDICT_STRING, .str = s, .len = strlen(s)};
}

static mf_shdict_value_t num(double n)
{
    return (mf_shdict_value_t){.type = MF_SHDICT_NUMBER, .number = n};
}

static int set(mf_shdict_t *d, const char *k, mf_shdict_value_t v, uint64_t ttl,
               unsigned mode, bool *forcible)
{
    bool f;
    return mf_shdict_store(d, k, strlen(k), &v, ttl, 0, mode,
                           forcible ? forcible : &f);
}

/* The string at k, or "" with the error's words. */
static mf_shdict_buf_t buf;
static const char *get_str(mf_shdict_t *d, const char *k)
{
    static char out[256];
    mf_shdict_value_t v;
    uint32_t flags;
    int rc = mf_shdict_get(d, k, strlen(k), false, &v, &flags, NULL, &buf);
    if (rc < 0)
        return mf_shdict_strerror(rc);
    ASSERT_EQ(v.type, MF_SHDICT_STRING);
    snprintf(out, sizeof out, "%.*s", (int)v.len, v.str);
    return out;
}

TEST(create_refuses_capacities_and_stripes_out_of_range)
{
    int err = 0;
    mf_shdict_opts_t o = {.capacity = 4096};
    ASSERT(mf_shdict_create(&o, &err) == NULL);
    ASSERT_EQ(err, MF_EINVAL);
    o = (mf_shdict_opts_t){.capacity = 1 << 20, .stripes = 3};
    ASSERT(mf_shdict_create(&o, &err) == NULL);
    o.stripes = 512;
    ASSERT(mf_shdict_create(&o, &err) == NULL);
    o.stripes = 0;
    mf_shdict_t *d = mf_shdict_create(&o, &err);
    ASSERT_EQ(mf_shdict_stripes(d), 4); /* one per 256 KiB */
    ASSERT_EQ(mf_shdict_capacity(d), 1 << 20);
    ASSERT(mf_shdict_free_space(d) > (1 << 20) * 9 / 10);
    mf_shdict_destroy(d);
    o.capacity = 8192;
    d = mf_shdict_create(&o, &err);
    ASSERT_EQ(mf_shdict_stripes(d), 1);
    mf_shdict_destroy(d);
}

TEST(get_returns_each_type_with_its_flags)
{
    mf_shdict_t *d = make(1 << 20, 0);
    bool forcible = true;
    mf_shdict_value_t v = str("hello"), out;
    ASSERT_EQ(mf_shdict_store(d, "s", 1, &v, 0, 7, 0, &forcible), 0);
    ASSERT(!forcible);
    v = num(2.5);
    ASSERT_EQ(mf_shdict_store(d, "n", 1, &v, 0, 0, 0, &forcible), 0);
    v = (mf_shdict_value_t){.type = MF_SHDICT_BOOLEAN, .boolean = true};
    ASSERT_EQ(mf_shdict_store(d, "b", 1, &v, 0, 0, 0, &forcible), 0);
    v = str("");
    ASSERT_EQ(mf_shdict_store(d, "e", 1, &v, 0, 0, 0, &forcible), 0);
    uint32_t flags = 0;
    ASSERT_EQ(mf_shdict_get(d, "s", 1, false, &out, &flags, NULL, &buf), 0);
    ASSERT_EQ(out.type, MF_SHDICT_STRING);
    ASSERT_EQ(out.len, 5);
    ASSERT(memcmp(out.str, "hello", 5) == 0);
    ASSERT_EQ(flags, 7);
    ASSERT_EQ(mf_shdict_get(d, "n", 1, false, &out, &flags, NULL, &buf), 0);
    ASSERT(out.type == MF_SHDICT_NUMBER && out.number == 2.5 && flags == 0);
    ASSERT_EQ(mf_shdict_get(d, "b", 1, false, &out, &flags, NULL, &buf), 0);
    ASSERT(out.type == MF_SHDICT_BOOLEAN && out.boolean);
    ASSERT_EQ(mf_shdict_get(d, "e", 1, false, &out, &flags, NULL, &buf), 0);
    ASSERT(out.type == MF_SHDICT_STRING && out.len == 0);
    ASSERT_EQ(mf_shdict_get(d, "x", 1, false, &out, &flags, NULL, &buf),
              MF_SHDICT_NOT_FOUND);
    ASSERT_EQ(mf_shdict_get(d, "", 0, false, &out, &flags, NULL, &buf),
              MF_SHDICT_BAD_KEY);
    mf_shdict_destroy(d);
}

TEST(set_overwrites_and_nil_deletes)
{
    mf_shdict_t *d = make(1 << 20, 0);
    ASSERT_EQ(set(d, "k", str("short"), 0, 0, NULL), 0);
    ASSERT_EQ(set(d, "k",
                  str("a much longer value than before, in a new "
                      "block of the arena"),
                  0, 0, NULL),
              0);
    ASSERT_STR_EQ(get_str(d, "k"),
                  "a much longer value than before, in a new block of the "
                  "arena");
    ASSERT_EQ(set(d, "k", str("s"), 0, 0, NULL), 0);
    ASSERT_STR_EQ(get_str(d, "k"), "s");
    mf_shdict_value_t nil = {.type = MF_SHDICT_NIL};
    bool f;
    ASSERT_EQ(mf_shdict_store(d, "k", 1, &nil, 0, 0, 0, &f), 0);
    ASSERT_STR_EQ(get_str(d, "k"), "not found");
    size_t n;
    ASSERT_EQ(mf_shdict_keys(d, 0, &buf, &n), 0);
    ASSERT_EQ(n, 0);
    mf_shdict_destroy(d);
}

TEST(add_and_replace_answer_exists_and_not_found)
{
    mf_shdict_t *d = make(1 << 20, 0);
    ASSERT_EQ(set(d, "k", str("1"), 0, MF_SHDICT_STORE_REPLACE, NULL),
              MF_SHDICT_NOT_FOUND);
    ASSERT_EQ(set(d, "k", str("1"), 0, MF_SHDICT_STORE_ADD, NULL), 0);
    ASSERT_EQ(set(d, "k", str("2"), 0, MF_SHDICT_STORE_ADD, NULL),
              MF_SHDICT_EXISTS);
    ASSERT_STR_EQ(get_str(d, "k"), "1");
    ASSERT_EQ(set(d, "k", str("3"), 0, MF_SHDICT_STORE_REPLACE, NULL), 0);
    ASSERT_STR_EQ(get_str(d, "k"), "3");
    /* an expired key is missing for both */
    ASSERT_EQ(set(d, "t", str("old"), 100, 0, NULL), 0);
    fake_now += 100;
    ASSERT_EQ(set(d, "t", str("r"), 0, MF_SHDICT_STORE_REPLACE, NULL),
              MF_SHDICT_NOT_FOUND);
    ASSERT_EQ(set(d, "t", str("new"), 0, MF_SHDICT_STORE_ADD, NULL), 0);
    ASSERT_STR_EQ(get_str(d, "t"), "new");
    ASSERT_STR_EQ(mf_shdict_strerror(MF_SHDICT_EXISTS), "exists");
    mf_shdict_destroy(d);
}

TEST(ttl_expire_and_stale_reads_follow_the_clock)
{
    mf_shdict_t *d = make(1 << 20, 0);
    ASSERT_EQ(set(d, "k", str("v"), 500, 0, NULL), 0);
    uint64_t ttl = 0;
    ASSERT_EQ(mf_shdict_ttl(d, "k", 1, &ttl), 0);
    ASSERT_EQ(ttl, 500);
    fake_now += 200;
    ASSERT_EQ(mf_shdict_ttl(d, "k", 1, &ttl), 0);
    ASSERT_EQ(ttl, 300);
    ASSERT_EQ(mf_shdict_expire(d, "k", 1, 1000), 0);
    fake_now += 999;
    ASSERT_STR_EQ(get_str(d, "k"), "v");
    fake_now += 1;
    ASSERT_STR_EQ(get_str(d, "k"), "not found");
    ASSERT_EQ(mf_shdict_ttl(d, "k", 1, &ttl), MF_SHDICT_NOT_FOUND);
    ASSERT_EQ(mf_shdict_expire(d, "k", 1, 10), MF_SHDICT_NOT_FOUND);
    mf_shdict_value_t out;
    uint32_t flags;
    bool stale = false;
    ASSERT_EQ(mf_shdict_get(d, "k", 1, true, &out, &flags, &stale, &buf), 0);
    ASSERT(stale && out.len == 1);
    /* expire 0: never */
    ASSERT_EQ(set(d, "p", str("v"), 10, 0, NULL), 0);
    ASSERT_EQ(mf_shdict_expire(d, "p", 1, 0), 0);
    fake_now += 100000;
    ASSERT_EQ(mf_shdict_ttl(d, "p", 1, &ttl), 0);
    ASSERT_EQ(ttl, 0);
    mf_shdict_destroy(d);
}

TEST(incr_adds_inits_and_refuses_other_types)
{
    mf_shdict_t *d = make(1 << 20, 0);
    double out = 0, init = 10;
    bool forcible;
    ASSERT_EQ(mf_shdict_incr(d, "n", 1, 1, NULL, 0, &out, &forcible),
              MF_SHDICT_NOT_FOUND);
    ASSERT_EQ(mf_shdict_incr(d, "n", 1, 1, &init, 100, &out, &forcible), 0);
    ASSERT(out == 11 && !forcible);
    ASSERT_EQ(mf_shdict_incr(d, "n", 1, -0.5, &init, 0, &out, &forcible), 0);
    ASSERT(out == 10.5);
    uint64_t ttl;
    ASSERT_EQ(mf_shdict_ttl(d, "n", 1, &ttl), 0);
    ASSERT_EQ(ttl, 100); /* init_ttl: only when it was made */
    fake_now += 100;
    ASSERT_EQ(mf_shdict_incr(d, "n", 1, 1, NULL, 0, &out, &forcible),
              MF_SHDICT_NOT_FOUND);
    ASSERT_EQ(mf_shdict_incr(d, "n", 1, 1, &init, 0, &out, &forcible), 0);
    ASSERT(out == 11);
    ASSERT_EQ(set(d, "s", str("x"), 0, 0, NULL), 0);
    ASSERT_EQ(mf_shdict_incr(d, "s", 1, 1, &init, 0, &out, &forcible),
              MF_SHDICT_NOT_A_NUMBER);
    mf_shdict_destroy(d);
}

TEST(lists_push_pop_and_refuse_other_values)
{
    mf_shdict_t *d = make(1 << 20, 0);
    size_t len = 0;
    mf_shdict_value_t v = str("b"), out;
    ASSERT_EQ(mf_shdict_push(d, "l", 1, true, &v, &len), 0);
    v = str("a");
    ASSERT_EQ(mf_shdict_push(d, "l", 1, true, &v, &len), 0);
    v = num(3);
    ASSERT_EQ(mf_shdict_push(d, "l", 1, false, &v, &len), 0);
    ASSERT_EQ(len, 3);
    ASSERT_EQ(mf_shdict_llen(d, "l", 1, &len), 0);
    ASSERT_EQ(len, 3);
    uint32_t flags;
    ASSERT_EQ(mf_shdict_get(d, "l", 1, false, &out, &flags, NULL, &buf),
              MF_SHDICT_IS_A_LIST);
    ASSERT_EQ(mf_shdict_pop(d, "l", 1, true, &out, &buf), 0);
    ASSERT(out.type == MF_SHDICT_STRING && out.len == 1 && out.str[0] == 'a');
    ASSERT_EQ(mf_shdict_pop(d, "l", 1, false, &out, &buf), 0);
    ASSERT(out.type == MF_SHDICT_NUMBER && out.number == 3);
    ASSERT_EQ(mf_shdict_pop(d, "l", 1, false, &out, &buf), 0);
    ASSERT(out.len == 1 && out.str[0] == 'b');
    /* the key went with its last item */
    ASSERT_EQ(mf_shdict_pop(d, "l", 1, false, &out, &buf), MF_SHDICT_NOT_FOUND);
    ASSERT_EQ(mf_shdict_llen(d, "l", 1, &len), 0);
    ASSERT_EQ(len, 0);
    ASSERT_EQ(set(d, "s", str("x"), 0, 0, NULL), 0);
    v = str("y");
    ASSERT_EQ(mf_shdict_push(d, "s", 1, true, &v, &len), MF_SHDICT_NOT_A_LIST);
    ASSERT_EQ(mf_shdict_pop(d, "s", 1, true, &out, &buf), MF_SHDICT_NOT_A_LIST);
    ASSERT_EQ(mf_shdict_llen(d, "s", 1, &len), MF_SHDICT_NOT_A_LIST);
    ASSERT_STR_EQ(mf_shdict_strerror(MF_SHDICT_NOT_A_LIST), "value not a list");
    v = (mf_shdict_value_t){.type = MF_SHDICT_BOOLEAN};
    ASSERT_EQ(mf_shdict_push(d, "l", 1, true, &v, &len), MF_SHDICT_BAD_VALUE);
    /* a set over a list replaces it */
    v = str("z");
    ASSERT_EQ(mf_shdict_push(d, "l2", 2, true, &v, &len), 0);
    ASSERT_EQ(set(d, "l2", str("plain"), 0, 0, NULL), 0);
    ASSERT_STR_EQ(get_str(d, "l2"), "plain");
    mf_shdict_destroy(d);
}

/* Fills a one-stripe dict with 100-byte values until one forced another
 * out; how many fit. */
static int fill_until_forced(mf_shdict_t *d, char (*keys)[16], int max)
{
    char value[101];
    memset(value, 'v', 100);
    value[100] = 0;
    for (int i = 0; i < max; i++) {
        bool forcible = false;
        snprintf(keys[i], 16, "key%04d", i); /* one size */
        ASSERT_EQ(set(d, keys[i], str(value), 0, 0, &forcible), 0);
        if (forcible)
            return i;
    }
    MF_TEST_FAIL("never full");
    return -1;
}

TEST(a_full_stripe_evicts_the_least_recently_used_and_says_so)
{
    mf_shdict_t *d = make(16384, 1);
    static char keys[400][16];
    int n = fill_until_forced(d, keys, 400);
    ASSERT(n > 50);
    /* key0 went first (never touched since) */
    ASSERT_STR_EQ(get_str(d, keys[0]), "not found");
    /* reading key1 makes it recent: key2 goes next, not key1 */
    ASSERT(strlen(get_str(d, keys[1])) == 100);
    bool forcible = false;
    ASSERT_EQ(set(d, "another", str(get_str(d, keys[5])), 0, 0, &forcible), 0);
    ASSERT(forcible);
    ASSERT_STR_EQ(get_str(d, keys[2]), "not found");
    ASSERT(strlen(get_str(d, keys[1])) == 100);
    /* a safe store refuses instead */
    ASSERT_EQ(set(d, "safe", str(get_str(d, keys[5])), 0,
                  MF_SHDICT_STORE_NO_EVICT, &forcible),
              MF_SHDICT_NO_MEMORY);
    ASSERT(!forcible);
    ASSERT_STR_EQ(get_str(d, "safe"), "not found");
    ASSERT_STR_EQ(mf_shdict_strerror(MF_SHDICT_NO_MEMORY), "no memory");
    mf_shdict_destroy(d);
}

TEST(expired_entries_go_before_live_ones_and_safe_stores_take_them)
{
    mf_shdict_t *d = make(16384, 1);
    static char keys[400][16];
    int n = fill_until_forced(d, keys, 400);
    /* the most recent one expires; the next store takes its room quietly */
    ASSERT_EQ(mf_shdict_expire(d, keys[1], strlen(keys[1]), 1), 0);
    fake_now += 1;
    bool forcible = true;
    ASSERT_EQ(set(d, "safe", str(get_str(d, keys[n])), 0,
                  MF_SHDICT_STORE_NO_EVICT, &forcible),
              0);
    ASSERT(!forcible);
    ASSERT(strlen(get_str(d, "safe")) == 100);
    mf_shdict_destroy(d);
}

TEST(a_value_bigger_than_the_stripe_is_no_memory_and_evicts_nothing)
{
    mf_shdict_t *d = make(16384, 1);
    ASSERT_EQ(set(d, "small", str("s"), 0, 0, NULL), 0);
    static char big[20000];
    memset(big, 'b', sizeof big - 1);
    bool forcible = true;
    ASSERT_EQ(set(d, "big", str(big), 0, 0, &forcible), MF_SHDICT_NO_MEMORY);
    ASSERT(!forcible);
    ASSERT_STR_EQ(get_str(d, "small"), "s");
    /* one that needs the old value's room too (the free space and a few
     * bytes of its entry's) takes it, the old key included */
    size_t room = mf_shdict_free_space(d);
    big[room - 40] = 0;
    ASSERT_EQ(set(d, "small", str(big), 0, 0, &forcible), 0);
    ASSERT(forcible);
    mf_shdict_value_t out;
    uint32_t flags;
    ASSERT_EQ(mf_shdict_get(d, "small", 5, false, &out, &flags, NULL, &buf), 0);
    ASSERT_EQ(out.len, room - 40);
    mf_shdict_destroy(d);
}

TEST(free_space_is_given_back_by_delete_and_flush_expired)
{
    mf_shdict_t *d = make(1 << 20, 0);
    size_t empty = mf_shdict_free_space(d);
    char k[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(k, sizeof k, "key%d", i);
        ASSERT_EQ(
            set(d, k, str("some value of thirty-two bytes.."), 100, 0, NULL),
            0);
    }
    size_t used = empty - mf_shdict_free_space(d);
    /* key + value + entry and block overhead, rounded to 16 */
    ASSERT(used >= 1000 * (32 + 6) && used <= 1000 * 160);
    size_t n;
    ASSERT_EQ(mf_shdict_keys(d, 0, &buf, &n), 0);
    ASSERT_EQ(n, 1000);
    ASSERT_EQ(mf_shdict_keys(d, 10, &buf, &n), 0);
    ASSERT_EQ(n, 10);
    uint16_t len;
    memcpy(&len, buf.data, 2);
    ASSERT(len >= 4 && memcmp(buf.data + 2, "key", 3) == 0);
    fake_now += 100;
    ASSERT_EQ(mf_shdict_keys(d, 0, &buf, &n), 0);
    ASSERT_EQ(n, 0);
    ASSERT_EQ(mf_shdict_flush_expired(d, 10), 10);
    ASSERT_EQ(mf_shdict_flush_expired(d, 0), 990);
    ASSERT_EQ(mf_shdict_free_space(d), empty);
    mf_shdict_destroy(d);
}

TEST(flush_all_expires_everything_but_stale_reads_still_see_it)
{
    mf_shdict_t *d = make(1 << 20, 0);
    ASSERT_EQ(set(d, "a", str("1"), 0, 0, NULL), 0);
    ASSERT_EQ(set(d, "b", num(2), 0, 0, NULL), 0);
    mf_shdict_flush_all(d);
    ASSERT_STR_EQ(get_str(d, "a"), "not found");
    mf_shdict_value_t out;
    uint32_t flags;
    bool stale = false;
    ASSERT_EQ(mf_shdict_get(d, "b", 1, true, &out, &flags, &stale, &buf), 0);
    ASSERT(stale && out.number == 2);
    ASSERT_EQ(mf_shdict_flush_expired(d, 0), 2);
    ASSERT_EQ(mf_shdict_get(d, "b", 1, true, &out, &flags, &stale, &buf),
              MF_SHDICT_NOT_FOUND);
    mf_shdict_destroy(d);
}

TEST(keys_up_to_65535_bytes_and_no_longer)
{
    mf_shdict_t *d = make(1 << 20, 1);
    static char key[65536];
    memset(key, 'k', sizeof key);
    mf_shdict_value_t v = num(1);
    bool f;
    ASSERT_EQ(mf_shdict_store(d, key, 65535, &v, 0, 0, 0, &f), 0);
    ASSERT_EQ(mf_shdict_store(d, key, 65536, &v, 0, 0, 0, &f),
              MF_SHDICT_BAD_KEY);
    double out;
    ASSERT_EQ(mf_shdict_incr(d, key, 65535, 1, NULL, 0, &out, &f), 0);
    ASSERT(out == 2);
    mf_shdict_destroy(d);
}

/* Random operations over few keys in a small dict, checked against the
 * arena's accounting: nothing leaks, nothing is freed twice (ASan). */
TEST(random_operations_keep_the_accounting_whole)
{
    mf_shdict_t *d = make(32768, 2);
    size_t empty = mf_shdict_free_space(d);
    static char value[3000];
    memset(value, 'x', sizeof value - 1);
    unsigned seed = 7;
    for (int i = 0; i < 200000; i++) {
        seed = seed * 1103515245u + 12345u;
        char k[8];
        snprintf(k, sizeof k, "k%u", (seed >> 8) % 64);
        unsigned op = (seed >> 16) % 8;
        size_t vlen = (seed >> 4) % sizeof value;
        mf_shdict_value_t v = {
            .type = MF_SHDICT_STRING, .str = value, .len = vlen};
        mf_shdict_value_t out;
        bool f;
        size_t len;
        double n, init = 0;
        if (op < 3)
            mf_shdict_store(d, k, strlen(k), &v, op == 2 ? 5 : 0, 0, op, &f);
        else if (op == 3)
            mf_shdict_push(d, k, strlen(k), seed & 1, &v, &len);
        else if (op == 4)
            mf_shdict_pop(d, k, strlen(k), seed & 1, &out, &buf);
        else if (op == 5)
            mf_shdict_incr(d, k, strlen(k), 1, &init, 0, &n, &f);
        else if (op == 6)
            mf_shdict_store(d, k, strlen(k),
                            &(mf_shdict_value_t){.type = MF_SHDICT_NIL}, 0, 0,
                            0, &f);
        else
            fake_now += 1;
    }
    mf_shdict_flush_all(d);
    mf_shdict_flush_expired(d, 0);
    ASSERT_EQ(mf_shdict_free_space(d), empty);
    mf_shdict_destroy(d);
}

typedef struct incr_job {
    mf_shdict_t *d;
    int n;
} incr_job_t;

static void *incr_loop(void *arg)
{
    incr_job_t *job = arg;
    double init = 0, out;
    bool f;
    for (int i = 0; i < job->n; i++)
        if (mf_shdict_incr(job->d, "hits", 4, 1, &init, 0, &out, &f) != 0)
            abort();
    return NULL;
}

TEST(two_threads_a_million_incr_each_on_one_key_give_two_million)
{
    mf_shdict_opts_t o = {.capacity = 1 << 20};
    int err;
    mf_shdict_t *d = mf_shdict_create(&o, &err);
    incr_job_t job = {d, 1000000};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(pthread_create(&t[i], NULL, incr_loop, &job), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    double out;
    bool f;
    ASSERT_EQ(mf_shdict_incr(d, "hits", 4, 0, NULL, 0, &out, &f), 0);
    ASSERT(out == 2000000);
    mf_shdict_destroy(d);
    mf_shdict_buf_free(&buf);
}

static int leaky(mf_shdict_t *d, const char *key, double rate, double burst,
                 mf_shdict_leaky_mode_t mode, double *excess)
{
    mf_shdict_leaky_t in = {
        .rate = rate, .burst = burst, .now_ms = -1, .mode = mode};
    return mf_shdict_leaky(d, key, strlen(key), &in, excess);
}

TEST(leaky_bucket_spaces_requests_at_the_rate_and_holds_a_burst)
{
    mf_shdict_t *d = make(1 << 20, 0);
    double ex = -1;
    /* 200 r/s, no burst: one request every 5 ms */
    ASSERT_EQ(leaky(d, "a", 200, 0, MF_SHDICT_LEAKY_COMMIT, &ex), 0);
    ASSERT(ex == 0);
    fake_now += 4;
    ASSERT_EQ(leaky(d, "a", 200, 0, MF_SHDICT_LEAKY_COMMIT, &ex),
              MF_SHDICT_REJECTED);
    fake_now += 1;
    ASSERT_EQ(leaky(d, "a", 200, 0, MF_SHDICT_LEAKY_COMMIT, &ex), 0);
    ASSERT(ex == 0);
    /* burst 2 at one instant: 0, 1, 2 waiting, then refused */
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(leaky(d, "b", 10, 2, MF_SHDICT_LEAKY_COMMIT, &ex), 0);
        ASSERT(ex == i);
    }
    ASSERT_EQ(leaky(d, "b", 10, 2, MF_SHDICT_LEAKY_COMMIT, &ex),
              MF_SHDICT_REJECTED);
    /* a check changes nothing; an uncommit takes one back */
    ASSERT_EQ(leaky(d, "b", 10, 3, MF_SHDICT_LEAKY_CHECK, &ex), 0);
    ASSERT(ex == 3);
    ASSERT_EQ(leaky(d, "b", 10, 2, MF_SHDICT_LEAKY_UNCOMMIT, &ex), 0);
    ASSERT(ex == 1);
    /* 100 ms at 10 r/s leaks one: 1 - 1 + 1 */
    fake_now += 100;
    ASSERT_EQ(leaky(d, "b", 10, 2, MF_SHDICT_LEAKY_COMMIT, &ex), 0);
    ASSERT(ex == 1);
    /* drained, the entry is gone (a fresh bucket answers the same) */
    fake_now += 1000;
    uint64_t ttl;
    ASSERT_EQ(mf_shdict_ttl(d, "b", 1, &ttl), MF_SHDICT_NOT_FOUND);
    /* another value under the key; a bad rate */
    ASSERT_EQ(set(d, "s", str("v"), 0, 0, NULL), 0);
    ASSERT_EQ(leaky(d, "s", 10, 0, MF_SHDICT_LEAKY_COMMIT, &ex),
              MF_SHDICT_BAD_VALUE);
    ASSERT_EQ(leaky(d, "a", 0, 0, MF_SHDICT_LEAKY_COMMIT, &ex),
              MF_SHDICT_BAD_VALUE);
    ASSERT_STR_EQ(mf_shdict_strerror(MF_SHDICT_REJECTED), "rejected");
    mf_shdict_destroy(d);
}

static void *leaky_loop(void *arg)
{
    incr_job_t *job = arg;
    mf_shdict_leaky_t in = {
        .rate = 1, .burst = 1e9, .now_ms = 0, .mode = MF_SHDICT_LEAKY_COMMIT};
    double ex;
    for (int i = 0; i < job->n; i++)
        if (mf_shdict_leaky(job->d, "lb", 2, &in, &ex) != 0)
            abort();
    return NULL;
}

TEST(two_threads_filling_one_bucket_count_every_request)
{
    mf_shdict_opts_t o = {.capacity = 1 << 20};
    int err;
    mf_shdict_t *d = mf_shdict_create(&o, &err);
    incr_job_t job = {d, 200000};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(pthread_create(&t[i], NULL, leaky_loop, &job), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    /* at one instant every request stays in the bucket: the first is
     * free, each other adds one */
    mf_shdict_leaky_t in = {
        .rate = 1, .burst = 1e9, .now_ms = 0, .mode = MF_SHDICT_LEAKY_CHECK};
    double ex;
    ASSERT_EQ(mf_shdict_leaky(d, "lb", 2, &in, &ex), 0);
    ASSERT(ex == 400000);
    mf_shdict_destroy(d);
}
