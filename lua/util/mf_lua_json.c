/*
 * lua/util/mf_lua_json.c — JSON text from Lua values (moonflow/lua_json.h) and
 * the module moonflow.json behind mf.json: encode, null.
 *
 * Why our own: a handler answering resp:json paid more for lua-cjson than
 * for its whole HTTP exchange's user-space work — a number went through
 * snprintf("%.14g"), the text became an interned Lua string, and only then
 * was it copied to the socket's buffer. Here integers are formatted by
 * hand, the text stays in a scratch buffer that the server copies straight
 * out, and nothing is allocated per call once the buffer has grown.
 *
 * Owns: the scratch buffer (mf__json_out_t) of each lua_State, a full
 * userdata anchored in the registry under &mf__json_key, its bytes from
 * the state's allocator, freed by its __gc when the state closes.
 */
#include <lauxlib.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <moonflow/lua_arg.h>
#include <moonflow/lua_json.h>

#include "host/mf_lua_int.h"
#include "mf_lua_util.h"

/* Deeper than this is a table holding itself, or a document nobody reads
 * (lua-cjson's default limit). */
#define MF_JSON_MAX_DEPTH 1000
/* A buffer grown past this is given back at the next encode. */
#define MF_JSON_KEEP_BYTES (1024 * 1024)
#define MF_JSON_FIRST_BYTES 1024
/* An array may have holes (null) unless it is more than half holes past
 * this index (lua-cjson's "excessively sparse" rule). */
#define MF_JSON_SPARSE_SAFE 10

typedef struct mf__json_out {
    char *p;
    size_t len, cap;
    lua_Alloc alloc;
    void *ud;
    lua_State *L; /* the state encoding now: errors are raised on it */
} mf__json_out_t;

static const char mf__json_key = 0;

/* Raises "json: ..." at the Lua code that asked for the encode. */
static int mf__json_fail(lua_State *L, const char *fmt, ...)
{
    va_list ap;
    luaL_where(L, 2); /* 1 is the C function */
    lua_pushliteral(L, "json: ");
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 3);
    return lua_error(L);
}

static void mf__json_no_memory(mf__json_out_t *out)
{
    lua_pushliteral(out->L, "not enough memory");
    lua_error(out->L);
}

static void mf__json_resize(mf__json_out_t *out, size_t cap)
{
    char *p = out->alloc(out->ud, out->p, out->cap, cap);
    if (!p)
        mf__json_no_memory(out); /* out->p is still the old buffer */
    out->p = p;
    out->cap = cap;
}

static char *mf__json_grow(mf__json_out_t *out, size_t n)
{
    size_t cap = out->cap ? out->cap : MF_JSON_FIRST_BYTES;
    while (cap - out->len <= n) {
        if (cap > SIZE_MAX / 2)
            mf__json_no_memory(out);
        cap *= 2;
    }
    mf__json_resize(out, cap);
    return out->p + out->len;
}

/* Room for n more bytes (and the final NUL). */
static inline char *mf__json_room(mf__json_out_t *out, size_t n)
{
    if (out->cap - out->len <= n)
        return mf__json_grow(out, n);
    return out->p + out->len;
}

static inline void mf__json_put(mf__json_out_t *out, const char *s, size_t n)
{
    memcpy(mf__json_room(out, n), s, n);
    out->len += n;
}

static inline void mf__json_putc(mf__json_out_t *out, char c)
{
    *mf__json_room(out, 1) = c;
    out->len++;
}

static int mf__json_out_gc(lua_State *L)
{
    mf__json_out_t *out = lua_touserdata(L, 1);
    if (out->p)
        out->alloc(out->ud, out->p, out->cap, 0);
    out->p = NULL;
    out->cap = out->len = 0;
    return 0;
}

/* The state's scratch buffer, made on first use. */
static mf__json_out_t *mf__json_out(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&mf__json_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    mf__json_out_t *out = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (out)
        return out;
    out = lua_newuserdata(L, sizeof *out);
    memset(out, 0, sizeof *out);
    out->alloc = lua_getallocf(L, &out->ud);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, mf__json_out_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_pushlightuserdata(L, (void *)&mf__json_key);
    lua_insert(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
    return out;
}

/* ---- values ------------------------------------------------------------ */

/* 'u': \u00XX; another byte: a two-byte escape; 0: the byte as it is. */
static const char mf__json_escape[256] = {
    ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r',  ['\t'] = 't',
    [0x00] = 'u', [0x01] = 'u', [0x02] = 'u', [0x03] = 'u',  [0x04] = 'u',
    [0x05] = 'u', [0x06] = 'u', [0x07] = 'u', [0x0b] = 'u',  [0x0e] = 'u',
    [0x0f] = 'u', [0x10] = 'u', [0x11] = 'u', [0x12] = 'u',  [0x13] = 'u',
    [0x14] = 'u', [0x15] = 'u', [0x16] = 'u', [0x17] = 'u',  [0x18] = 'u',
    [0x19] = 'u', [0x1a] = 'u', [0x1b] = 'u', [0x1c] = 'u',  [0x1d] = 'u',
    [0x1e] = 'u', [0x1f] = 'u', ['"'] = '"',  ['\\'] = '\\', [0x7f] = 'u',
};

/* Runs of bytes that need no escape are copied whole. */
static void mf__json_string(mf__json_out_t *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t run = 0;
    mf__json_putc(out, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e = mf__json_escape[c];
        if (!e)
            continue;
        mf__json_put(out, s + run, i - run);
        run = i + 1;
        char *d = mf__json_room(out, 6);
        d[0] = '\\';
        if (e != 'u') {
            d[1] = e;
            out->len += 2;
        } else {
            memcpy(d + 1, "u00", 3);
            d[4] = hex[c >> 4];
            d[5] = hex[c & 15];
            out->len += 6;
        }
    }
    mf__json_put(out, s + run, n - run);
    mf__json_putc(out, '"');
}

/* Integers up to 2^53 in full (offsets, ids, counts), by hand; the rest
 * as Lua's tostring writes them. */
static void mf__json_number(mf__json_out_t *out, double v)
{
    if (!isfinite(v))
        mf__json_fail(out->L, "cannot encode %s (JSON has no such number)",
                      isnan(v) ? "NaN" : "an infinity");
    char *d = mf__json_room(out, 32);
    if (v >= -9007199254740992.0 && v <= 9007199254740992.0 &&
        v == (double)(int64_t)v) {
        int64_t i = (int64_t)v;
        uint64_t u = i < 0 ? (uint64_t)0 - (uint64_t)i : (uint64_t)i;
        char digits[20];
        int n = 0;
        do
            digits[n++] = (char)('0' + u % 10);
        while ((u /= 10) != 0);
        if (i < 0)
            *d++ = '-';
        while (n)
            *d++ = digits[--n];
        out->len = (size_t)(d - out->p);
        return;
    }
    out->len += (size_t)snprintf(d, 32, "%.14g", v);
}

static void mf__json_value(mf__json_out_t *out, int idx, int depth);

/* The array length of the table at t when its keys are exactly integers
 * >= 1, else 0 (an object; an empty table is one too). Raises on an array
 * that is mostly holes. */
static size_t mf__json_array_length(mf__json_out_t *out, int t)
{
    lua_State *L = out->L;
    size_t count = 0;
    double max = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        double k;
        if (lua_type(L, -1) != LUA_TNUMBER || (k = lua_tonumber(L, -1)) < 1 ||
            k != floor(k) || k > 2147483647.0) {
            lua_pop(L, 1);
            return 0;
        }
        count++;
        if (k > max)
            max = k;
    }
    if (max > MF_JSON_SPARSE_SAFE && max > 2.0 * (double)count)
        mf__json_fail(L,
                      "cannot encode a sparse array (%d values, the last at "
                      "[%d]): fill its holes with mf.json.null",
                      (int)count, (int)max);
    return (size_t)max;
}

static void mf__json_array(mf__json_out_t *out, int t, size_t n, int depth)
{
    mf__json_putc(out, '[');
    for (size_t i = 1; i <= n; i++) {
        if (i > 1)
            mf__json_putc(out, ',');
        lua_rawgeti(out->L, t, (int)i);
        mf__json_value(out, lua_gettop(out->L), depth);
        lua_pop(out->L, 1);
    }
    mf__json_putc(out, ']');
}

static void mf__json_key_of(mf__json_out_t *out, int key)
{
    lua_State *L = out->L;
    size_t n;
    if (lua_type(L, key) == LUA_TSTRING) {
        const char *s = lua_tolstring(L, key, &n);
        mf__json_string(out, s, n);
    } else if (lua_type(L, key) == LUA_TNUMBER) {
        mf__json_putc(out, '"');
        mf__json_number(out, lua_tonumber(L, key));
        mf__json_putc(out, '"');
    } else {
        mf__json_fail(L,
                      "cannot encode a table with a %s key (a string or a "
                      "number expected)",
                      luaL_typename(L, key));
    }
}

static void mf__json_object(mf__json_out_t *out, int t, int depth)
{
    lua_State *L = out->L;
    bool first = true;
    mf__json_putc(out, '{');
    lua_pushnil(L);
    while (lua_next(L, t)) {
        if (!first)
            mf__json_putc(out, ',');
        first = false;
        int value = lua_gettop(L);
        mf__json_key_of(out, value - 1);
        mf__json_putc(out, ':');
        mf__json_value(out, value, depth);
        lua_pop(L, 1);
    }
    mf__json_putc(out, '}');
}

static void mf__json_table(mf__json_out_t *out, int t, int depth)
{
    if (++depth > MF_JSON_MAX_DEPTH)
        mf__json_fail(out->L,
                      "cannot encode tables nested deeper than %d (a table "
                      "that holds itself?)",
                      MF_JSON_MAX_DEPTH);
    luaL_checkstack(out->L, 3, "json: nested tables");
    size_t n = mf__json_array_length(out, t);
    if (n)
        mf__json_array(out, t, n, depth);
    else
        mf__json_object(out, t, depth);
}

static void mf__json_value(mf__json_out_t *out, int idx, int depth)
{
    lua_State *L = out->L;
    size_t n;
    const char *s;
    switch (lua_type(L, idx)) {
    case LUA_TSTRING:
        s = lua_tolstring(L, idx, &n);
        mf__json_string(out, s, n);
        return;
    case LUA_TNUMBER:
        mf__json_number(out, lua_tonumber(L, idx));
        return;
    case LUA_TBOOLEAN:
        if (lua_toboolean(L, idx))
            mf__json_put(out, "true", 4);
        else
            mf__json_put(out, "false", 5);
        return;
    case LUA_TNIL:
        mf__json_put(out, "null", 4);
        return;
    case LUA_TTABLE:
        mf__json_table(out, idx, depth);
        return;
    case LUA_TLIGHTUSERDATA:
        if (!lua_touserdata(L, idx)) { /* mf.json.null, mf.null */
            mf__json_put(out, "null", 4);
            return;
        }
        break;
    default:
        break;
    }
    mf__json_fail(L, "cannot encode a %s", luaL_typename(L, idx));
}

const char *mf_lua_json_encode(lua_State *L, int idx, size_t *len)
{
    if (idx < 0 && idx > LUA_REGISTRYINDEX)
        idx = lua_gettop(L) + idx + 1;
    mf__json_out_t *out = mf__json_out(L);
    out->L = L;
    out->len = 0;
    if (out->cap > MF_JSON_KEEP_BYTES)
        mf__json_resize(out, MF_JSON_FIRST_BYTES);
    mf__json_value(out, idx, 0);
    *mf__json_room(out, 0) = '\0';
    *len = out->len;
    return out->p;
}

/* ---- the module -------------------------------------------------------- */

/* mf.json.encode(value): the text, or raises. */
static int mf__json_encode(lua_State *L)
{
    mf_lua_check_any(L, 1);
    size_t len;
    const char *text = mf_lua_json_encode(L, 1, &len);
    lua_pushlstring(L, text, len);
    return 1;
}

int mf_lua_open_json(lua_State *L)
{
    lua_createtable(L, 0, 2);
    mf_lua_push_named(L, mf__json_encode, "mf.json.encode(v)");
    lua_setfield(L, -2, "encode");
    lua_pushlightuserdata(L, NULL); /* == cjson.null == mf.null */
    lua_setfield(L, -2, "null");
    return 1;
}
