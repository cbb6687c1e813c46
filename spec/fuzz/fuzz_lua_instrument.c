/*
 * fuzz_lua_instrument.c — the loop-check rewriter of loaded Lua source
 * (lua/host/mf_lua_instrument.c) over any text. Its properties: the
 * output has the input's newlines (one more only when it says it put its
 * closing words on a line of their own, after a final comment), so no
 * line moves; and a text that LuaJIT loads loads with its checks too,
 * unless the checks pass one of LuaJIT's limits (upvalues, constants,
 * jump lengths: the loader then falls back to the text as it is, and so
 * may this) or the rewriter refused a nesting too deep for the parser.
 * Nothing is run: luaL_loadbuffer only compiles. Bytecode is no input of
 * the rewriter (LuaJIT's bytecode reader trusts its input): an input with
 * an ESC byte is skipped.
 */
#include <stdint.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "fuzz_assert.h"
#include "mf_lua_instrument.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t newlines(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

/* A load error that checks can cause where the text alone did not. */
static int is_limit_error(const char *msg)
{
    static const char *const limits[] = {"more than", "too many", "overflow",
                                         "complex", "not enough memory",
                                         "too long"};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
        if (msg && strstr(msg, limits[i]))
            return 1;
    return 0;
}

static lua_State *state(void)
{
    static lua_State *L;
    if (!L)
        L = luaL_newstate();
    lua_settop(L, 0);
    return L;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    if (memchr(data, 0x1b, size))
        return 0;
    mf_lua_instrumented_t out;
    if (mf_lua_instrument(src, size, &out) < 0)
        return 0; /* nested too deep: the loader loads the text as it is */
    FUZZ_CHECK(newlines(out.text, out.len) ==
               newlines(src, size) + (out.newline_added ? 1 : 0));
    lua_State *L = state();
    if (luaL_loadbuffer(L, src, size, "=input") == 0) {
        lua_pop(L, 1);
        if (luaL_loadbuffer(L, out.text, out.len, "=input") != 0) {
            const char *msg = lua_tostring(L, -1);
            if (!is_limit_error(msg)) {
                fprintf(stderr, "checked text fails: %s\n%.*s\n", msg,
                        (int)out.len, out.text);
                FUZZ_CHECK(!"the checked text of a loading chunk loads");
            }
        }
    }
    lua_gc(L, LUA_GCCOLLECT, 0);
    free(out.text);
    return 0;
}
