/*
 * mysql_binary.c — the pipeline's codec (see mysql_binary.h): framing,
 * COM_STMT_EXECUTE, OK / ERR / EOF, column definitions, binary rows.
 *
 * Every read is bounds-checked against the packet's end: the bytes come
 * from the network (spec/fuzz/fuzz_mysql_binary.c feeds it garbage).
 * May call: libc only (the MYSQL_TYPE_* numbers come from the connector's
 * header).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mysql.h>

#include "mysql_binary.h"

#define MF__UNSIGNED_TYPE 0x8000u

static uint32_t mf__u24(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
}

static uint64_t mf__le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void mf__put_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int mf__mysql_bin_frame(const uint8_t *buf, size_t len,
                        mf_mysql_bin_packet_t *pk)
{
    if (len < 4)
        return 0;
    size_t plen = mf__u24(buf);
    if (plen == MF_MYSQL_BIN_MAX_PAYLOAD)
        return -1;
    if (len < 4 + plen)
        return 0;
    pk->payload = buf + 4;
    pk->len = plen;
    pk->total = 4 + plen;
    pk->seq = buf[3];
    return 1;
}

int mf__mysql_bin_lenenc(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    if (*p >= end)
        return -1;
    uint8_t b = **p;
    unsigned n = b < 0xfb ? 0 : b == 0xfc ? 2 : b == 0xfd ? 3 : b == 0xfe ? 8 : 99;
    if (n == 99 || (size_t)(end - *p) < 1 + n)
        return -1; /* 0xfb (NULL) or 0xff, or cut short */
    *v = n ? mf__le(*p + 1, n) : b;
    *p += 1 + n;
    return 0;
}

/* A length-encoded string: its bytes stay in the packet. */
static int mf__lenenc_str(const uint8_t **p, const uint8_t *end,
                          const char **s, size_t *len)
{
    uint64_t n;
    if (mf__mysql_bin_lenenc(p, end, &n) != 0 || n > (uint64_t)(end - *p))
        return -1;
    *s = (const char *)*p;
    *len = (size_t)n;
    *p += n;
    return 0;
}

int mf__mysql_bin_ok(const uint8_t *p, size_t n, mf_mysql_bin_ok_t *ok)
{
    const uint8_t *end = p + n, *q = p + 1;
    if (n < 1 || mf__mysql_bin_lenenc(&q, end, &ok->affected_rows) != 0 ||
        mf__mysql_bin_lenenc(&q, end, &ok->insert_id) != 0 || end - q < 4)
        return -1;
    ok->status = (uint16_t)mf__le(q, 2);
    ok->warnings = (uint16_t)mf__le(q + 2, 2);
    return 0; /* a session-state block may follow: not needed */
}

int mf__mysql_bin_eof(const uint8_t *p, size_t n, mf_mysql_bin_ok_t *ok)
{
    if (!mf__mysql_bin_is_eof(p, n) || n < 5)
        return -1;
    ok->affected_rows = ok->insert_id = 0;
    ok->warnings = (uint16_t)mf__le(p + 1, 2);
    ok->status = (uint16_t)mf__le(p + 3, 2);
    return 0;
}

int mf__mysql_bin_err(const uint8_t *p, size_t n, mf_mysql_bin_err_t *err)
{
    if (n < 3 || p[0] != 0xff)
        return -1;
    err->code = (unsigned)mf__le(p + 1, 2);
    size_t at = 3;
    memcpy(err->sqlstate, "HY000", 6);
    if (n >= 9 && p[3] == '#') { /* the 4.1 form carries a SQLSTATE */
        memcpy(err->sqlstate, p + 4, 5);
        err->sqlstate[5] = '\0';
        at = 9;
    }
    err->message = (const char *)p + at;
    err->message_len = n - at;
    return 0;
}

int mf__mysql_bin_coldef(const uint8_t *p, size_t n, mf_mysql_bin_col_t *col)
{
    const uint8_t *end = p + n, *q = p;
    const char *skip;
    size_t skip_len;
    /* catalog, schema, table, org_table, name, org_name */
    if (mf__lenenc_str(&q, end, &skip, &skip_len) != 0 ||
        mf__lenenc_str(&q, end, &skip, &skip_len) != 0 ||
        mf__lenenc_str(&q, end, &col->table, &col->table_len) != 0 ||
        mf__lenenc_str(&q, end, &skip, &skip_len) != 0 ||
        mf__lenenc_str(&q, end, &col->name, &col->name_len) != 0 ||
        mf__lenenc_str(&q, end, &skip, &skip_len) != 0)
        return -1;
    /* MariaDB's extended metadata (a data type name, a format) comes as
     * one more length-encoded block before the fixed fields (0x0c). */
    if (q < end && *q != 0x0c &&
        mf__lenenc_str(&q, end, &skip, &skip_len) != 0)
        return -1;
    uint64_t fixed;
    if (mf__mysql_bin_lenenc(&q, end, &fixed) != 0 || fixed < 10 ||
        (uint64_t)(end - q) < 10)
        return -1;
    col->charsetnr = (unsigned)mf__le(q, 2);
    col->type = q[6];
    col->flags = (unsigned)mf__le(q + 7, 2);
    col->decimals = q[9];
    return 0;
}

/* ---- rows ------------------------------------------------------------------
 */

static bool mf__is_int_type(unsigned t)
{
    return t == MYSQL_TYPE_TINY || t == MYSQL_TYPE_SHORT ||
           t == MYSQL_TYPE_INT24 || t == MYSQL_TYPE_LONG ||
           t == MYSQL_TYPE_LONGLONG || t == MYSQL_TYPE_YEAR;
}

/* Bytes of a fixed-size binary value; 0: length-prefixed. */
static unsigned mf__fixed_size(unsigned t)
{
    switch (t) {
    case MYSQL_TYPE_TINY:
        return 1;
    case MYSQL_TYPE_SHORT:
    case MYSQL_TYPE_YEAR:
        return 2;
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_FLOAT:
        return 4;
    case MYSQL_TYPE_LONGLONG:
    case MYSQL_TYPE_DOUBLE:
        return 8;
    default:
        return 0;
    }
}

static void mf__int_value(mf_mysql_value_t *v, const uint8_t *p, unsigned size,
                          bool is_unsigned)
{
    uint64_t u = mf__le(p, size);
    if (is_unsigned) {
        v->type = MF_MYSQL_UINT;
        v->u = u;
        return;
    }
    unsigned shift = 64 - 8 * size; /* sign-extend the narrow ones */
    v->type = MF_MYSQL_INT;
    v->i = (int64_t)(u << shift) >> shift;
}

/* FLOAT as the text protocol has it: the shortest text that reads back as
 * the same float (or the column's fixed decimals), read as a double. */
static double mf__float_value(const uint8_t *p, unsigned decimals)
{
    uint32_t bits = (uint32_t)mf__le(p, 4);
    float f;
    memcpy(&f, &bits, sizeof f);
    char buf[64];
    if (decimals < 31 && isfinite(f)) {
        snprintf(buf, sizeof buf, "%.*f", (int)decimals, (double)f);
        return strtod(buf, NULL);
    }
    for (int prec = 6; prec < 10; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f)
            break;
    }
    return strtod(buf, NULL);
}

/* Appends ".ffffff" cut to the column's decimals (0: none). */
static int mf__frac(char *out, size_t cap, uint32_t usec, unsigned decimals)
{
    if (decimals == 0 || decimals > 6)
        return 0;
    char six[8];
    snprintf(six, sizeof six, "%06u", (unsigned)(usec % 1000000));
    return snprintf(out, cap, ".%.*s", (int)decimals, six);
}

/* A DATE / DATETIME / TIMESTAMP value (length 0, 4, 7 or 11) as text. */
static int mf__date_text(char *out, size_t cap, const uint8_t *p, size_t len,
                         unsigned type, unsigned decimals)
{
    unsigned y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
    uint32_t usec = 0;
    if (len != 0 && len != 4 && len != 7 && len != 11)
        return -1;
    if (len >= 4) {
        y = (unsigned)mf__le(p, 2);
        mo = p[2];
        d = p[3];
    }
    if (len >= 7) {
        h = p[4];
        mi = p[5];
        s = p[6];
    }
    if (len == 11)
        usec = (uint32_t)mf__le(p + 7, 4);
    int n = snprintf(out, cap, "%04u-%02u-%02u", y, mo, d);
    if (type == MYSQL_TYPE_DATE)
        return n;
    n += snprintf(out + n, cap - (size_t)n, " %02u:%02u:%02u", h, mi, s);
    return n + mf__frac(out + n, cap - (size_t)n, usec, decimals);
}

/* A TIME value (length 0, 8 or 12) as text: [-]HH:MM:SS, hours past 24
 * counting the days. */
static int mf__time_text(char *out, size_t cap, const uint8_t *p, size_t len,
                         unsigned decimals)
{
    if (len != 0 && len != 8 && len != 12)
        return -1;
    bool neg = len && p[0];
    uint64_t days = len ? mf__le(p + 1, 4) : 0;
    unsigned h = len ? p[5] : 0, mi = len ? p[6] : 0, s = len ? p[7] : 0;
    uint32_t usec = len == 12 ? (uint32_t)mf__le(p + 8, 4) : 0;
    int n = snprintf(out, cap, "%s%02llu:%02u:%02u", neg ? "-" : "",
                     (unsigned long long)(days * 24 + h), mi, s);
    return n + mf__frac(out + n, cap - (size_t)n, usec, decimals);
}

static int mf__text_value(mf_mysql_value_t *v, const char *s, size_t len,
                          mf_mysql_bin_alloc_fn alloc, void *ctx)
{
    char *dst = alloc(ctx, len + 1);
    if (!dst)
        return -2;
    if (len)
        memcpy(dst, s, len);
    dst[len] = '\0';
    v->type = MF_MYSQL_TEXT;
    v->s = dst;
    v->len = len;
    return 0;
}

/* One non-NULL value at *q (advanced). */
static int mf__value(const uint8_t **q, const uint8_t *end,
                     const mf_mysql_bin_col_t *col, mf_mysql_value_t *v,
                     mf_mysql_bin_alloc_fn alloc, void *ctx)
{
    unsigned size = mf__fixed_size(col->type);
    if (size) {
        if ((size_t)(end - *q) < size)
            return -1;
        const uint8_t *p = *q;
        *q += size;
        if (mf__is_int_type(col->type)) {
            mf__int_value(v, p, size, (col->flags & UNSIGNED_FLAG) != 0);
        } else if (col->type == MYSQL_TYPE_FLOAT) {
            v->type = MF_MYSQL_DOUBLE;
            v->d = mf__float_value(p, col->decimals);
        } else {
            uint64_t bits = mf__le(p, 8);
            v->type = MF_MYSQL_DOUBLE;
            memcpy(&v->d, &bits, sizeof v->d);
        }
        return 0;
    }
    const char *s;
    size_t len;
    if (mf__lenenc_str(q, end, &s, &len) != 0)
        return -1;
    char buf[64];
    int n;
    switch (col->type) {
    case MYSQL_TYPE_DATE:
    case MYSQL_TYPE_DATETIME:
    case MYSQL_TYPE_TIMESTAMP:
        n = mf__date_text(buf, sizeof buf, (const uint8_t *)s, len, col->type,
                          col->decimals);
        break;
    case MYSQL_TYPE_TIME:
        n = mf__time_text(buf, sizeof buf, (const uint8_t *)s, len,
                          col->decimals);
        break;
    default:
        return mf__text_value(v, s, len, alloc, ctx);
    }
    if (n < 0 || (size_t)n >= sizeof buf)
        return -1;
    return mf__text_value(v, buf, (size_t)n, alloc, ctx);
}

int mf__mysql_bin_row(const uint8_t *p, size_t n, const mf_mysql_bin_col_t *cols,
                      unsigned ncols, mf_mysql_value_t *values,
                      mf_mysql_bin_alloc_fn alloc, void *ctx)
{
    size_t nulls = (ncols + 7 + 2) / 8; /* the bitmap starts 2 bits in */
    if (n < 1 + nulls || p[0] != 0x00)
        return -1;
    const uint8_t *bitmap = p + 1, *q = p + 1 + nulls, *end = p + n;
    for (unsigned c = 0; c < ncols; c++) {
        mf_mysql_value_t *v = &values[c];
        memset(v, 0, sizeof *v);
        unsigned bit = c + 2;
        if (bitmap[bit / 8] & (1u << (bit % 8))) {
            v->type = MF_MYSQL_NULL;
            continue;
        }
        int rc = mf__value(&q, end, &cols[c], v, alloc, ctx);
        if (rc != 0)
            return rc;
    }
    return q == end ? 0 : -1;
}

/* ---- COM_STMT_EXECUTE --------------------------------------------------------
 */

uint16_t mf__mysql_bin_param_type(const mf_mysql_param_t *p)
{
    switch (p->type) {
    case MF_MYSQL_INT:
        return MYSQL_TYPE_LONGLONG;
    case MF_MYSQL_UINT:
        return MYSQL_TYPE_LONGLONG | MF__UNSIGNED_TYPE;
    case MF_MYSQL_DOUBLE:
        return MYSQL_TYPE_DOUBLE;
    case MF_MYSQL_TEXT:
        return MYSQL_TYPE_STRING;
    case MF_MYSQL_BLOB:
        return MYSQL_TYPE_BLOB;
    default:
        return MYSQL_TYPE_NULL;
    }
}

static size_t mf__lenenc_size(uint64_t v)
{
    return v < 251 ? 1 : v < 65536 ? 3 : v < 16777216 ? 4 : 9;
}

static uint8_t *mf__put_lenenc(uint8_t *p, uint64_t v)
{
    if (v < 251) {
        *p = (uint8_t)v;
        return p + 1;
    }
    unsigned n = v < 65536 ? 2 : v < 16777216 ? 3 : 8;
    *p = n == 2 ? 0xfc : n == 3 ? 0xfd : 0xfe;
    mf__put_le(p + 1, v, n);
    return p + 1 + n;
}

static size_t mf__param_size(const mf_mysql_param_t *p)
{
    switch (p->type) {
    case MF_MYSQL_INT:
    case MF_MYSQL_UINT:
    case MF_MYSQL_DOUBLE:
        return 8;
    case MF_MYSQL_TEXT:
    case MF_MYSQL_BLOB:
        return mf__lenenc_size(p->len) + p->len;
    default:
        return 0;
    }
}

size_t mf__mysql_bin_execute(uint8_t *out, size_t cap, uint32_t stmt_id,
                             const mf_mysql_param_t *params, size_t n,
                             bool with_types)
{
    size_t nulls = (n + 7) / 8;
    size_t need = 4 + 1 + 4 + 1 + 4;
    if (n)
        need += nulls + 1 + (with_types ? 2 * n : 0);
    for (size_t i = 0; i < n; i++)
        need += mf__param_size(&params[i]);
    if (need > cap || need - 4 >= MF_MYSQL_BIN_MAX_PAYLOAD)
        return need;
    uint8_t *p = out;
    mf__put_le(p, need - 4, 3);
    p[3] = 0; /* a command starts the sequence */
    p += 4;
    *p++ = 0x17; /* COM_STMT_EXECUTE */
    mf__put_le(p, stmt_id, 4);
    p += 4;
    *p++ = 0; /* no cursor */
    mf__put_le(p, 1, 4); /* iterations */
    p += 4;
    if (n == 0)
        return need;
    uint8_t *bitmap = p;
    memset(bitmap, 0, nulls);
    p += nulls;
    *p++ = with_types ? 1 : 0;
    if (with_types) {
        for (size_t i = 0; i < n; i++, p += 2)
            mf__put_le(p, mf__mysql_bin_param_type(&params[i]), 2);
    }
    for (size_t i = 0; i < n; i++) {
        const mf_mysql_param_t *pr = &params[i];
        switch (pr->type) {
        case MF_MYSQL_INT:
            mf__put_le(p, (uint64_t)pr->i, 8);
            p += 8;
            break;
        case MF_MYSQL_UINT:
            mf__put_le(p, pr->u, 8);
            p += 8;
            break;
        case MF_MYSQL_DOUBLE: {
            uint64_t bits;
            memcpy(&bits, &pr->d, sizeof bits);
            mf__put_le(p, bits, 8);
            p += 8;
            break;
        }
        case MF_MYSQL_TEXT:
        case MF_MYSQL_BLOB:
            p = mf__put_lenenc(p, pr->len);
            if (pr->len)
                memcpy(p, pr->s, pr->len);
            p += pr->len;
            break;
        default:
            bitmap[i / 8] |= (uint8_t)(1u << (i % 8));
            break;
        }
    }
    return need;
}
