/*
 * lua/bench/bench_check.c — checks, as k6's: a scenario's iteration calls
 * bench.check(value, {["status is 200"] = function(v) ... end}) on what its
 * flow returned; each named function that returns a true value is a pass of
 * that check, anything else (false, nil, an error) a fail. Counted per name
 * in the thread's bench_checks_t (inside the measured window only, as
 * iterations), merged into the result by name.
 *
 * Makes the names of a bench_checks_t (bench_checks_free, with the result's
 * other parts in bench_report.c, frees them). The Lua function
 * holds the counters' address as an upvalue: the thread keeps them alive
 * while its host runs.
 */
#include <string.h>

#include <lauxlib.h>

#include <moonflow/loop.h>

#include "bench.h"

/* The counters of name, made on first use; NULL past the most a run keeps
 * (MF_BENCH_MAX_CHECKS names). */
static bench_check_t *check_slot(bench_checks_t *c, const char *name,
                                 size_t len)
{
    for (size_t i = 0; i < c->n; i++)
        if (strlen(c->items[i].name) == len &&
            memcmp(c->items[i].name, name, len) == 0)
            return &c->items[i];
    if (c->n == MF_BENCH_MAX_CHECKS)
        return NULL;
    bench_check_t *k = &c->items[c->n++];
    k->name = mf_xmalloc(len + 1);
    memcpy(k->name, name, len);
    k->name[len] = '\0';
    k->passes = k->fails = 0;
    return k;
}

/* One check: its function called with the value; whether it passed. */
static bool run_one(lua_State *L, bench_checks_t *c, int value, bool count)
{
    size_t len;
    const char *name = lua_tolstring(L, -2, &len);
    lua_pushvalue(L, -1);
    lua_pushvalue(L, value);
    bool passed = lua_pcall(L, 1, 1, 0) == 0 && lua_toboolean(L, -1);
    if (!passed && lua_type(L, -1) == LUA_TSTRING && !c->error_told) {
        c->error_told = true; /* the first raised error, once per thread */
        fprintf(stderr, "moonflow bench: check '%s' raised: %s\n", name,
                lua_tostring(L, -1));
    }
    lua_pop(L, 1);
    if (!count)
        return passed;
    bench_check_t *k = check_slot(c, name, len);
    if (k == NULL) {
        luaL_error(L, "bench.check: more than %d check names",
                   MF_BENCH_MAX_CHECKS);
        return false;
    }
    *(passed ? &k->passes : &k->fails) += 1;
    return passed;
}

/* bench.check(value, checks): true when every check passed. */
static int l_check(lua_State *L)
{
    bench_checks_t *c = lua_touserdata(L, lua_upvalueindex(1));
    luaL_checkany(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    uint64_t now = c->from_ns || c->until_ns ? mf_monotonic_ns() : 0;
    bool count = now >= c->from_ns && (c->until_ns == 0 || now <= c->until_ns);
    bool all = true;
    lua_pushnil(L);
    while (lua_next(L, 2) != 0) {
        if (lua_type(L, -2) != LUA_TSTRING || !lua_isfunction(L, -1))
            return luaL_error(L,
                              "bench.check: each check is a name and a "
                              "function (got %s = %s)",
                              luaL_typename(L, -2), luaL_typename(L, -1));
        all &= run_one(L, c, 1, count);
        lua_pop(L, 1);
    }
    lua_pushboolean(L, all);
    return 1;
}

void bench_checks_open(lua_State *L, bench_checks_t *c)
{
    lua_createtable(L, 0, 1);
    lua_pushlightuserdata(L, c);
    lua_pushcclosure(L, l_check, 1);
    lua_setfield(L, -2, "check");
    lua_setglobal(L, "bench");
}

void bench_checks_merge(bench_checks_t *into, const bench_checks_t *from)
{
    for (size_t i = 0; i < from->n; i++) {
        const bench_check_t *f = &from->items[i];
        bench_check_t *k = check_slot(into, f->name, strlen(f->name));
        if (k == NULL) /* both sides keep at most the same number */
            continue;
        k->passes += f->passes;
        k->fails += f->fails;
    }
}
