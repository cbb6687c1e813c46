/*
 * lua/util/mf_lua_codec.c — the module moonflow.codec behind mf.base64 and
 * mf.hex: text forms of bytes, both ways (moonflow/codec.h does the work).
 *
 *   mf.base64.encode(s)      standard alphabet, padded (RFC 4648 §4)
 *   mf.base64.encode_url(s)  URL alphabet, no padding (§5: JWT, cookies)
 *   mf.base64.decode(s) / mf.base64.decode_url(s)
 *   mf.hex.encode(s)         lowercase
 *   mf.hex.decode(s)         either case
 *   crc32(s)                 the module's own (moonflow.ngx's
 *                            ngx.crc32_short/long): CRC-32 as zlib and
 *                            nginx compute it (reflected 0xEDB88320)
 *
 * Decoders return nil, "invalid base64 at byte N" (1-based) for a byte
 * outside the alphabet (whitespace included) or misplaced padding, and
 * "invalid base64: it ends too early" for a length that cannot be (hex:
 * "invalid hex at byte N", "invalid hex: an odd number of digits");
 * padding itself is optional. Misuse (a
 * non-string) raises.
 *
 * Owns nothing past a call: output goes to a stack array, or to a scratch
 * userdata the collector takes when it is larger.
 */
#include <lauxlib.h>
#include <pthread.h>
#include <stdint.h>

#include <moonflow/lua_arg.h>
#include <moonflow/codec.h>

#include "host/mf_lua_int.h"
#include "mf_lua_util.h"

#define MF_CODEC_STACK_BYTES 4096

static int mf__base64_encode_with(lua_State *L, unsigned flags)
{
    size_t n;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    char small[MF_CODEC_STACK_BYTES];
    bool pushed;
    if (n > (SIZE_MAX / 4) * 3 - 2)
        return mf_lua_arg_error(L, 1, "too long");
    char *out = mf_lua_scratch(L, small, sizeof small,
                               mf_base64_encoded_size(n), &pushed);
    mf_lua_push_scratch(L, out, mf_base64_encode(out, s, n, flags), pushed);
    return 1;
}

static int mf__base64_decode_with(lua_State *L, unsigned flags)
{
    size_t n, bad = 0;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    char small[MF_CODEC_STACK_BYTES];
    bool pushed;
    char *out = mf_lua_scratch(L, small, sizeof small,
                               mf_base64_decoded_size(n), &pushed);
    ssize_t len = mf_base64_decode(out, s, n, flags, &bad);
    if (len < 0) {
        lua_pushnil(L);
        if (bad >= n)
            lua_pushliteral(L, "invalid base64: it ends too early");
        else
            lua_pushfstring(L, "invalid base64 at byte %d", (int)bad + 1);
        return 2;
    }
    mf_lua_push_scratch(L, out, (size_t)len, pushed);
    return 1;
}

static int mf__base64_encode(lua_State *L)
{
    return mf__base64_encode_with(L, 0);
}

static int mf__base64_encode_url(lua_State *L)
{
    return mf__base64_encode_with(L, MF_BASE64_URL | MF_BASE64_NOPAD);
}

static int mf__base64_decode(lua_State *L)
{
    return mf__base64_decode_with(L, 0);
}

static int mf__base64_decode_url(lua_State *L)
{
    return mf__base64_decode_with(L, MF_BASE64_URL);
}

static int mf__hex_encode(lua_State *L)
{
    size_t n;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    char small[MF_CODEC_STACK_BYTES];
    bool pushed;
    if (n > SIZE_MAX / 2)
        return mf_lua_arg_error(L, 1, "too long");
    char *out = mf_lua_scratch(L, small, sizeof small, 2 * n, &pushed);
    mf_hex_encode(out, s, n);
    mf_lua_push_scratch(L, out, 2 * n, pushed);
    return 1;
}

static int mf__hex_decode(lua_State *L)
{
    size_t n, bad = 0;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    char small[MF_CODEC_STACK_BYTES];
    bool pushed;
    char *out = mf_lua_scratch(L, small, sizeof small, n / 2, &pushed);
    ssize_t len = mf_hex_decode(out, s, n, &bad);
    if (len < 0) {
        lua_pushnil(L);
        if (bad >= n)
            lua_pushliteral(L, "invalid hex: an odd number of digits");
        else
            lua_pushfstring(L, "invalid hex at byte %d", (int)bad + 1);
        return 2;
    }
    mf_lua_push_scratch(L, out, (size_t)len, pushed);
    return 1;
}

/* The table of the reflected polynomial 0xEDB88320, made once for every
 * loop thread's state. */
static uint32_t mf__crc32_table[256];
static pthread_once_t mf__crc32_once = PTHREAD_ONCE_INIT;

static void mf__crc32_fill(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        mf__crc32_table[i] = c;
    }
}

static int mf__crc32(lua_State *L)
{
    size_t n;
    const unsigned char *s =
        (const unsigned char *)mf_lua_check_lstring(L, 1, &n);
    pthread_once(&mf__crc32_once, mf__crc32_fill);
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = mf__crc32_table[(c ^ s[i]) & 0xFF] ^ (c >> 8);
    lua_pushnumber(L, (lua_Number)(c ^ 0xFFFFFFFFu));
    return 1;
}

int mf_lua_open_codec(lua_State *L)
{
    static const luaL_Reg base64[] = {
        {"encode mf.base64.encode(s)", mf__base64_encode},
        {"encode_url mf.base64.encode_url(s)", mf__base64_encode_url},
        {"decode mf.base64.decode(s)", mf__base64_decode},
        {"decode_url mf.base64.decode_url(s)", mf__base64_decode_url},
        {NULL, NULL}};
    static const luaL_Reg hex[] = {{"encode mf.hex.encode(s)", mf__hex_encode},
                                   {"decode mf.hex.decode(s)", mf__hex_decode},
                                   {NULL, NULL}};
    lua_createtable(L, 0, 3);
    lua_newtable(L);
    mf_lua_register(L, base64);
    lua_setfield(L, -2, "base64");
    lua_newtable(L);
    mf_lua_register(L, hex);
    lua_setfield(L, -2, "hex");
    lua_pushcfunction(L, mf__crc32);
    lua_setfield(L, -2, "crc32");
    return 1;
}
