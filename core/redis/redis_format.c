/*
 * redis_format.c — commands in protocol form (RESP arrays of bulk
 * strings), written straight into the caller's memory: a task's command
 * buffer, a prepared list, a connection's AUTH/SELECT or a subscriber's
 * (UN)SUBSCRIBE; and read back (a cluster's or a group's routing looks at
 * a task's commands after they were written). No I/O.
 *
 * Ownership: writes only into memory the caller owns.
 */
#include <string.h>

#include "redis_int.h"

/* "*3\r\n" / "$5\r\n" at p: digits written backwards, no printf on the
 * hot path. Returns the end. */
static char *mf__put_len(char *p, char kind, size_t n)
{
    char head[24];
    char *h = head + sizeof head;
    do {
        *--h = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    *p++ = kind;
    size_t digits = (size_t)(head + sizeof head - h);
    memcpy(p, h, digits);
    p += digits;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

static size_t mf__len_size(size_t n)
{
    size_t digits = 1;
    while (n >= 10) {
        n /= 10;
        digits++;
    }
    return digits + 3; /* kind, digits, CRLF */
}

size_t mf__redis_format_size(int argc, const char *const *argv,
                             const size_t *argvlen)
{
    size_t size = mf__len_size((size_t)argc);
    for (int i = 0; i < argc; i++) {
        size_t n = MF__REDIS_ARGLEN(argvlen, argv, i);
        size_t one = mf__len_size(n) + n + 2;
        if (one < n || size + one < size)
            return 0;
        size += one;
    }
    return size;
}

void mf__redis_format_at(char *p, int argc, const char *const *argv,
                         const size_t *argvlen)
{
    p = mf__put_len(p, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        size_t n = MF__REDIS_ARGLEN(argvlen, argv, i);
        p = mf__put_len(p, '$', n);
        memcpy(p, argv[i], n);
        p += n;
        *p++ = '\r';
        *p++ = '\n';
    }
}

int mf__redis_format(mf_loop_t *loop, mf_buf_t *out, int argc,
                     const char *const *argv, const size_t *argvlen)
{
    size_t size = mf__redis_format_size(argc, argv, argvlen);
    if (!size || mf__buf_reserve(loop, out, size) < 0)
        return MF_ENOMEM;
    mf__redis_format_at(out->data + out->len, argc, argv, argvlen);
    out->len += size;
    return 0;
}

/* "*N\r\n" or "$N\r\n" at p + *at: N, and *at past it. */
static size_t mf__read_len(const char *p, const char *end, size_t *at)
{
    size_t n = 0;
    (*at)++; /* '*' or '$' */
    while (p + *at < end && p[*at] != '\r')
        n = n * 10 + (size_t)(p[(*at)++] - '0');
    *at += 2;
    return n;
}

bool mf__redis_read_command(const char *p, const char *end, size_t *at,
                            mf_redis_argv_fn fn, void *ud)
{
    size_t argc = mf__read_len(p, end, at);
    if (argc == 0) {
        fn(ud, 0, NULL, NULL);
        return true;
    }
    const char *inline_argv[16];
    size_t inline_lens[16];
    const char **argv = inline_argv;
    size_t *lens = inline_lens;
    if (argc > 16) {
        argv = mf_try_malloc(argc * sizeof(*argv));
        lens = mf_try_malloc(argc * sizeof(*lens));
        if (!argv || !lens) {
            mf_free(argv);
            mf_free(lens);
            return false;
        }
    }
    for (size_t a = 0; a < argc; a++) {
        lens[a] = mf__read_len(p, end, at);
        argv[a] = p + *at;
        *at += lens[a] + 2;
    }
    fn(ud, (int)argc, argv, lens);
    if (argv != inline_argv) {
        mf_free(argv);
        mf_free(lens);
    }
    return true;
}
