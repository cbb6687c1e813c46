/*
 * lua/http/mf_lua_uri.c — the module moonflow.uri behind mf.uri, and the query
 * parser of moonflow/lua_uri.h:
 *
 *   mf.uri.escape(s)            every byte but RFC 3986's unreserved
 *                               (A-Z a-z 0-9 - . _ ~) as %XX
 *   mf.uri.unescape(s)          %XX decoded ('+' stays); nil, "invalid
 *                               escape at byte N" for a bad one
 *   mf.uri.encode_args(t)       "a=1&b=x%20y&flag&k=1&k=2": keys sorted,
 *                               true → the key alone, false → left out, a
 *                               list → the key repeated
 *   mf.uri.decode_args(s [, max])  the table req.query gives (max pairs,
 *                               default 100; past it: the table and
 *                               "truncated")
 *
 * Owns nothing past a call; large outputs go through a scratch userdata
 * the collector takes. May call: the HTTP layer's query splitter and
 * %-decoder (moonflow/http_parser.h).
 */
#include <ctype.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include <moonflow/lua_arg.h>
#include <moonflow/http_parser.h>
#include <moonflow/lua_uri.h>

#include "host/mf_lua_int.h"
#include "mf_lua_http.h"

#define MF_URI_STACK_BYTES 1024
#define MF_URI_DEFAULT_MAX_ARGS 100

static bool mf__uri_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~';
}

/* Writes s escaped to out (3n bytes of room); returns the length. */
static size_t mf__uri_escape_to(char *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    char *d = out;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (mf__uri_unreserved(c)) {
            *d++ = (char)c;
        } else {
            d[0] = '%';
            d[1] = hex[c >> 4];
            d[2] = hex[c & 15];
            d += 3;
        }
    }
    return (size_t)(d - out);
}

static int mf__uri_escape(lua_State *L)
{
    size_t n;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    char small[MF_URI_STACK_BYTES];
    bool pushed;
    if (n > SIZE_MAX / 3)
        return mf_lua_arg_error(L, 1, "too long");
    char *out = mf_lua_scratch(L, small, sizeof small, 3 * n, &pushed);
    mf_lua_push_scratch(L, out, mf__uri_escape_to(out, s, n), pushed);
    return 1;
}

/* Where the first '%' without two hex digits after it is (s has one). */
static size_t mf__uri_bad_escape(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n &&
           (s[i] != '%' || (i + 2 < n && isxdigit((unsigned char)s[i + 1]) &&
                            isxdigit((unsigned char)s[i + 2]))))
        i += s[i] == '%' ? 3 : 1;
    return i;
}

static int mf__uri_unescape(lua_State *L)
{
    size_t n;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    char small[MF_URI_STACK_BYTES];
    bool pushed;
    char *out = mf_lua_scratch(L, small, sizeof small, n, &pushed);
    memcpy(out, s, n);
    ssize_t len = mf_http_url_decode(out, n, false);
    if (len < 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "invalid escape at byte %d",
                        (int)mf__uri_bad_escape(s, n) + 1);
        return 2;
    }
    mf_lua_push_scratch(L, out, (size_t)len, pushed);
    return 1;
}

/* ---- decode_args ----------------------------------------------------------
 */

/* Pushes s %-decoded ('+' as a space); a bad escape is kept as sent. */
static void mf__uri_push_decoded(lua_State *L, const char *s, size_t n)
{
    char small[MF_URI_STACK_BYTES];
    bool pushed;
    char *buf = mf_lua_scratch(L, small, sizeof small, n, &pushed);
    memcpy(buf, s, n);
    ssize_t len = mf_http_url_decode(buf, n, true);
    if (len < 0)
        lua_pushlstring(L, s, n);
    else
        lua_pushlstring(L, buf, (size_t)len);
    if (pushed)
        lua_remove(L, -2);
}

void mf_lua_args_add(lua_State *L, int t)
{
    lua_pushvalue(L, -2);
    lua_rawget(L, t);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_rawset(L, t);
        return;
    }
    if (!lua_istable(L, -1)) {
        lua_createtable(L, 2, 0);
        lua_insert(L, -2);
        lua_rawseti(L, -2, 1);
    }
    lua_insert(L, -2);
    lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
    lua_rawset(L, t);
}

bool mf_lua_push_args(lua_State *L, const char *s, size_t n, size_t max)
{
    mf_http_query_pair_t kv;
    const char *p = s, *end = s ? s + n : NULL;
    size_t count = 0;
    lua_newtable(L);
    int t = lua_gettop(L);
    while (mf_http_query_next(&p, end, &kv)) {
        if (max && count == max)
            return true;
        count++;
        mf__uri_push_decoded(L, kv.key, kv.key_len);
        if (kv.value)
            mf__uri_push_decoded(L, kv.value, kv.value_len);
        else
            lua_pushboolean(L, 1);
        mf_lua_args_add(L, t);
    }
    return false;
}

static int mf__uri_decode_args(lua_State *L)
{
    size_t n;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    lua_Integer max = mf_lua_opt_integer(L, 2, MF_URI_DEFAULT_MAX_ARGS);
    if (max < 0)
        return mf_lua_arg_error(L, 2, "a count of pairs (0: all) expected");
    if (!mf_lua_push_args(L, s, n, (size_t)max))
        return 1;
    lua_pushliteral(L, "truncated");
    return 2;
}

/* ---- encode_args ----------------------------------------------------------
 */

/* The length of s escaped. */
static size_t mf__uri_escaped_size(const char *s, size_t n)
{
    size_t size = n;
    for (size_t i = 0; i < n; i++)
        if (!mf__uri_unreserved((unsigned char)s[i]))
            size += 2;
    return size;
}

/* One "key=value" (or "key" for true; nothing for false) for the value at
 * v: its size with the '&' before it, and, when out is given, the bytes
 * written there. Raises on a value that has no text form. */
static size_t mf__uri_pair(lua_State *L, const char *key, size_t klen, int v,
                           char *out)
{
    int type = lua_type(L, v);
    if (type == LUA_TBOOLEAN && !lua_toboolean(L, v))
        return 0;
    if (type != LUA_TBOOLEAN && type != LUA_TSTRING && type != LUA_TNUMBER)
        luaL_error(L,
                   "mf.uri.encode_args: the value of \"%s\" is a %s (a "
                   "string, a number, a boolean or a list of them "
                   "expected)",
                   key, lua_typename(L, type));
    size_t n = 0;
    const char *s = type == LUA_TBOOLEAN ? NULL : lua_tolstring(L, v, &n);
    if (!out)
        return 1 + mf__uri_escaped_size(key, klen) +
               (s ? 1 + mf__uri_escaped_size(s, n) : 0);
    char *d = out;
    *d++ = '&';
    d += mf__uri_escape_to(d, key, klen);
    if (s) {
        *d++ = '=';
        d += mf__uri_escape_to(d, s, n);
    }
    return (size_t)(d - out);
}

/* Every pair of key (its value at v: one, or a list): their size, written
 * to out when given. */
static size_t mf__uri_key_pairs(lua_State *L, const char *key, int v, char *out)
{
    size_t klen = strlen(key), size = 0;
    if (!lua_istable(L, v))
        return mf__uri_pair(L, key, klen, v, out);
    int n = (int)lua_objlen(L, v);
    for (int j = 1; j <= n; j++) {
        lua_rawgeti(L, v, j);
        size +=
            mf__uri_pair(L, key, klen, lua_gettop(L), out ? out + size : NULL);
        lua_pop(L, 1);
    }
    return size;
}

static int mf__uri_key_order(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The table's keys, sorted, in a scratch userdata left on the stack. */
static const char **mf__uri_sorted_keys(lua_State *L, int t, size_t *count)
{
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L,
                       "mf.uri.encode_args: a %s key (string keys "
                       "expected)",
                       luaL_typename(L, -2));
        lua_pop(L, 1);
        n++;
    }
    const char **keys = lua_newuserdata(L, (n ? n : 1) * sizeof *keys);
    size_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        keys[i++] = lua_tostring(L, -1); /* anchored by the table */
    }
    qsort(keys, n, sizeof *keys, mf__uri_key_order);
    *count = n;
    return keys;
}

/* Two passes over the sorted keys: the size (checking every value), then
 * the bytes, into a scratch userdata of that size. */
static size_t mf__uri_all_pairs(lua_State *L, const char **keys, size_t count,
                                char *out)
{
    size_t size = 0;
    for (size_t i = 0; i < count; i++) {
        lua_getfield(L, 1, keys[i]);
        size += mf__uri_key_pairs(L, keys[i], lua_gettop(L),
                                  out ? out + size : NULL);
        lua_pop(L, 1);
    }
    return size;
}

static int mf__uri_encode_args(lua_State *L)
{
    mf_lua_check_type(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    size_t count;
    const char **keys = mf__uri_sorted_keys(L, 1, &count);
    size_t size = mf__uri_all_pairs(L, keys, count, NULL);
    char *out = lua_newuserdata(L, size ? size : 1);
    mf__uri_all_pairs(L, keys, count, out);
    /* each pair starts with '&': the first one's is dropped */
    lua_pushlstring(L, size ? out + 1 : "", size ? size - 1 : 0);
    return 1;
}

int mf_lua_open_uri(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        {"escape mf.uri.escape(s)", mf__uri_escape},
        {"unescape mf.uri.unescape(s)", mf__uri_unescape},
        {"encode_args mf.uri.encode_args(t)", mf__uri_encode_args},
        {"decode_args mf.uri.decode_args(s [, max])", mf__uri_decode_args},
        {NULL, NULL}};
    lua_newtable(L);
    mf_lua_register(L, funcs);
    return 1;
}
