/* Loop checks written into Lua source (lua/host/mf_lua_instrument.c) and
 * the loads that use them (mf_lua_load.c): where checks go and where they
 * must not (strings, long strings, comments), lines kept, the same results
 * with and without checks, and in a watched host with the JIT on,
 * compiled loops stopped at the CPU budget whatever loaded them. */
#include <lauxlib.h>
#include <luajit.h>
#include <lualib.h>
#include <time.h>
#include <unistd.h>

#include <moonflow/lua_host.h>
#include <moonflow/moonflow.h>

#include "host/mf_lua_instrument.h"
#include "test.h"

/* ---- the rewriter alone -------------------------------------------------- */

static unsigned checks_in(const char *src)
{
    mf_lua_instrumented_t out;
    ASSERT_EQ(mf_lua_instrument(src, strlen(src), &out), 0);
    free(out.text);
    return out.checks;
}

static size_t newlines(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

TEST(a_check_goes_in_every_loop_body_function_and_before_goto)
{
    ASSERT_EQ(checks_in("while true do end"), 1u);
    ASSERT_EQ(checks_in("for i = 1, 3 do end for k, v in pairs{} do end"), 2u);
    ASSERT_EQ(checks_in("repeat local x = 1 until x"), 1u);
    ASSERT_EQ(checks_in("local function f(a, b) return a end"), 1u);
    ASSERT_EQ(checks_in("local t = {} function t.a.b:c(...) end"), 1u);
    ASSERT_EQ(checks_in("::top:: goto top"), 1u);
    /* a plain do block is no loop; a function inside a loop's head is
     * one function, and the loop's do is still found */
    ASSERT_EQ(checks_in("do local x = 1 end"), 0u);
    ASSERT_EQ(checks_in("while (function() do end return false end)() do end"),
              2u);
    ASSERT_EQ(checks_in("for i = 1, 2 do while i do do end end end"), 2u);
    /* LuaJIT reads `goto` as a name unless a name follows it where a
     * statement may start: no check inside an expression */
    ASSERT_EQ(checks_in("local x = 1 +goto+ 2"), 0u);
    ASSERT_EQ(checks_in("local t = {goto} t.goto = 1 goto = 2 f(goto)"), 0u);
    ASSERT_EQ(checks_in("local a = 1 --[[ c ]] goto --x\n top ::top::"), 1u);
    ASSERT_EQ(checks_in("if x then goto top end ::top:: f() goto top"), 2u);
}

TEST(strings_long_strings_and_comments_are_copied_unchecked)
{
    const char *quiet[] = {
        "local s = 'while true do end'",
        "local s = \"for i = 1, 2 do \\\" end\"",
        "local s = [[while true do\nend]]",
        "local s = [==[ repeat ]] until ]=] goto ]==]",
        "-- while true do end",
        "--[[ for\nfunction() end ]]",
        "--[=[ ]] while true do end ]=]",
        "local s = 'a\\\nwhile x do end'", /* backslash-newline inside */
        "local n = 0x1p4 + 1e+5 + .5",
        "local whiley, fort, do_ = 1, 2, 3",
        "local s = 'while x do \\", /* a backslash ends the text */
    };
    for (size_t i = 0; i < MF_ARRAY_SIZE(quiet); i++)
        ASSERT_EQ(checks_in(quiet[i]), 0u);
}

TEST(no_line_moves_and_a_final_comment_gets_its_own_line)
{
    const char *srcs[] = {"#!/usr/bin/env moonflow\nwhile x do\nend\n",
                          "local a = [[\n\n]] -- c\nfor i=1,2 do end",
                          "return 1 -- last",
                          /* hex: e is a digit, the "--" a comment */
                          "l = 0x4.e--"};
    const bool added[] = {false, false, true, true};
    for (size_t i = 0; i < MF_ARRAY_SIZE(srcs); i++) {
        mf_lua_instrumented_t out;
        size_t n = strlen(srcs[i]);
        ASSERT_EQ(mf_lua_instrument(srcs[i], n, &out), 0);
        ASSERT_EQ(out.newline_added, added[i]);
        ASSERT_EQ(newlines(out.text, out.len),
                  newlines(srcs[i], n) + (added[i] ? 1 : 0));
        free(out.text);
    }
}

TEST(nesting_past_the_parser_limit_is_refused)
{
    char src[2048] = "";
    for (int i = 0; i < 300; i++)
        strcat(src, "do ");
    mf_lua_instrumented_t out;
    ASSERT_EQ(mf_lua_instrument(src, strlen(src), &out), -1);
}

/* ---- same results with and without checks -------------------------------- */

static int32_t stop_word, scratch_word;

static int halt(lua_State *L)
{
    return luaL_error(L, "halted");
}

/* Loads src on L, checked or not, and runs it: its result (or error) as
 * a string in buf. */
static void run(lua_State *L, const char *src, bool checked, char *buf,
                size_t cap)
{
    mf_lua_instrumented_t out = {0};
    const char *text = src;
    size_t len = strlen(src);
    if (checked) {
        ASSERT_EQ(mf_lua_instrument(src, len, &out), 0);
        text = out.text;
        len = out.len;
    }
    int rc = luaL_loadbuffer(L, text, len, "=snippet");
    free(out.text);
    if (rc == 0 && checked) {
        ASSERT_EQ(luaL_dostring(L, "local ffi = require 'ffi' return "
                                   "function(f, w, s, h) return (f("
                                   "ffi.cast('int32_t *', w), "
                                   "ffi.cast('int32_t *', s), h)) end"),
                  0);
        lua_insert(L, -2);
        lua_pushlightuserdata(L, &stop_word);
        lua_pushlightuserdata(L, &scratch_word);
        lua_pushcfunction(L, halt);
        ASSERT_EQ(lua_pcall(L, 4, 1, 0), 0);
    }
    if (rc == 0)
        rc = lua_pcall(L, 0, 1, 0);
    lua_getglobal(L, "tostring");
    lua_insert(L, -2);
    lua_call(L, 1, 1);
    snprintf(buf, cap, "%d %s", rc, lua_tostring(L, -1));
    lua_pop(L, 1);
}

TEST(snippets_give_the_same_results_and_errors_with_checks)
{
    const char *snippets[] = {
        "local s = 0 for i = 1, 10 do s = s + i end return s",
        "local t = {} for k, v in ipairs{4, 5, 6} do t[#t + 1] = k * v end "
        "return table.concat(t, ',')",
        "local i, s = 0, '' while i < 5 do i = i + 1 s = s .. i end return s",
        /* until sees the body's locals */
        "local n = 0 repeat local done = n >= 3 n = n + 1 until done return n",
        /* goto continue, a label at the end of the body */
        "local s = 0 for i = 1, 10 do if i % 2 == 0 then goto continue end "
        "s = s + i ::continue:: end return s",
        "local n = 0 ::again:: n = n + 1 if n < 5 then goto again end return n",
        /* goto as a plain name (LuaJIT's reading when no name follows) */
        "local goto = 4 local x = 0x1p4 + 1e+5 +goto+ 4e-2 return x",
        /* a sign after a hex number's e is no exponent's: a comment */
        "local x = 0x4.e--1\nreturn x",
        "local function fib(n) if n < 2 then return n end "
        "return fib(n - 1) + fib(n - 2) end return fib(15)",
        "local function count(n, acc) if n == 0 then return acc end "
        "return count(n - 1, acc + 1) end return count(10000, 0)",
        "return select('#', ...)",
        "local o = {v = 2} function o:twice() return self.v * 2 end "
        "return o:twice()",
        "local s = 'while true do end' .. [[for]] -- repeat\nreturn s",
        "local t = setmetatable({}, {__index = function(t, k) return k .. k "
        "end}) return t.ab",
        "return nil .. 'x'",
        "local x = 1\nlocal y\nreturn y.z",
        "error('where?')",
        "#!/bin/sh\nreturn debug.getinfo(1, 'l').currentline",
        "\n\nlocal f = function() local t = debug.traceback('tb', 1) return t end\n"
        "return (f())",
    };
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    for (size_t i = 0; i < MF_ARRAY_SIZE(snippets); i++) {
        char plain[1024], checked[1024];
        run(L, snippets[i], false, plain, sizeof plain);
        run(L, snippets[i], true, checked, sizeof checked);
        if (strcmp(plain, checked) != 0)
            fprintf(stderr, "snippet %zu:\n  %s\n  %s\n", i, plain, checked);
        if (strncmp(snippets[i], "\n\nlocal f", 9) == 0) {
            /* tracebacks name the same lines; the chunk itself is a
             * function of line 1 with checks, not the main chunk */
            ASSERT(strstr(plain, "snippet:3: in function 'f'"));
            ASSERT(strstr(checked, "snippet:3: in function 'f'"));
            ASSERT(strstr(plain, "snippet:4: in main chunk"));
            ASSERT(strstr(checked, "snippet:4: in function <snippet:1>"));
            continue;
        }
        ASSERT_STR_EQ(plain, checked);
    }
    lua_close(L);
}

/* ---- a watched host, the JIT on ------------------------------------------ */

static mf_loop_t *loop;
static mf_lua_host_t *host;
static char logged[4096];

static void log_cb(void *ud, const char *msg)
{
    (void)ud;
    snprintf(logged, sizeof logged, "%s", msg);
}

typedef struct seen {
    int calls;
    mf_lua_co_status_t status;
    mf_lua_co_cause_t cause;
    char text[1024];
} seen_t;

static void on_exit_cb(mf_lua_co_t *co, const mf_lua_co_exit_t *ex, void *data)
{
    seen_t *s = data;
    (void)co;
    s->calls++;
    s->status = ex->status;
    s->cause = ex->cause;
    const char *t = ex->status == MF_LUA_CO_DONE
                        ? (ex->nret ? lua_tostring(ex->L, -1) : "")
                        : ex->message;
    snprintf(s->text, sizeof s->text, "%s", t ? t : "");
}

static void setup_watched(void)
{
    mf_lua_host_opts_t opts = {
        .log = log_cb, .cpu_budget_ms = 100, .interruptible = true};
    loop = mf_loop_create();
    host = mf_lua_host_create(loop, &opts);
    ASSERT(host);
    logged[0] = '\0';
    alarm(60); /* a loop the checks miss would spin: fail, not hang */
}

static void teardown_watched(void)
{
    alarm(0);
    mf_lua_host_destroy(host);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    mf_loop_destroy(loop);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Loads code as user code (mf_lua_load_buffer), runs it as a coroutine
 * that never yields; the milliseconds it took. */
static uint64_t spawn(const char *code, seen_t *s)
{
    lua_State *L = mf_lua_host_state(host);
    ASSERT_EQ(mf_lua_load_buffer(L, code, strlen(code), "=handler"), 0);
    uint64_t t0 = now_ms();
    ASSERT(mf_lua_host_spawn(host, 0, on_exit_cb, s) == NULL);
    return now_ms() - t0;
}

static void assert_stopped_at_budget(const char *code)
{
    seen_t s = {0};
    uint64_t ms = spawn(code, &s);
    if (s.status != MF_LUA_CO_ERROR || s.cause != MF_LUA_CAUSE_CPU)
        fprintf(stderr, "%s: %s\n", code, s.text);
    ASSERT_EQ(s.status, MF_LUA_CO_ERROR);
    ASSERT_EQ(s.cause, MF_LUA_CAUSE_CPU);
    ASSERT(strstr(s.text, "cpu budget exceeded: ran 100 ms"));
    ASSERT(ms >= 100 && ms < 5000);
    /* the next one runs whole: no stale stop word */
    seen_t next = {0};
    spawn("local x = 0 for i = 1, 1e5 do x = x + i end return tostring(x)",
          &next);
    ASSERT_EQ(next.status, MF_LUA_CO_DONE);
    ASSERT_STR_EQ(next.text, "5000050000");
}

TEST(the_jit_is_on_in_a_watched_host)
{
    setup_watched();
    seen_t s = {0};
    spawn("return tostring((jit.status()))", &s);
    ASSERT_STR_EQ(s.text, "true");
    teardown_watched();
}

TEST(compiled_loops_are_stopped_at_the_budget)
{
    setup_watched();
    assert_stopped_at_budget("while true do end");
    assert_stopped_at_budget("local x = 0 for i = 1, 1e12 do x = x + i end");
    assert_stopped_at_budget("local x = 0 repeat x = x + 1 until false");
    assert_stopped_at_budget("local n = 0 ::top:: n = n + 1 goto top");
    assert_stopped_at_budget(
        "local function deep(n) local x = 0 for i = 1, n do x = x + i end "
        "return x end local y = 0 while true do y = y + deep(1e9) end");
    /* a pcall that catches the stop is stopped again at its next check */
    assert_stopped_at_budget(
        "while true do pcall(function() while true do end end) end");
    teardown_watched();
}

TEST(the_error_names_the_line_of_the_loop)
{
    setup_watched();
    seen_t s = {0};
    spawn("local x = 0\n\nfor i = 1, 1e12 do\n x = x + i\nend", &s);
    ASSERT(strstr(s.text, "handler:3: cpu budget exceeded") ||
           strstr(s.text, "handler:4: cpu budget exceeded"));
    teardown_watched();
}

TEST(loops_of_code_loaded_from_lua_are_stopped)
{
    setup_watched();
    char path[] = "/tmp/mf_instrument_XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    const char *mod = "return function() local x = 0 "
                      "for i = 1, 1e12 do x = x + i end end\n";
    ASSERT_EQ(write(fd, mod, strlen(mod)), (ssize_t)strlen(mod));
    close(fd);
    char code[512];
    const char *calls[] = {"loadstring('while true do end')()",
                           "load('while true do end')()",
                           "load(coroutine.wrap(function() "
                           "coroutine.yield('while true ') "
                           "coroutine.yield('do end') end))()",
                           "loadfile('%s')()()", "dofile('%s')()",
                           /* require's Lua searcher */
                           "package.path = '%s' .. ';' .. package.path "
                           "require('anything')()"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(calls); i++) {
        snprintf(code, sizeof code, calls[i], path);
        assert_stopped_at_budget(code);
    }
    unlink(path);
    teardown_watched();
}

TEST(what_cannot_be_checked_runs_with_the_jit_off_and_is_stopped)
{
    setup_watched();
    /* bytecode */
    assert_stopped_at_budget(
        "local f = string.dump(function() local x = 0 "
        "for i = 1, 1e12 do x = x + i end end) load(f)()");
    /* a function at 118 upvalues: the checks' three pass LuaJIT's 120 */
    char code[8192] = "";
    for (int i = 0; i < 118; i++)
        snprintf(code + strlen(code), sizeof code - strlen(code),
                 "local u%d = %d\n", i, i);
    strcat(code, "return function() local x = 0");
    for (int i = 0; i < 118; i++)
        snprintf(code + strlen(code), sizeof code - strlen(code), " + u%d",
                 i);
    strcat(code, " for i = 1, 1e12 do x = x + i end end");
    lua_State *L = mf_lua_host_state(host);
    ASSERT_EQ(mf_lua_load_buffer(L, code, strlen(code), "=wide"), 0);
    ASSERT(strstr(logged, "wide: loaded without loop checks"));
    lua_pop(L, 1);
    lua_pushstring(L, code);
    lua_setglobal(L, "wide_code");
    assert_stopped_at_budget("loadstring(wide_code)()()");
    teardown_watched();
}
