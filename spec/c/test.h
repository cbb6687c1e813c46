/*
 * test.h — the C unit-test harness: TEST(name) registers a function; main
 * runs them all in order (or only those named on the command line) and
 * exits non-zero on the first failed assertion. Each test file is its own
 * process under ctest's timeout.
 */
#ifndef MF_TEST_H
#define MF_TEST_H

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mf_test_case {
    const char *name;
    void (*fn)(void);
} mf_test_case_t;

#define MF_TEST_MAX 128
static mf_test_case_t mf_test_cases[MF_TEST_MAX];
static int mf_test_count;
static const char *mf_test_current;

static void mf_test_register(const char *name, void (*fn)(void))
{
    if (mf_test_count == MF_TEST_MAX) {
        fprintf(stderr, "too many tests\n");
        exit(2);
    }
    mf_test_cases[mf_test_count].name = name;
    mf_test_cases[mf_test_count].fn = fn;
    mf_test_count++;
}

/* Appends s[0..n) to the NUL-terminated text in buf (cap bytes), cutting
 * what does not fit: how the tests render results to compare them. */
static inline void mf_test_append(char *buf, size_t cap, const char *s,
                                  size_t n)
{
    size_t len = strlen(buf);
    if (len + n + 1 > cap)
        n = cap - len - 1;
    memcpy(buf + len, s, n);
    buf[len + n] = 0;
}

/* The same for binary data: each NUL byte as the two characters \0. */
static inline void mf_test_append_bytes(char *buf, size_t cap, const char *s,
                                        size_t n)
{
    for (size_t i = 0; i < n; i++)
        mf_test_append(buf, cap, s[i] ? &s[i] : "\\0", s[i] ? 1 : 2);
}

#define TEST(name)                                                      \
    static void test_##name(void);                                      \
    __attribute__((constructor)) static void test_register_##name(void) \
    {                                                                   \
        mf_test_register(#name, test_##name);                           \
    }                                                                   \
    static void test_##name(void)

#define MF_TEST_FAIL(...)                                               \
    do {                                                                \
        fprintf(stderr, "FAIL %s (%s:%d): ", mf_test_current, __FILE__, \
                __LINE__);                                              \
        fprintf(stderr, __VA_ARGS__);                                   \
        fputc('\n', stderr);                                            \
        exit(1);                                                        \
    } while (0)

#define ASSERT(cond)                             \
    do {                                         \
        if (!(cond))                             \
            MF_TEST_FAIL("assertion %s", #cond); \
    } while (0)

#define ASSERT_EQ(a, b)                                                   \
    do {                                                                  \
        long long mf_a_ = (long long)(a), mf_b_ = (long long)(b);         \
        if (mf_a_ != mf_b_)                                               \
            MF_TEST_FAIL("%s == %s: %lld != %lld", #a, #b, mf_a_, mf_b_); \
    } while (0)

#define ASSERT_STR_EQ(a, b)                                                   \
    do {                                                                      \
        const char *mf_a_ = (a), *mf_b_ = (b);                                \
        if (strcmp(mf_a_, mf_b_) != 0)                                        \
            MF_TEST_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, mf_a_, mf_b_); \
    } while (0)

static int mf_test_selected(int argc, char **argv, const char *name)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int ran = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* as an embedding program must (core/README.md, "Embedding"): a peer
     * that closed first makes a write fail, not the test binary die */
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < mf_test_count; i++) {
        if (!mf_test_selected(argc, argv, mf_test_cases[i].name))
            continue;
        mf_test_current = mf_test_cases[i].name;
        mf_test_cases[i].fn();
        printf("ok %s\n", mf_test_current);
        ran++;
    }
    printf("%d passed, 0 failed\n", ran);
    return ran > 0 ? 0 : 1;
}

#endif /* MF_TEST_H */
