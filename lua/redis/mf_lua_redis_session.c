/*
 * lua/redis/mf_lua_redis_session.c — r:session([keys,] fn): fn(s) runs in the
 * calling coroutine with s holding one dedicated connection of the client
 * (mf_redis_session_t); s:call waits like r:call, and WATCH / MULTI / EXEC
 * may span calls. The connection goes back clean (core/redis's session
 * cleanup) when fn returns, raises, or the coroutine is stopped.
 *
 * r:session itself is Lua (a chunk compiled at load, below): fn runs under
 * xpcall, which may yield in LuaJIT, so s:call can park inside it, and the
 * close runs on every way out of it before the error is raised again.
 * When the coroutine is stopped while fn waits (an aborted handler, a
 * timed-out mf.task.lua), no Lua runs any more: the session is owned by
 * the coroutine (mf_lua_co_own) and its exit path closes it. The object's
 * __gc closes it too, as a last resort.
 *
 * Owns: the session object (a userdata) owns its mf_redis_session_t until
 * closed; the core frees the session after its cleanup.
 */
#include <string.h>
#include <strings.h>

#include <lauxlib.h>

#include <moonflow/common.h>
#include <moonflow/lua_arg.h>

#include "host/mf_lua_int.h"
#include "mf_lua_redis.h"

#define MF_LUA_REDIS_SESSION "moonflow.redis.session"

typedef struct mf_lua_session {
    mf_redis_session_t *s; /* NULL once closed */
    mf_lua_co_t *waiting;  /* parked until the session holds a connection */
    mf_lua_owned_t owned;  /* in the opening coroutine's list */
    unsigned flags;        /* the client's reply flags */
    int error;             /* the open's (MF_EBUSY) */
    bool cluster;          /* a cluster client's: the keys' slot's node */
    bool ready;
} mf_lua_session_t;

static mf_lua_session_t *mf_lua__session_check(lua_State *L)
{
    return mf_lua_check_udata(L, 1, MF_LUA_REDIS_SESSION);
}

static void mf_lua__session_close(mf_lua_session_t *ls)
{
    mf_lua_owned_drop(&ls->owned);
    ls->waiting = NULL;
    if (ls->s)
        mf_redis_session_close(ls->s);
    ls->s = NULL;
}

/* The coroutine ended with the session open (stopped inside fn). */
static void mf_lua__session_release(mf_lua_owned_t *o)
{
    mf_lua__session_close(mf_container_of(o, mf_lua_session_t, owned));
}

/* Why the open failed, for the error r:session raises. */
static const char *mf_lua__session_why(const mf_lua_session_t *ls)
{
    if (ls->error != MF_EINVAL)
        return mf_lua_redis_errstr(ls->error);
    return ls->cluster ? "the keys are not all in one slot of the cluster "
                         "(one hash tag puts them there: {user1}.a, "
                         "{user1}.b)"
                       : "the keys are not all on one server of the "
                         "upstream group";
}

/* The session holds its connection (or could not get one). */
static void mf_lua__session_ready(mf_redis_session_t *s, int error, void *user)
{
    mf_lua_session_t *ls = user;
    (void)s;
    ls->ready = true;
    ls->error = error;
    mf_lua_co_t *co = ls->waiting;
    if (!co)
        return;
    ls->waiting = NULL;
    mf_lua_co_unpark(co);
    lua_State *L = mf_lua_co_thread(co);
    if (error) {
        lua_pushnil(L);
        lua_pushstring(L, mf_lua__session_why(ls));
        mf_lua_co_resume(co, 2);
        return;
    }
    lua_pushboolean(L, 1);
    mf_lua_co_resume(co, 1);
}

/* Cleanup hook of a coroutine stopped while it waits for the connection:
 * it stops waiting; its exit path closes the session. */
static void mf_lua__session_unwait(void *op)
{
    mf_lua_session_t *ls = op;
    ls->waiting = NULL;
}

/* The keys at idx (a string, or a list of them) into keys/lens; how many.
 * Raises on anything else. */
static int mf_lua__session_keys(lua_State *L, int idx, const char **keys,
                                size_t *lens, int cap)
{
    if (lua_type(L, idx) == LUA_TSTRING) {
        keys[0] = lua_tolstring(L, idx, &lens[0]);
        return 1;
    }
    if (lua_type(L, idx) != LUA_TTABLE)
        luaL_error(L,
                   "r:session(keys, fn): keys must be a key or a list of "
                   "keys, got %s",
                   luaL_typename(L, idx));
    int n = (int)lua_objlen(L, idx);
    if (n < 1 || n > cap)
        luaL_error(L, "r:session(keys, fn): keys must list 1 to %d keys", cap);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, idx, i + 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "r:session(keys, fn): key %d is a %s, not a string",
                       i + 1, luaL_typename(L, -1));
        keys[i] = lua_tolstring(L, -1, &lens[i]); /* kept by the table */
        lua_pop(L, 1);
    }
    return n;
}

/* new(r [, keys]) -> s, a session being opened, owned by the running
 * coroutine. */
static int mf_lua__session_new(lua_State *L)
{
    mf_lua_redis_t *r = mf_lua_redis_check(L, 1);
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_redis_cluster_stats_t st;
    bool cluster = mf_redis_cluster_stats(r->client, &st) == 0;
    const char *keys[64];
    size_t lens[64];
    int nkeys = 0;
    if (!lua_isnil(L, 2))
        nkeys = mf_lua__session_keys(L, 2, keys, lens, 64);
    else if (cluster)
        return luaL_error(L, "r:session(fn) on a cluster client: name the "
                             "keys the session touches, r:session(key or "
                             "{keys}, fn), so it runs on their slot's node");
    mf_lua_session_t *ls = lua_newuserdata(L, sizeof(*ls));
    memset(ls, 0, sizeof(*ls));
    mf_list_init(&ls->owned.link);
    ls->owned.release = mf_lua__session_release;
    ls->flags = r->flags;
    ls->cluster = cluster;
    luaL_getmetatable(L, MF_LUA_REDIS_SESSION);
    lua_setmetatable(L, -2);
    ls->s = mf_redis_session_open_keys(r->client, nkeys, keys, lens,
                                       mf_lua__session_ready, ls);
    mf_lua_co_own(co, &ls->owned);
    return 1;
}

/* wait(s) -> true | nil, err once the session holds a connection. */
static int mf_lua__session_wait(lua_State *L)
{
    mf_lua_session_t *ls = mf_lua__session_check(L);
    if (!ls->ready) {
        mf_lua_co_t *co = mf_lua_co_check(L);
        ls->waiting = co;
        mf_lua_co_park(co, mf_lua__session_unwait, ls);
        return lua_yield(L, 0);
    }
    if (ls->error) {
        lua_pushnil(L);
        lua_pushstring(L, mf_lua__session_why(ls));
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* close(s): the connection goes back (cleaned by the core). */
static int mf_lua__session_close_fn(lua_State *L)
{
    mf_lua__session_close(mf_lua__session_check(L));
    return 0;
}

static int mf_lua__session_gc(lua_State *L)
{
    mf_lua__session_close(lua_touserdata(L, 1));
    return 0;
}

/* Pub/sub and MONITOR turn the connection into a stream of pushed
 * messages, which a call-and-reply session cannot read: r:subscribe has a
 * connection of its own for that. Raises. */
static void mf_lua__check_not_pubsub(lua_State *L, int idx)
{
    static const char *const words[] = {"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE",
                                        "MONITOR"};
    size_t len = 0;
    const char *cmd =
        lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, &len) : NULL;
    for (size_t i = 0; cmd && i < MF_ARRAY_SIZE(words); i++)
        if (strlen(words[i]) == len && strncasecmp(cmd, words[i], len) == 0)
            luaL_error(L,
                       "s:call(\"%s\"): a session holds a connection for "
                       "commands and their replies, not for pub/sub: use "
                       "r:subscribe / r:psubscribe (a connection of its own)",
                       words[i]);
}

/* s:call(cmd, ...) -> reply | nil, err, on the session's connection. */
static int mf_lua__session_call(lua_State *L)
{
    mf_lua_session_t *ls = mf_lua__session_check(L);
    int top = lua_gettop(L);
    mf_lua_redis_check_args(L, 2, top, "s:call");
    if (!ls->s || !ls->ready)
        return luaL_error(L, "s:call: the session is over (s is for the "
                             "function given to r:session, while it runs)");
    mf_lua__check_not_pubsub(L, 2);
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_task_t *task = mf_task_redis_session_create(
        ls->s, mf_lua_redis_call_cb(ls->flags), NULL);
    mf_lua_redis_add_range(L, task, 2, top);
    return mf_lua_redis_park(L, co, task);
}

static int mf_lua__session_tostring(lua_State *L)
{
    lua_pushfstring(L, "mf.redis session: %p", lua_touserdata(L, 1));
    return 1;
}

/* The message handler of fn's xpcall: a string error gets the traceback of
 * where it was raised (the re-raise after the close would lose it); any
 * other error value goes through as it is. */
static int mf_lua__session_traceback(lua_State *L)
{
    if (lua_type(L, 1) == LUA_TSTRING)
        luaL_traceback(L, L, lua_tostring(L, 1), 1);
    else
        lua_settop(L, 1);
    return 1;
}

/* r:session([keys,] fn). A second session of the same client inside fn, in the
 * same coroutine, would take a second connection it cannot need (and wait
 * forever for it with max_connections 1): it raises. */
static const char MF_LUA__SESSION[] =
    "local new, wait, close, handler = ...\n"
    "local type, error, tostring, xpcall = type, error, tostring, xpcall\n"
    "local running, setmetatable = coroutine.running, setmetatable\n"
    "local held = setmetatable({}, { __mode = 'k' })\n"
    "local function finish(s, mine, r, ok, ...)\n"
    "  close(s)\n"
    "  mine[r] = nil\n"
    "  if not ok then error((...), 0) end\n"
    "  return ...\n"
    "end\n"
    "return function(r, keys, fn)\n"
    "  local what = 'r:session(keys, fn)'\n"
    "  local kt = type(keys)\n"
    "  if fn == nil and kt ~= 'string' and kt ~= 'table' then\n"
    "    keys, fn, what = nil, keys, 'r:session(fn)'\n"
    "  end\n"
    "  if type(fn) ~= 'function' then\n"
    "    error(what .. ': fn must be a function, got ' .. type(fn), 2)\n"
    "  end\n"
    "  local co = running() or held\n"
    "  local mine = held[co]\n"
    "  if mine and mine[r] then\n"
    "    error(what .. ': this coroutine is in a session of this '\n"
    "      .. 'client already: use its s', 2)\n"
    "  end\n"
    "  local s = new(r, keys)\n"
    "  local ok, err = wait(s)\n"
    "  if not ok then\n"
    "    close(s)\n"
    "    error(what .. ': ' .. tostring(err), 2)\n"
    "  end\n"
    "  if not mine then mine = {}; held[co] = mine end\n"
    "  mine[r] = true\n"
    "  return finish(s, mine, r, xpcall(fn, handler, s))\n"
    "end\n";

void mf_lua_redis_session_push(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"call s:call(cmd, ...)", mf_lua__session_call}, {NULL, NULL}};
    mf_lua_class(L, MF_LUA_REDIS_SESSION, methods, mf_lua__session_gc,
                 mf_lua__session_tostring);
    lua_pop(L, 1);
    if (luaL_loadbuffer(L, MF_LUA__SESSION, sizeof MF_LUA__SESSION - 1,
                        "=r:session") != 0)
        lua_error(L); /* a bug of this file */
    lua_pushcfunction(L, mf_lua__session_new);
    lua_pushcfunction(L, mf_lua__session_wait);
    lua_pushcfunction(L, mf_lua__session_close_fn);
    lua_pushcfunction(L, mf_lua__session_traceback);
    lua_call(L, 4, 1);
}
