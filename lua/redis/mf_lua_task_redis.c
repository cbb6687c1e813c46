/*
 * lua/redis/mf_lua_task_redis.c — the "redis" task kind (mf.task.redis):
 * {client = r, cmds = {{cmd, ...}, ...}, list = true|nil} sends the
 * commands on the client's connections; the result has value (one
 * command's reply) or values (list: every reply), converted as r:call
 * does (mf_lua_redis.c).
 *
 * A description built once and waited on again and again (a load
 * scenario's prebuilt flow, a handler's module-level step) would have its
 * commands read and encoded each time. So the commands table of a
 * description seen a second time gets a prepared form: its commands
 * encoded once (mf_redis_prepared_t) with the identity of what they were
 * made from (each command table, each argument: the interned string or the
 * number). Each check compares that identity with the table as it is
 * now, entry by entry, and the create uses the encoded bytes only when
 * nothing changed; a changed table is read and encoded again as a new one would
 * be (and, changed once, is never prepared again). The strings and tables
 * compared against are anchored by the prepared form, so no new object can
 * take their address while it lives. A table seen once (a description
 * built per request) costs a lookup and a slot of a small address filter.
 *
 * Owns: per host, the cache (a registry userdata holding the address
 * filter, its environment a weak-keyed table: commands table → prepared
 * userdata, which owns its mf_redis_prepared_t and frees it in __gc). The
 * task's data keeps the reply flags (list, the client's status_table
 * option).
 */
#include <stdint.h>
#include <string.h>

#include <lauxlib.h>

#include "host/mf_lua_leaf.h"
#include "mf_lua_redis.h"

#define MF_LUA_REDIS_PREPARED "moonflow.redis.prepared"
#define MF_LUA_REDIS_SEEN 64 /* the address filter's slots */

typedef struct mf_lua_redis_data {
    unsigned flags; /* MF_LUA_REDIS_LIST, MF_LUA_REDIS_STATUS */
} mf_lua_redis_data_t;

/* The cache of a host (registry[&mf_lua__cache_key]). Its environment is
 * {[1] = the comparison function (MF_LUA__SAME), [2] = the weak-keyed table
 * commands table → prepared form}. */
typedef struct mf_lua_redis_cache {
    const void *seen[MF_LUA_REDIS_SEEN]; /* commands tables seen once */
} mf_lua_redis_cache_t;

/* A prepared form; its environment is the snapshot of what it was made
 * from: per command its table and argc, then its arguments, in order. */
typedef struct mf_lua_redis_prep {
    mf_redis_prepared_t *p; /* NULL once found changed, or collected */
    int ncmds;
} mf_lua_redis_prep_t;

static const char mf_lua__cache_key;

/* same(cmds, snapshot, ncmds): whether cmds is still made of the snapshot's
 * tables and values. Lua compares faster than the C API reads (a string by
 * address: interned, and the old one is anchored by the snapshot); raw
 * reads, so no metamethod of the caller's runs. */
static const char MF_LUA__SAME[] =
    "local rawget, rawequal = rawget, rawequal\n"
    "return function(cmds, snap, n)\n"
    "  if #cmds ~= n then return false end\n"
    "  local j = 1\n"
    "  for i = 1, n do\n"
    "    local c = rawget(cmds, i)\n"
    "    if not rawequal(c, snap[j]) then return false end\n"
    "    local argc = snap[j + 1]\n"
    "    if #c ~= argc then return false end\n"
    "    for k = 1, argc do\n"
    "      if rawget(c, k) ~= snap[j + 1 + k] then return false end\n"
    "    end\n"
    "    j = j + 2 + argc\n"
    "  end\n"
    "  return true\n"
    "end\n";

/* ---- the cache ------------------------------------------------------------
 */

static int mf_lua__prep_gc(lua_State *L)
{
    mf_lua_redis_prep_t *pr = lua_touserdata(L, 1);
    mf_redis_prepared_destroy(pr->p);
    pr->p = NULL;
    return 0;
}

/* Makes the host's cache (pushed). */
static mf_lua_redis_cache_t *mf_lua__cache_new(lua_State *L)
{
    mf_lua_redis_cache_t *c = lua_newuserdata(L, sizeof(*c));
    memset(c, 0, sizeof(*c));
    lua_createtable(L, 2, 0);
    if (luaL_loadbuffer(L, MF_LUA__SAME, sizeof MF_LUA__SAME - 1,
                        "=[moonflow redis]") != 0)
        lua_error(L); /* out of memory: the check raises it */
    lua_call(L, 0, 1);
    lua_rawseti(L, -2, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_rawseti(L, -2, 2);
    lua_setfenv(L, -2);
    lua_pushlightuserdata(L, (void *)&mf_lua__cache_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
    return c;
}

/* Pushes the cache's environment {same, map}; returns the cache. */
static mf_lua_redis_cache_t *mf_lua__cache_push(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&mf_lua__cache_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    mf_lua_redis_cache_t *c = lua_touserdata(L, -1);
    if (!c) {
        lua_pop(L, 1);
        c = mf_lua__cache_new(L);
    }
    lua_getfenv(L, -1);
    lua_remove(L, -2);
    return c;
}

/* The prepared form of the commands table at cmds (absolute), or NULL.
 * The check validates it: it is returned only while it still matches the
 * table; one found changed is dropped for good, its entry kept as a mark
 * (*known), so a table rewritten between waits is encoded per task, as a
 * new one is, and never prepared again. The create that follows the check
 * (in the same wait, no Lua code of the caller in between) takes what the
 * check left without comparing again. */
static const mf_lua_redis_prep_t *mf_lua__prep_find(lua_State *L, int cmds,
                                                    bool validate, bool *known)
{
    mf_lua__cache_push(L);
    lua_rawgeti(L, -1, 2);
    lua_pushvalue(L, cmds);
    lua_rawget(L, -2);
    mf_lua_redis_prep_t *pr = lua_touserdata(L, -1);
    *known = pr != NULL;
    bool same = pr && pr->p;
    if (same && validate) {
        lua_rawgeti(L, -3, 1);
        lua_pushvalue(L, cmds);
        lua_getfenv(L, -3);
        lua_pushinteger(L, pr->ncmds);
        lua_call(L, 3, 1);
        same = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (!same) {
            mf_redis_prepared_destroy(pr->p);
            pr->p = NULL;
        }
    }
    lua_pop(L, 3);
    return same ? pr : NULL;
}

/* Encodes the command table at cmd (absolute) into pr, appending it, its
 * argc and its arguments to the snapshot at snap (*n entries so far).
 * 0, or MF_ENOMEM. */
static int mf_lua__prep_add(lua_State *L, mf_lua_redis_prep_t *pr, int cmd,
                            int snap, int *n)
{
    int argc = (int)lua_objlen(L, cmd);
    mf_lua_redis_argv_t a;
    mf_lua_redis_argv_init(&a);
    lua_pushvalue(L, cmd);
    lua_rawseti(L, snap, ++*n);
    lua_pushinteger(L, argc);
    lua_rawseti(L, snap, ++*n);
    for (int k = 1; k <= argc; k++) {
        lua_rawgeti(L, cmd, k);
        mf_lua_redis_argv_push(L, &a, -1);
        lua_rawseti(L, snap, ++*n); /* it keeps argv's string alive */
    }
    int rc = mf_redis_prepared_add(pr->p, a.argc, a.argv, a.lens);
    mf_lua_redis_argv_close(&a);
    return rc;
}

/* Prepares the checked commands table at cmds (absolute) and stores it in
 * the map at map. Out of memory: nothing is stored (the table is encoded
 * per task, as before). */
static void mf_lua__prep_store(lua_State *L, int cmds, int map)
{
    mf_lua_redis_prep_t *pr = lua_newuserdata(L, sizeof(*pr));
    pr->p = NULL;
    pr->ncmds = (int)lua_objlen(L, cmds);
    if (luaL_newmetatable(L, MF_LUA_REDIS_PREPARED)) {
        lua_pushcfunction(L, mf_lua__prep_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    int ud = lua_gettop(L);
    pr->p = mf_redis_prepared_create();
    lua_createtable(L, pr->ncmds * 4, 0);
    int snap = ud + 1, n = 0, rc = 0;
    for (int i = 1; rc == 0 && i <= pr->ncmds; i++) {
        lua_rawgeti(L, cmds, i);
        rc = mf_lua__prep_add(L, pr, snap + 1, snap, &n);
        lua_pop(L, 1);
    }
    if (rc == 0) {
        lua_setfenv(L, ud);
        lua_pushvalue(L, cmds);
        lua_pushvalue(L, ud);
        lua_rawset(L, map);
    }
    lua_settop(L, ud - 1);
}

/* A commands table that passed the check: prepared when it is seen the
 * second time (a description waited on again). */
static void mf_lua__prep_note(lua_State *L, int cmds)
{
    mf_lua_redis_cache_t *c = mf_lua__cache_push(L);
    const void *p = lua_topointer(L, cmds);
    size_t slot = ((uintptr_t)p >> 4) % MF_LUA_REDIS_SEEN;
    if (c->seen[slot] == p) {
        c->seen[slot] = NULL;
        lua_rawgeti(L, -1, 2);
        mf_lua__prep_store(L, cmds, lua_gettop(L));
        lua_pop(L, 1);
    } else {
        c->seen[slot] = p;
    }
    lua_pop(L, 1);
}

/* ---- the kind ------------------------------------------------------------ */

static void mf_lua__redis_check(lua_State *L, int idx)
{
    lua_getfield(L, idx, "client");
    if (!luaL_testudata(L, -1, MF_LUA_REDIS))
        luaL_error(L, "redis task: client must be an mf.redis object");
    lua_getfield(L, idx, "cmds");
    int cmds = lua_gettop(L);
    if (!lua_istable(L, cmds))
        luaL_error(L, "redis task: a command expected");
    bool known;
    if (!mf_lua__prep_find(L, cmds, true, &known)) {
        if (mf_lua_redis_check_cmds(L, cmds, "redis task") == 0)
            luaL_error(L, "redis task: a command expected");
        if (!known)
            mf_lua__prep_note(L, cmds);
    }
    lua_pop(L, 2);
}

static mf_task_t *mf_lua__redis_create(lua_State *L, int idx, void *data,
                                       mf_loop_t *loop, mf_task_cb cb,
                                       void *user)
{
    (void)loop; /* the client's loop: the host's */
    mf_lua_redis_data_t *d = data;
    lua_getfield(L, idx, "list");
    lua_getfield(L, idx, "client");
    const mf_lua_redis_t *r = lua_touserdata(L, -1);
    d->flags = (lua_toboolean(L, -2) ? MF_LUA_REDIS_LIST : 0) | r->flags;
    mf_task_t *task = mf_task_redis_create(r->client, cb, user);
    lua_getfield(L, idx, "cmds");
    int cmds = lua_gettop(L);
    bool known;
    const mf_lua_redis_prep_t *pr = mf_lua__prep_find(L, cmds, false, &known);
    if (pr) {
        mf_task_redis_add_prepared(task, pr->p);
    } else {
        int n = (int)lua_objlen(L, cmds);
        for (int i = 1; i <= n; i++) {
            lua_rawgeti(L, cmds, i);
            mf_lua_redis_add_table(L, task, cmds + 1);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 3);
    return task;
}

/* result.value (one command) or result.values (a list of commands). */
static void mf_lua__redis_result(lua_State *L, mf_task_t *task, void *data)
{
    const mf_lua_redis_data_t *d = data;
    if (mf_task_redis_nreplies(task) == 0)
        return;
    if (d->flags & MF_LUA_REDIS_LIST) {
        mf_lua_redis_push_replies(L, task, d->flags);
        lua_setfield(L, -2, "values");
    } else {
        mf_lua_redis_push_reply(L, mf_task_redis_reply(task, 0), d->flags);
        lua_setfield(L, -2, "value");
    }
}

/* Redis's own refusal of AUTH/SELECT, after "permission denied". */
static const char *mf_lua__redis_error_detail(const mf_task_t *task, void *data)
{
    (void)data;
    return mf_task_redis_error_message(task);
}

/* An error reply (a reply, not a task failure) to any of the commands. */
static bool mf_lua__redis_answer_failed(const mf_task_t *task, void *data)
{
    (void)data;
    return mf_task_redis_error_replies(task) > 0;
}

/* For reports: the first command's name (cmds[1][1]). */
static void mf_lua__redis_describe(lua_State *L, int idx)
{
    lua_getfield(L, idx, "cmds");
    if (lua_type(L, -1) == LUA_TTABLE) {
        lua_rawgeti(L, -1, 1);
        lua_remove(L, -2);
        if (lua_type(L, -1) == LUA_TTABLE) {
            lua_rawgeti(L, -1, 1);
            lua_remove(L, -2);
        }
    }
}

const mf_lua_kind_t mf_lua_task_redis_kind = {
    .name = "redis",
    .data_size = sizeof(mf_lua_redis_data_t),
    .check = mf_lua__redis_check,
    .create = mf_lua__redis_create,
    .result = mf_lua__redis_result,
    .error_detail = mf_lua__redis_error_detail,
    .answer_failed = mf_lua__redis_answer_failed,
    .describe = mf_lua__redis_describe,
    .label = mf_lua_kind_label_verb,
};
