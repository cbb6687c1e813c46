/* mf_lua_json_encode (moonflow/lua_json.h) from C: every byte's escape
 * against an encoder written here independently, integers at the edges of
 * 2^53, nesting at the limit and one past it, and a refused allocation
 * under the host's memory cap raising "not enough memory" instead of a
 * short text. */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include <moonflow/lua_host.h>
#include <moonflow/lua_json.h>
#include <moonflow/moonflow.h>
#include "test.h"

static mf_loop_t *loop;
static mf_lua_host_t *host;
static lua_State *L;

static void setup_capped(size_t memory_limit)
{
    mf_lua_host_opts_t opts = {.memory_limit = memory_limit};
    loop = mf_loop_create();
    host = mf_lua_host_create(loop, &opts);
    ASSERT(host);
    L = mf_lua_host_state(host);
}

static void setup(void)
{
    setup_capped(0);
}

static void teardown(void)
{
    mf_lua_host_destroy(host);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    mf_loop_destroy(loop);
}

/* The text of the value on top (popped), or NULL with the error in err. */
static int encode_top(lua_State *S)
{
    size_t len;
    const char *s = mf_lua_json_encode(S, 1, &len);
    ASSERT_EQ(strlen(s), len); /* NUL-terminated, no NUL inside */
    lua_pushlstring(S, s, len);
    return 1;
}

static const char *encode(char *err, size_t cap)
{
    lua_pushcfunction(L, encode_top);
    lua_insert(L, -2);
    if (lua_pcall(L, 1, 1, 0) != 0) {
        snprintf(err, cap, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return NULL;
    }
    const char *s = lua_tostring(L, -1);
    lua_pop(L, 1); /* still referenced by nothing: copy before the next call */
    return s;
}

static void expect_text(const char *lua_expr, const char *want)
{
    char err[256] = "";
    char code[512];
    snprintf(code, sizeof code, "return %s", lua_expr);
    ASSERT_EQ(luaL_dostring(L, code), 0);
    const char *got = encode(err, sizeof err);
    if (!got || strcmp(got, want) != 0)
        fprintf(stderr, "encode(%s): want %s, got %s%s\n", lua_expr, want,
                got ? got : "error: ", got ? "" : err);
    ASSERT(got && strcmp(got, want) == 0);
}

static void expect_error(const char *lua_expr, const char *part)
{
    char err[256] = "";
    char code[512];
    snprintf(code, sizeof code, "return %s", lua_expr);
    ASSERT_EQ(luaL_dostring(L, code), 0);
    ASSERT(encode(err, sizeof err) == NULL);
    if (!strstr(err, part))
        fprintf(stderr, "encode(%s): want an error with \"%s\", got \"%s\"\n",
                lua_expr, part, err);
    ASSERT(strstr(err, part) != NULL);
}

/* Each byte alone, against RFC 8259's rules written out here. */
TEST(every_byte)
{
    setup();
    for (int c = 0; c < 256; c++) {
        char want[16];
        if (c == '"' || c == '\\')
            snprintf(want, sizeof want, "\"\\%c\"", c);
        else if (c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f')
            snprintf(want, sizeof want, "\"\\%c\"",
                     c == '\n'   ? 'n'
                     : c == '\r' ? 'r'
                     : c == '\t' ? 't'
                     : c == '\b' ? 'b'
                                 : 'f');
        else if (c < 0x20 || c == 0x7f)
            snprintf(want, sizeof want, "\"\\u%04x\"", c);
        else
            snprintf(want, sizeof want, "\"%c\"", c);
        char ch = (char)c;
        lua_pushcfunction(L, encode_top);
        lua_pushlstring(L, &ch, 1);
        ASSERT_EQ(lua_pcall(L, 1, 1, 0), 0);
        if (strcmp(lua_tostring(L, -1), want) != 0)
            fprintf(stderr, "byte %d: want %s got %s\n", c, want,
                    lua_tostring(L, -1));
        ASSERT(strcmp(lua_tostring(L, -1), want) == 0);
        lua_pop(L, 1);
    }
    /* a NUL inside a longer string, between runs copied whole */
    expect_text("'ab\\0cd'", "\"ab\\u0000cd\"");
    teardown();
}

TEST(numbers)
{
    setup();
    expect_text("2^53", "9007199254740992");
    expect_text("-(2^53)", "-9007199254740992");
    expect_text("2^53 - 1", "9007199254740991");
    expect_text("2^63", "9.2233720368548e+18");
    expect_text("-0.5", "-0.5");
    expect_text("1e300", "1e+300");
    expect_text("{2^31, -(2^31)}", "[2147483648,-2147483648]");
    expect_error("0/0", "json: cannot encode NaN");
    expect_error("-math.huge", "json: cannot encode an infinity");
    teardown();
}

TEST(nesting)
{
    setup();
    /* 1000 tables deep encode; 1001 raise */
    expect_text("(function() local t = {} for i = 1, 999 do t = {t} end "
                "return #require('moonflow').json.encode(t) end)()",
                "2000");
    expect_error("(function() local t = {} for i = 1, 1000 do t = {t} end "
                 "return t end)()",
                 "nested deeper than 1000");
    teardown();
}

static void on_exit_cb(mf_lua_co_t *co, const mf_lua_co_exit_t *ex, void *data)
{
    char *text = data;
    (void)co;
    const char *t =
        ex->status == MF_LUA_CO_DONE ? lua_tostring(ex->L, -1) : ex->message;
    snprintf(text, 256, "%d %s", (int)ex->status, t ? t : "");
}

/* Under a 16 MiB cap, the text of a 5 MiB string (its buffer doubles to
 * 8 MiB, beside the string and LuaJIT's own scratch) is refused: the
 * encode raises "not enough memory" — caught here, so the coroutine ends
 * normally with what pcall saw — and the host goes on encoding. */
TEST(memory_cap)
{
    setup_capped(16 * 1024 * 1024);
    char text[256] = "";
    ASSERT_EQ(luaL_loadstring(L, "local s = ('x'):rep(5 * 1024 * 1024)\n"
                                 "local json = require('moonflow').json\n"
                                 "local ok, err = pcall(json.encode, s)\n"
                                 "s = nil collectgarbage()\n"
                                 "return tostring(ok) .. ' ' .. err .. ' ' .. "
                                 "json.encode {ok = true}"),
              0);
    mf_lua_host_spawn(host, 0, on_exit_cb, text);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    char want[64];
    snprintf(want, sizeof want, "%d false not enough memory {\"ok\":true}",
             (int)MF_LUA_CO_DONE);
    ASSERT_STR_EQ(text, want);
    teardown();
}
