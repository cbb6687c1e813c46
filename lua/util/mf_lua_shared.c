/*
 * lua/util/mf_lua_shared.c — shared dicts in Lua: the process's registry of
 * named dicts (moonflow/lua_shared.h) and the module moonflow.shared behind
 * mf.shared.NAME and mf.shared_dict(name, bytes). A dict object's methods
 * are OpenResty's ngx.shared.DICT ones with the same arguments and
 * answers: get, get_stale, set, safe_set, add, safe_add, replace, delete,
 * incr, lpush, rpush, lpop, rpop, llen, ttl, expire, flush_all,
 * flush_expired, get_keys, capacity, free_space. Times are seconds (ms
 * resolution), as there. The module's leaky(d, ...) is the dict's leaky
 * bucket (mf_shdict_leaky) for moonflow.limit, kept out of the methods.
 *
 * Misuse raises at the caller's line naming the method and the argument (a
 * key that is not a string or a number, empty or over 65535 bytes; a
 * table or function value; a negative exptime); what the dict refuses
 * comes back as nil/false and OpenResty's words ("not found", "exists",
 * "no memory", "not a number", "value not a list", "value is a list").
 *
 * Where the JIT is on, moonflow/shared_ffi.lua puts FFI calls in front of
 * get, set and incr (a C function call ends a compiled trace; an FFI call
 * does not) and hands them every case it does not take ("methods" in the
 * module table is what it patches).
 *
 * No lock is held while Lua runs: each method checks its arguments, makes
 * one call of the C dict (which copies strings out into this state's
 * buffer under the stripe's lock) and only then pushes the results.
 *
 * Owns: the registry (a mutex and a fixed table); per state, one object
 * per dict (cached in an upvalue table, so mf.shared.x == mf.shared.x) and
 * the read buffer (a userdata whose __gc frees it). May call: the dict
 * (moonflow/shdict.h) and the Lua API.
 */
#include <ctype.h>
#include <lauxlib.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>

#include <moonflow/lua_arg.h>
#include <moonflow/error.h>
#include <moonflow/lua_shared.h>

#include "host/mf_lua_int.h"
#include "mf_lua_util.h"

#define MF_LUA_SHDICT "moonflow.shdict"
#define MF_LUA_SHARED_KEYS_DEFAULT 1024

/* ---- the registry -------------------------------------------------------- */

static struct {
    pthread_mutex_t lock;
    unsigned n;
    struct {
        char name[MF_LUA_SHARED_MAX_NAME + 1];
        mf_shdict_t *dict;
    } dicts[MF_LUA_SHARED_MAX];
} mf__registry = {.lock = PTHREAD_MUTEX_INITIALIZER};

int mf_lua_shared_check_name(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > MF_LUA_SHARED_MAX_NAME ||
        isdigit((unsigned char)*name))
        return MF_EINVAL;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_')
            return MF_EINVAL;
    return 0;
}

static mf_shdict_t *mf__registry_find(const char *name)
{
    for (unsigned i = 0; i < mf__registry.n; i++)
        if (strcmp(mf__registry.dicts[i].name, name) == 0)
            return mf__registry.dicts[i].dict;
    return NULL;
}

mf_shdict_t *mf_lua_shared_find(const char *name)
{
    pthread_mutex_lock(&mf__registry.lock);
    mf_shdict_t *d = mf__registry_find(name);
    pthread_mutex_unlock(&mf__registry.lock);
    return d;
}

static int mf__registry_add(const char *name, size_t capacity,
                            mf_shdict_t **out)
{
    if ((*out = mf__registry_find(name)))
        return 0;
    if (mf__registry.n == MF_LUA_SHARED_MAX)
        return MF_ENOSPC;
    int err = 0;
    mf_shdict_opts_t opts = {.capacity = capacity};
    if (!(*out = mf_shdict_create(&opts, &err)))
        return err;
    strcpy(mf__registry.dicts[mf__registry.n].name, name);
    mf__registry.dicts[mf__registry.n++].dict = *out;
    return 0;
}

int mf_lua_shared_create(const char *name, size_t capacity, mf_shdict_t **out)
{
    *out = NULL;
    if (mf_lua_shared_check_name(name) < 0)
        return MF_EINVAL;
    pthread_mutex_lock(&mf__registry.lock);
    int rc = mf__registry_add(name, capacity, out);
    pthread_mutex_unlock(&mf__registry.lock);
    return rc;
}

void mf_lua_shared_destroy_all(void)
{
    pthread_mutex_lock(&mf__registry.lock);
    for (unsigned i = 0; i < mf__registry.n; i++)
        mf_shdict_destroy(mf__registry.dicts[i].dict);
    mf__registry.n = 0;
    pthread_mutex_unlock(&mf__registry.lock);
}

/* ---- arguments ----------------------------------------------------------- */

/* Raises "dict:METHOD(...): msg" at the caller's line. */
static int mf__raise(lua_State *L, const char *fmt, ...)
{
    luaL_where(L, 1);
    va_list ap;
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 2);
    return lua_error(L);
}

/* The dict object at 1: upvalue 2 is its metatable. */
static mf_shdict_t *mf__self(lua_State *L, const char *method)
{
    mf_shdict_t **d = lua_touserdata(L, 1);
    if (!d || !lua_getmetatable(L, 1) ||
        !lua_rawequal(L, -1, lua_upvalueindex(2)))
        mf__raise(L, "dict:%s: call it with a colon on a shared dict", method);
    lua_pop(L, 1);
    return *d;
}

/* The read buffer of this state (upvalue 1). */
static mf_shdict_buf_t *mf__buf(lua_State *L)
{
    return lua_touserdata(L, lua_upvalueindex(1));
}

/* The type of the argument at idx, a missing one "nil": the answer must
 * not depend on whether a wrapper passed its nil on. */
static const char *mf__typename(lua_State *L, int idx)
{
    return lua_isnone(L, idx) ? "nil" : luaL_typename(L, idx);
}

/* The key at 2: a string or a number (as its string), 1 to 65535 bytes. */
static const char *mf__key(lua_State *L, const char *method, size_t *len)
{
    int t = lua_type(L, 2);
    if (t != LUA_TSTRING && t != LUA_TNUMBER)
        mf__raise(L, "dict:%s(key): a string key expected, got %s", method,
                  mf__typename(L, 2));
    const char *k = lua_tolstring(L, 2, len);
    if (*len == 0)
        mf__raise(L, "dict:%s(key): empty key", method);
    if (*len > MF_SHDICT_MAX_KEY)
        mf__raise(L, "dict:%s(key): key longer than %d bytes", method,
                  MF_SHDICT_MAX_KEY);
    return k;
}

/* The value at idx (nil, boolean, number or string). */
static mf_shdict_value_t mf__value(lua_State *L, int idx, const char *method)
{
    mf_shdict_value_t v = {.type = MF_SHDICT_NIL};
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
    case LUA_TNONE:
        break;
    case LUA_TBOOLEAN:
        v.type = MF_SHDICT_BOOLEAN;
        v.boolean = lua_toboolean(L, idx);
        break;
    case LUA_TNUMBER:
        v.type = MF_SHDICT_NUMBER;
        v.number = lua_tonumber(L, idx);
        break;
    case LUA_TSTRING:
        v.type = MF_SHDICT_STRING;
        v.str = lua_tolstring(L, idx, &v.len);
        break;
    default:
        mf__raise(L,
                  "dict:%s(key, value): a string, number, boolean or nil "
                  "value expected, got %s",
                  method, mf__typename(L, idx));
    }
    return v;
}

/* Seconds at idx (nil: 0) as ms, rounded up so 0.0001 s still expires. */
static uint64_t mf__seconds(lua_State *L, int idx, const char *method,
                            const char *arg)
{
    if (lua_isnoneornil(L, idx))
        return 0;
    double s = lua_type(L, idx) == LUA_TNUMBER ? lua_tonumber(L, idx) : -1;
    if (!(s >= 0 && s < 1e12)) /* NaN fails too */
        mf__raise(L, "dict:%s: %s: a number of seconds >= 0 expected", method,
                  arg);
    return (uint64_t)ceil(s * 1000);
}

static uint32_t mf__flags(lua_State *L, int idx, const char *method)
{
    if (lua_isnoneornil(L, idx))
        return 0;
    double f = lua_type(L, idx) == LUA_TNUMBER ? lua_tonumber(L, idx) : -1;
    if (!(f >= 0 && f <= UINT32_MAX && f == floor(f)))
        mf__raise(L,
                  "dict:%s: flags: an integer from 0 to 4294967295 "
                  "expected",
                  method);
    return (uint32_t)f;
}

/* A number, or a string that is one (as OpenResty's incr takes them). */
static double mf__number(lua_State *L, int idx, const char *method,
                         const char *arg)
{
    if (!lua_isnumber(L, idx))
        mf__raise(L, "dict:%s: %s: a number expected, got %s", method, arg,
                  mf__typename(L, idx));
    return lua_tonumber(L, idx);
}

/* ---- results ------------------------------------------------------------- */

static void mf__push_value(lua_State *L, const mf_shdict_value_t *v)
{
    if (v->type == MF_SHDICT_NUMBER)
        lua_pushnumber(L, v->number);
    else if (v->type == MF_SHDICT_BOOLEAN)
        lua_pushboolean(L, v->boolean);
    else if (v->type == MF_SHDICT_STRING)
        lua_pushlstring(L, v->str, v->len);
    else
        lua_pushnil(L);
}

/* nil, the dict's words. */
static int mf__fail(lua_State *L, int rc)
{
    lua_pushnil(L);
    lua_pushstring(L, mf_shdict_strerror(rc));
    return 2;
}

/* ---- methods ------------------------------------------------------------- */

/* get and get_stale: value [, flags] (flags only when not 0, as
 * OpenResty), and for get_stale flags-or-nil and stale. */
static int mf__get_any(lua_State *L, const char *method, bool stale_ok)
{
    mf_shdict_t *d = mf__self(L, method);
    size_t klen;
    const char *k = mf__key(L, method, &klen);
    mf_shdict_value_t v;
    uint32_t flags = 0;
    bool stale = false;
    int rc =
        mf_shdict_get(d, k, klen, stale_ok, &v, &flags, &stale, mf__buf(L));
    if (rc == MF_SHDICT_NOT_FOUND) {
        lua_pushnil(L);
        return 1;
    }
    if (rc < 0)
        return mf__fail(L, rc);
    mf__push_value(L, &v);
    if (flags)
        lua_pushinteger(L, (lua_Integer)flags);
    else if (stale_ok)
        lua_pushnil(L);
    else
        return 1;
    if (!stale_ok)
        return 2;
    lua_pushboolean(L, stale);
    return 3;
}

static int mf__get(lua_State *L)
{
    return mf__get_any(L, "get", false);
}

static int mf__get_stale(lua_State *L)
{
    return mf__get_any(L, "get_stale", true);
}

/* set, add, replace and their safe forms: ok, err, forcible. */
static int mf__store_any(lua_State *L, const char *method, unsigned mode)
{
    mf_shdict_t *d = mf__self(L, method);
    size_t klen;
    const char *k = mf__key(L, method, &klen);
    mf_shdict_value_t v = mf__value(L, 3, method);
    uint64_t ttl = mf__seconds(L, 4, method, "exptime");
    uint32_t flags = mf__flags(L, 5, method);
    bool forcible = false;
    int rc = mf_shdict_store(d, k, klen, &v, ttl, flags, mode, &forcible);
    lua_pushboolean(L, rc == 0);
    if (rc == 0)
        lua_pushnil(L);
    else
        lua_pushstring(L, mf_shdict_strerror(rc));
    lua_pushboolean(L, forcible);
    return 3;
}

static int mf__set(lua_State *L)
{
    return mf__store_any(L, "set", MF_SHDICT_STORE_SET);
}

static int mf__safe_set(lua_State *L)
{
    return mf__store_any(L, "safe_set", MF_SHDICT_STORE_NO_EVICT);
}

static int mf__add(lua_State *L)
{
    return mf__store_any(L, "add", MF_SHDICT_STORE_ADD);
}

static int mf__safe_add(lua_State *L)
{
    return mf__store_any(L, "safe_add",
                         MF_SHDICT_STORE_ADD | MF_SHDICT_STORE_NO_EVICT);
}

static int mf__replace(lua_State *L)
{
    return mf__store_any(L, "replace", MF_SHDICT_STORE_REPLACE);
}

static int mf__delete(lua_State *L)
{
    mf_shdict_t *d = mf__self(L, "delete");
    size_t klen;
    const char *k = mf__key(L, "delete", &klen);
    mf_shdict_value_t nil = {.type = MF_SHDICT_NIL};
    bool forcible;
    mf_shdict_store(d, k, klen, &nil, 0, 0, MF_SHDICT_STORE_SET, &forcible);
    lua_pushboolean(L, 1);
    return 1;
}

/* incr(key, value [, init [, init_ttl]]): newval; with init: newval, nil,
 * forcible. */
static int mf__incr(lua_State *L)
{
    mf_shdict_t *d = mf__self(L, "incr");
    size_t klen;
    const char *k = mf__key(L, "incr", &klen);
    double by = mf__number(L, 3, "incr", "value");
    bool has_init = !lua_isnoneornil(L, 4);
    double init = has_init ? mf__number(L, 4, "incr", "init") : 0, out = 0;
    if (!has_init && !lua_isnoneornil(L, 5))
        mf__raise(L, "dict:incr: init_ttl needs init");
    uint64_t ttl = mf__seconds(L, 5, "incr", "init_ttl");
    bool forcible = false;
    int rc = mf_shdict_incr(d, k, klen, by, has_init ? &init : NULL, ttl, &out,
                            &forcible);
    if (rc < 0)
        return mf__fail(L, rc);
    lua_pushnumber(L, out);
    if (!has_init)
        return 1;
    lua_pushnil(L);
    lua_pushboolean(L, forcible);
    return 3;
}

static int mf__push_any(lua_State *L, const char *method, bool left)
{
    mf_shdict_t *d = mf__self(L, method);
    size_t klen, len = 0;
    const char *k = mf__key(L, method, &klen);
    int t = lua_type(L, 3);
    if (t != LUA_TSTRING && t != LUA_TNUMBER)
        mf__raise(L,
                  "dict:%s(key, value): a string or number value "
                  "expected, got %s",
                  method, mf__typename(L, 3));
    mf_shdict_value_t v = mf__value(L, 3, method);
    int rc = mf_shdict_push(d, k, klen, left, &v, &len);
    if (rc < 0)
        return mf__fail(L, rc);
    lua_pushinteger(L, (lua_Integer)len);
    return 1;
}

static int mf__lpush(lua_State *L)
{
    return mf__push_any(L, "lpush", true);
}

static int mf__rpush(lua_State *L)
{
    return mf__push_any(L, "rpush", false);
}

static int mf__pop_any(lua_State *L, const char *method, bool left)
{
    mf_shdict_t *d = mf__self(L, method);
    size_t klen;
    const char *k = mf__key(L, method, &klen);
    mf_shdict_value_t v;
    int rc = mf_shdict_pop(d, k, klen, left, &v, mf__buf(L));
    if (rc == MF_SHDICT_NOT_FOUND) {
        lua_pushnil(L);
        return 1;
    }
    if (rc < 0)
        return mf__fail(L, rc);
    mf__push_value(L, &v);
    return 1;
}

static int mf__lpop(lua_State *L)
{
    return mf__pop_any(L, "lpop", true);
}

static int mf__rpop(lua_State *L)
{
    return mf__pop_any(L, "rpop", false);
}

static int mf__llen(lua_State *L)
{
    mf_shdict_t *d = mf__self(L, "llen");
    size_t klen, len = 0;
    const char *k = mf__key(L, "llen", &klen);
    int rc = mf_shdict_llen(d, k, klen, &len);
    if (rc < 0)
        return mf__fail(L, rc);
    lua_pushinteger(L, (lua_Integer)len);
    return 1;
}

/* ttl(key): seconds left (0: never expires) or nil, "not found". */
static int mf__ttl(lua_State *L)
{
    mf_shdict_t *d = mf__self(L, "ttl");
    size_t klen;
    const char *k = mf__key(L, "ttl", &klen);
    uint64_t ms = 0;
    int rc = mf_shdict_ttl(d, k, klen, &ms);
    if (rc < 0)
        return mf__fail(L, rc);
    lua_pushnumber(L, (double)ms / 1000);
    return 1;
}

static int mf__expire(lua_State *L)
{
    mf_shdict_t *d = mf__self(L, "expire");
    size_t klen;
    const char *k = mf__key(L, "expire", &klen);
    if (lua_isnoneornil(L, 3))
        mf__raise(L, "dict:expire(key, exptime): exptime expected");
    int rc =
        mf_shdict_expire(d, k, klen, mf__seconds(L, 3, "expire", "exptime"));
    if (rc < 0)
        return mf__fail(L, rc);
    lua_pushboolean(L, 1);
    return 1;
}

static int mf__flush_all(lua_State *L)
{
    mf_shdict_flush_all(mf__self(L, "flush_all"));
    return 0;
}

/* A count at idx: nil gives dflt; 0 means all. */
static size_t mf__count(lua_State *L, int idx, const char *method, size_t dflt)
{
    if (lua_isnoneornil(L, idx))
        return dflt;
    double n = lua_type(L, idx) == LUA_TNUMBER ? lua_tonumber(L, idx) : -1;
    if (!(n >= 0 && n == floor(n) && n < 1e15))
        mf__raise(L, "dict:%s(max_count): an integer >= 0 expected", method);
    return (size_t)n;
}

static int mf__flush_expired(lua_State *L)
{
    mf_shdict_t *d = mf__self(L, "flush_expired");
    size_t max = mf__count(L, 2, "flush_expired", 0);
    lua_pushinteger(L, (lua_Integer)mf_shdict_flush_expired(d, max));
    return 1;
}

/* get_keys([max_count]): a list of at most max_count (default 1024; 0:
 * all) live keys. */
static int mf__get_keys(lua_State *L)
{
    mf_shdict_t *d = mf__self(L, "get_keys");
    size_t max = mf__count(L, 2, "get_keys", MF_LUA_SHARED_KEYS_DEFAULT), n;
    mf_shdict_buf_t *buf = mf__buf(L);
    int rc = mf_shdict_keys(d, max, buf, &n);
    if (rc < 0)
        return mf__fail(L, rc);
    lua_createtable(L, (int)n, 0);
    const char *p = buf->data;
    for (size_t i = 1; i <= n; i++) {
        uint16_t len;
        memcpy(&len, p, 2);
        lua_pushlstring(L, p + 2, len);
        lua_rawseti(L, -2, (int)i);
        p += 2 + (size_t)len;
    }
    return 1;
}

static int mf__capacity(lua_State *L)
{
    lua_pushnumber(L, (double)mf_shdict_capacity(mf__self(L, "capacity")));
    return 1;
}

static int mf__free_space(lua_State *L)
{
    lua_pushnumber(L, (double)mf_shdict_free_space(mf__self(L, "free_space")));
    return 1;
}

/* leaky(d, key, rate, burst, mode [, now_ms [, prefix]]) -> excess, or
 * nil, "rejected" (moonflow.limit's leaky bucket; mode 0 check, 1 commit,
 * 2 uncommit: mf_shdict_leaky_mode_t). prefix .. key is the dict's key,
 * joined here (a route's limit: no Lua string made per request). */
static int mf__leaky(lua_State *L)
{
    static const char method[] = "leaky";
    mf_shdict_t *d = mf__self(L, method);
    size_t klen, plen = 0;
    const char *prefix =
        lua_isnoneornil(L, 7) ? NULL : lua_tolstring(L, 7, &plen);
    /* after a prefix the key may be empty (a route's "global" key) */
    const char *k = prefix && lua_type(L, 2) == LUA_TSTRING
                        ? lua_tolstring(L, 2, &klen)
                        : mf__key(L, method, &klen);
    char joined[512];
    if (prefix && plen + klen <= sizeof joined) {
        memcpy(joined, prefix, plen);
        memcpy(joined + plen, k, klen);
        k = joined;
        klen += plen;
    } else if (prefix) {
        lua_pushvalue(L, 7);
        lua_pushlstring(L, k, klen);
        lua_concat(L, 2); /* a long one: Lua's buffer */
        k = lua_tolstring(L, -1, &klen);
    }
    mf_shdict_leaky_t in = {
        .rate = mf__number(L, 3, method, "rate"),
        .burst = mf__number(L, 4, method, "burst"),
        .mode = (mf_shdict_leaky_mode_t)luaL_checkinteger(L, 5),
        .now_ms = lua_isnoneornil(L, 6) ? -1 : mf__number(L, 6, method, "now"),
    };
    if ((unsigned)in.mode > MF_SHDICT_LEAKY_UNCOMMIT)
        mf__raise(L, "dict:leaky: mode: 0, 1 or 2 expected");
    double excess = 0;
    int rc = mf_shdict_leaky(d, k, klen, &in, &excess);
    if (rc < 0)
        return mf__fail(L, rc);
    lua_pushnumber(L, excess);
    return 1;
}

static const luaL_Reg mf__methods[] = {
    {"get d:get(key)", mf__get},
    {"get_stale d:get_stale(key)", mf__get_stale},
    {"set d:set(key, value [, exptime [, flags]])", mf__set},
    {"safe_set d:safe_set(key, value [, exptime [, flags]])", mf__safe_set},
    {"add d:add(key, value [, exptime [, flags]])", mf__add},
    {"safe_add d:safe_add(key, value [, exptime [, flags]])", mf__safe_add},
    {"replace d:replace(key, value [, exptime [, flags]])", mf__replace},
    {"delete d:delete(key)", mf__delete},
    {"incr d:incr(key, n [, init [, init_ttl]])", mf__incr},
    {"lpush d:lpush(key, v)", mf__lpush},
    {"rpush d:rpush(key, v)", mf__rpush},
    {"lpop d:lpop(key)", mf__lpop},
    {"rpop d:rpop(key)", mf__rpop},
    {"llen d:llen(key)", mf__llen},
    {"ttl d:ttl(key)", mf__ttl},
    {"expire d:expire(key, exptime)", mf__expire},
    {"flush_all d:flush_all()", mf__flush_all},
    {"flush_expired d:flush_expired([max])", mf__flush_expired},
    {"get_keys d:get_keys([max])", mf__get_keys},
    {"capacity d:capacity()", mf__capacity},
    {"free_space d:free_space()", mf__free_space},
    {NULL, NULL}};

/* ---- the module ---------------------------------------------------------- */

/* Pushes this state's object for d (upvalue 1: the cache by name, 2: the
 * metatable). */
static void mf__push_dict(lua_State *L, const char *name, mf_shdict_t *d)
{
    lua_getfield(L, lua_upvalueindex(1), name);
    if (!lua_isnil(L, -1))
        return;
    lua_pop(L, 1);
    mf_shdict_t **ud = lua_newuserdata(L, sizeof(*ud));
    *ud = d;
    lua_pushvalue(L, lua_upvalueindex(2));
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, lua_upvalueindex(1), name);
}

/* shared.get(name): the dict or nil. */
static int mf__shared_get(lua_State *L)
{
    const char *name =
        lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
    mf_shdict_t *d = name ? mf_lua_shared_find(name) : NULL;
    if (!d) {
        lua_pushnil(L);
        return 1;
    }
    mf__push_dict(L, name, d);
    return 1;
}

/* shared.create(name, bytes): the dict of that name, made if need be. */
static int mf__shared_create(lua_State *L)
{
    const char *name = mf_lua_check_string(L, 1);
    double bytes = mf_lua_check_number(L, 2);
    if (mf_lua_shared_check_name(name) < 0)
        return luaL_error(L,
                          "mf.shared_dict(name, bytes): name: an "
                          "identifier of up to %d bytes expected, got '%s'",
                          MF_LUA_SHARED_MAX_NAME, name);
    if (!(bytes >= MF_SHDICT_MIN_CAPACITY &&
          bytes <= (double)MF_SHDICT_MAX_CAPACITY && bytes == floor(bytes)))
        return luaL_error(L,
                          "mf.shared_dict(name, bytes): bytes: an integer "
                          "from %d to %.0f expected",
                          MF_SHDICT_MIN_CAPACITY,
                          (double)MF_SHDICT_MAX_CAPACITY);
    mf_shdict_t *d;
    int rc = mf_lua_shared_create(name, (size_t)bytes, &d);
    if (rc < 0)
        return luaL_error(L, "mf.shared_dict(%s): %s", name,
                          rc == MF_ENOSPC ? "too many shared dicts"
                                          : mf_strerror(rc));
    mf__push_dict(L, name, d);
    return 1;
}

static int mf__buf_gc(lua_State *L)
{
    mf_shdict_buf_free(lua_touserdata(L, 1));
    return 0;
}

/* The buffer (upvalue 1 of the methods) and the metatable (2). */
static void mf__push_buffer(lua_State *L)
{
    mf_shdict_buf_t *buf = lua_newuserdata(L, sizeof(*buf));
    memset(buf, 0, sizeof(*buf));
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, mf__buf_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
}

static int mf__dict_tostring(lua_State *L)
{
    lua_pushfstring(L, "shared dict: %p", lua_touserdata(L, 1));
    return 1;
}

/* The metatable: __index holds the methods, each with the buffer and the
 * metatable as upvalues. */
static void mf__push_metatable(lua_State *L)
{
    luaL_newmetatable(L, MF_LUA_SHDICT);
    int mt = lua_gettop(L);
    mf__push_buffer(L);
    int buf = lua_gettop(L);
    lua_createtable(L, 0, (int)MF_ARRAY_SIZE(mf__methods));
    lua_pushvalue(L, buf);
    lua_pushvalue(L, mt);
    mf_lua_register_up(L, mf__methods, 2);
    lua_pushvalue(L, -1);
    lua_setfield(L, mt, "__index");
    lua_setfield(L, mt, "methods"); /* for moonflow.shared_ffi */
    /* leaky: for moonflow.limit, kept out of the dict's methods (those are
     * OpenResty's) */
    lua_pushvalue(L, buf);
    lua_pushvalue(L, mt);
    lua_pushcclosure(L, mf__leaky, 2);
    mf_lua_name(L, "dict:leaky(key, rate, burst, mode [, now])");
    lua_setfield(L, mt, "leaky");
    lua_pushcfunction(L, mf__dict_tostring);
    lua_setfield(L, mt, "__tostring");
    lua_pushliteral(L, "shared dict");
    lua_setfield(L, mt, "__metatable");
    lua_settop(L, mt);
}

int mf_lua_open_shared(lua_State *L)
{
    lua_createtable(L, 0, 3);
    lua_newtable(L); /* the cache of dict objects by name */
    mf__push_metatable(L);
    lua_getfield(L, -1, "methods");
    lua_setfield(L, -4, "methods");
    lua_pushvalue(L, -2);
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, mf__shared_get, 2);
    lua_setfield(L, -4, "get");
    lua_getfield(L, -1, "leaky");
    lua_setfield(L, -4, "leaky");
    lua_pushcclosure(L, mf__shared_create, 2);
    mf_lua_name(L, "mf.shared_dict(name, bytes)");
    lua_setfield(L, -2, "create");
    return 1;
}
