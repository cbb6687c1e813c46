/*
 * lua/serve/websocket_deflate.c — permessage-deflate's zlib streams, one
 * pair per worker (websocket_deflate.h).
 *
 * May call: zlib, the frame codec's UTF-8 check, LuaJIT.
 */
#include <lauxlib.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <moonflow/websocket.h>

#include "websocket_deflate.h"

#define MF_WS_ZLIB_KEY "moonflow.websocket.zlib"

struct mf_ws_zlib {
    z_stream def, inf;
    unsigned def_bits; /* 0: def not made */
    bool inf_made;
    uint8_t *out; /* deflate's output, kept for the next message */
    size_t out_cap;
};

static int mf__ws_zlib_gc(lua_State *L)
{
    mf_ws_zlib_t *z = lua_touserdata(L, 1);
    if (z->def_bits)
        deflateEnd(&z->def);
    if (z->inf_made)
        inflateEnd(&z->inf);
    free(z->out);
    z->def_bits = 0;
    z->inf_made = false;
    z->out = NULL;
    return 0;
}

mf_ws_zlib_t *mf_ws_zlib_get(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, MF_WS_ZLIB_KEY);
    mf_ws_zlib_t *z = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (z)
        return z;
    z = lua_newuserdata(L, sizeof(*z));
    memset(z, 0, sizeof(*z));
    lua_newtable(L);
    lua_pushcfunction(L, mf__ws_zlib_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, MF_WS_ZLIB_KEY);
    return z;
}

/* ---- inflating ----------------------------------------------------------- */

/* The inflater, reset: false without memory. */
static bool mf__ws_inflater(mf_ws_zlib_t *z)
{
    if (z->inf_made)
        return inflateReset(&z->inf) == Z_OK;
    memset(&z->inf, 0, sizeof z->inf);
    z->inf_made = inflateInit2(&z->inf, -15) == Z_OK; /* raw, any window */
    return z->inf_made;
}

/* Runs the inflater over in[0..n) into b: 0, 1 at the stream's end, or
 * a negative close code. */
static int mf__ws_inflate_some(mf_ws_zlib_t *z, luaL_Buffer *b,
                               const uint8_t *in, size_t n, uint64_t max,
                               uint64_t *total, mf_ws_utf8_t *u)
{
    z->inf.next_in = (Bytef *)in;
    z->inf.avail_in = (uInt)n;
    while (z->inf.avail_in > 0) {
        char *dst = luaL_prepbuffer(b);
        z->inf.next_out = (Bytef *)dst;
        z->inf.avail_out = LUAL_BUFFERSIZE;
        int rc = inflate(&z->inf, Z_SYNC_FLUSH);
        size_t got = LUAL_BUFFERSIZE - z->inf.avail_out;
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
            return -MF_WS_CLOSE_BAD_DATA;
        *total += got;
        if (max && *total > max)
            return -MF_WS_CLOSE_TOO_BIG;
        if (u && !mf_ws_utf8_feed(u, (const uint8_t *)dst, got))
            return -MF_WS_CLOSE_BAD_DATA;
        luaL_addsize(b, got);
        if (rc == Z_STREAM_END)
            return 1; /* a final block: what follows is not read */
        if (got == 0 && rc == Z_BUF_ERROR)
            return 0; /* no progress: the input ends inside a block */
    }
    return 0;
}

int mf_ws_zlib_inflate(lua_State *L, mf_ws_zlib_t *z, const uint8_t *in,
                       size_t n, uint64_t max, bool text)
{
    static const uint8_t tail[4] = {0x00, 0x00, 0xff, 0xff}; /* §7.2.2 */
    if (n > UINT_MAX || !mf__ws_inflater(z))
        return -MF_WS_CLOSE_TOO_BIG;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    mf_ws_utf8_t u = {0};
    uint64_t total = 0;
    int rc = mf__ws_inflate_some(z, &b, in, n, max, &total, text ? &u : NULL);
    if (rc == 0)
        rc = mf__ws_inflate_some(z, &b, tail, sizeof tail, max, &total,
                                 text ? &u : NULL);
    if (rc >= 0 && text && !mf_ws_utf8_whole(&u))
        rc = -MF_WS_CLOSE_BAD_DATA;
    luaL_pushresult(&b);
    if (rc < 0) {
        lua_pop(L, 1);
        return rc;
    }
    return 0;
}

/* ---- deflating ----------------------------------------------------------- */

/* The deflater for a window of 2^bits, reset: false without memory. */
static bool mf__ws_deflater(mf_ws_zlib_t *z, unsigned bits)
{
    if (z->def_bits == bits)
        return deflateReset(&z->def) == Z_OK;
    if (z->def_bits)
        deflateEnd(&z->def);
    memset(&z->def, 0, sizeof z->def);
    z->def_bits = 0;
    if (deflateInit2(&z->def, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -(int)bits, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return false;
    z->def_bits = bits;
    return true;
}

int mf_ws_zlib_deflate(mf_ws_zlib_t *z, unsigned bits, const void *p, size_t n,
                       const uint8_t **out, size_t *out_len)
{
    if (n > UINT_MAX / 2 || !mf__ws_deflater(z, bits))
        return -1;
    size_t need = deflateBound(&z->def, (uLong)n) + 16; /* + the flush */
    if (need > z->out_cap) {
        uint8_t *o = realloc(z->out, need);
        if (!o)
            return -1;
        z->out = o;
        z->out_cap = need;
    }
    z->def.next_in = (Bytef *)p;
    z->def.avail_in = (uInt)n;
    z->def.next_out = z->out;
    z->def.avail_out = (uInt)z->out_cap;
    int rc = deflate(&z->def, Z_SYNC_FLUSH);
    size_t len = z->out_cap - z->def.avail_out;
    if (rc != Z_OK || z->def.avail_in || len < 4 ||
        memcmp(z->out + len - 4, "\x00\x00\xff\xff", 4))
        return -1;
    *out = z->out;
    *out_len = len - 4;
    return 0;
}
