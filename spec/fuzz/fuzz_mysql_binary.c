/*
 * fuzz_mysql_binary.c — libFuzzer target for the pipeline's codec
 * (core/mysql/mysql_binary.c): framing, OK / ERR / EOF packets, column
 * definitions and binary rows, over bytes from the network.
 *
 * Input: byte 0 is the column count (0..15) of the rows, the next count
 * bytes their MYSQL_TYPE_* numbers (bit 7: UNSIGNED), byte count+1 their
 * decimals; the rest is split into packets by the framer, and every packet
 * goes through every decoder. Decoded text must be NUL-terminated at its
 * length and lie in memory the allocator gave; names must lie inside the
 * packet. An execute packet is encoded from the row's values whenever a
 * row decodes, and must frame back as one packet of the length it claims.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mysql/mysql_binary.h"
#include "fuzz_assert.h"

typedef struct arena {
    void *blocks[64];
    int n;
} arena_t;

static void *arena_alloc(void *ctx, size_t size)
{
    arena_t *a = ctx;
    if (a->n == 64 || size > (1u << 20))
        return NULL;
    return a->blocks[a->n++] = malloc(size ? size : 1);
}

static void arena_free(arena_t *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->blocks[i]);
    a->n = 0;
}

static int inside(const uint8_t *p, size_t n, const char *s, size_t len)
{
    const uint8_t *q = (const uint8_t *)s;
    return q >= p && (size_t)(q - p) <= n && len <= n - (size_t)(q - p);
}

static void check_packet(const uint8_t *p, size_t n,
                         const mf_mysql_bin_col_t *cols, unsigned ncols)
{
    mf_mysql_bin_ok_t ok;
    mf_mysql_bin_err_t err;
    mf_mysql_bin_col_t col;
    (void)mf__mysql_bin_ok(p, n, &ok);
    (void)mf__mysql_bin_eof(p, n, &ok);
    if (mf__mysql_bin_err(p, n, &err) == 0) {
        FUZZ_CHECK(inside(p, n, err.message, err.message_len));
        FUZZ_CHECK(strlen(err.sqlstate) <= 5);
    }
    if (mf__mysql_bin_coldef(p, n, &col) == 0) {
        FUZZ_CHECK(inside(p, n, col.name, col.name_len));
        FUZZ_CHECK(inside(p, n, col.table, col.table_len));
        FUZZ_CHECK(col.type < 256 && col.decimals < 256);
    }
    mf_mysql_value_t values[16];
    arena_t a = {.n = 0};
    int rc = mf__mysql_bin_row(p, n, cols, ncols, values, arena_alloc, &a);
    FUZZ_CHECK(rc == 0 || rc == -1 || rc == -2);
    if (rc == 0) {
        for (unsigned c = 0; c < ncols; c++)
            if (values[c].type == MF_MYSQL_TEXT) {
                FUZZ_CHECK(values[c].s[values[c].len] == '\0');
            }
        static uint8_t out[1 << 16];
        size_t need = mf__mysql_bin_execute(out, sizeof out, 7, values, ncols,
                                            (n & 1) != 0);
        if (need <= sizeof out) {
            mf_mysql_bin_packet_t pk;
            FUZZ_CHECK(mf__mysql_bin_frame(out, need, &pk) == 1);
            FUZZ_CHECK(pk.total == need && pk.seq == 0 && pk.payload[0] == 0x17);
        }
    }
    arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned ncols = data[0] % 16;
    if (size < 2 + (size_t)ncols)
        return 0;
    mf_mysql_bin_col_t cols[16];
    memset(cols, 0, sizeof cols);
    for (unsigned c = 0; c < ncols; c++) {
        cols[c].type = data[1 + c] & 0x7f;
        if (cols[c].type > 16)
            cols[c].type = 245 + cols[c].type % 11; /* JSON .. GEOMETRY */
        cols[c].flags = data[1 + c] & 0x80 ? 32 /* UNSIGNED */ : 0;
        cols[c].decimals = data[1 + ncols] % 40;
    }
    size_t at = 2 + ncols;
    /* An exact-size copy: ASan sees a read past the end. */
    size_t len = size - at;
    uint8_t *buf = malloc(len ? len : 1);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, data + at, len);
    size_t off = 0;
    mf_mysql_bin_packet_t pk;
    int rc;
    while ((rc = mf__mysql_bin_frame(buf + off, len - off, &pk)) == 1) {
        FUZZ_CHECK(pk.total <= len - off && pk.total == pk.len + 4);
        uint8_t *one = malloc(pk.len ? pk.len : 1);
        FUZZ_CHECK(one != NULL);
        memcpy(one, pk.payload, pk.len);
        check_packet(one, pk.len, cols, ncols);
        free(one);
        off += pk.total;
    }
    /* Whatever is left may be decoded as one unframed payload too. */
    check_packet(buf + off, len - off, cols, ncols);
    free(buf);
    return 0;
}
