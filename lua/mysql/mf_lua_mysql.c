/*
 * lua/mysql/mf_lua_mysql.c — moonflow.mysql, the C side of mf.mysql: client
 * objects and their options, db:query (a MySQL task started straight from
 * C: the coroutine parks on it and its callback resumes it with the result
 * table), db:quote, and the conversions the other MySQL files share:
 * parameters from Lua values, values and results to Lua, failures to
 * words. db:rows is mf_lua_mysql_rows.c; db:transaction and db:session are
 * mf_lua_mysql_pin.c; caching per URL and options is init.lua's.
 *
 * Owns: a call record (loop memory) per db:query, freed in the task's
 * callback. Its co is cleared by the coroutine's cleanup hook (abort,
 * shutdown) before the task is canceled, so a late completion touches no
 * Lua.
 *
 * Values to Lua: NULL → mf.null (a NULL light userdata); integers within
 * ±2^53 → numbers, beyond → decimal strings (a double would round them);
 * FLOAT/DOUBLE → numbers; everything else (DECIMAL, dates, JSON, BIT,
 * strings, BLOBs) → strings as the server sent them, binary-safe.
 * Parameters from Lua: nil and mf.null → NULL, booleans → 1/0, integral
 * numbers within ±2^63 → integers, other numbers → doubles, strings →
 * text; anything else raises.
 *
 * May call: moonflow/mysql.h and the engine's public headers, the host's
 * coroutine API, and the other MySQL binding files through
 * mf_lua_mysql.h.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include <moonflow/lua_arg.h>
#include <moonflow/url.h>
#include <moonflow/common.h>

#include "host/mf_lua_int.h"
#include "mf_lua_mysql.h"

/* ---- targets and modes ------------------------------------------------- */

unsigned mf_lua_mysql_check_mode(lua_State *L, int idx, const char *what)
{
    const char *s = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : "";
    if (strcmp(s, "name") == 0)
        return MF_LUA_MYSQL_BY_NAME;
    if (strcmp(s, "array") == 0)
        return MF_LUA_MYSQL_BY_INDEX;
    if (strcmp(s, "both") == 0)
        return MF_LUA_MYSQL_BY_NAME | MF_LUA_MYSQL_BY_INDEX;
    return (unsigned)luaL_error(L,
                                "%s: rows must be \"name\", \"array\" or "
                                "\"both\"",
                                what);
}

/* ---- parameters -------------------------------------------------------- */

/* 2^63: integral numbers in [-2^63, 2^63) fit an int64_t exactly. */
#define MF_LUA_MYSQL_TWO63 9223372036854775808.0

static void mf_lua__param(lua_State *L, int idx, mf_mysql_param_t *p,
                          size_t nth)
{
    memset(p, 0, sizeof *p);
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
        p->type = MF_MYSQL_NULL;
        return;
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == NULL) { /* mf.null */
            p->type = MF_MYSQL_NULL;
            return;
        }
        break;
    case LUA_TBOOLEAN:
        *p = MF_MYSQL_INT(lua_toboolean(L, idx) ? 1 : 0);
        return;
    case LUA_TNUMBER: {
        lua_Number v = lua_tonumber(L, idx);
        if (v == floor(v) && v >= -MF_LUA_MYSQL_TWO63 &&
            v < MF_LUA_MYSQL_TWO63) {
            *p = MF_MYSQL_INT((int64_t)v);
        } else {
            p->type = MF_MYSQL_DOUBLE;
            p->d = v;
        }
        return;
    }
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        *p = MF_MYSQL_TEXTN(s, len);
        return;
    }
    default:
        break;
    }
    luaL_error(L,
               "mysql: parameter %d is a %s (nil, mf.null, a boolean, a "
               "number or a string expected)",
               (int)nth, luaL_typename(L, idx));
}

static void mf_lua__params_open(lua_State *L, mf_lua_mysql_params_t *p,
                                size_t n)
{
    p->n = n;
    p->v = p->inline_v;
    if (n <= MF_LUA_MYSQL_INLINE_PARAMS)
        return;
    /* Anchored in a userdata: a raise below frees it with the GC. */
    p->v = lua_newuserdata(L, n * sizeof *p->v);
}

void mf_lua_mysql_params_from_stack(lua_State *L, mf_lua_mysql_params_t *p,
                                    int first, int last)
{
    size_t n = last >= first ? (size_t)(last - first + 1) : 0;
    mf_lua__params_open(L, p, n);
    for (size_t i = 0; i < n; i++)
        mf_lua__param(L, first + (int)i, &p->v[i], i + 1);
}

void mf_lua_mysql_params_from_table(lua_State *L, mf_lua_mysql_params_t *p,
                                    int idx, size_t n)
{
    mf_lua__params_open(L, p, n);
    luaL_checkstack(L, (int)(n > 64 ? 64 : n) + 2, "mysql parameters");
    for (size_t i = 0; i < n; i++) {
        /* The table keeps each string alive while the task copies it. */
        lua_rawgeti(L, idx, (int)i + 1);
        mf_lua__param(L, lua_gettop(L), &p->v[i], i + 1);
        lua_pop(L, 1);
    }
}

void mf_lua_mysql_params_close(lua_State *L, mf_lua_mysql_params_t *p)
{
    if (p->v != p->inline_v)
        lua_pop(L, 1); /* the userdata holding the vector */
    p->v = NULL;
    p->n = 0;
}

mf_task_t *mf_lua_mysql_task(lua_State *L, const mf_lua_mysql_target_t *t,
                             int sql, const mf_lua_mysql_params_t *p,
                             mf_task_cb cb, void *user)
{
    size_t len;
    const char *q = lua_tolstring(L, sql, &len);
    if (len == 0)
        luaL_error(L, "mysql: empty SQL");
    mf_task_t *task = mf_task_mysql_create(t->client, cb, user);
    int err = mf_task_mysql_set_query(task, q, len);
    if (err == 0 && p->n > 0)
        err = mf_task_mysql_bind(task, p->n, p->v);
    if (err < 0) {
        mf_task_destroy(task);
        luaL_error(L, "mysql: %s", mf_strerror(err));
    }
    if (t->pin) {
        mf_lua_mysql_pin_before_task(t->pin);
        mf_task_mysql_set_session(task, mf_lua_mysql_pin_session(t->pin));
    }
    return task;
}

/* ---- values and results ------------------------------------------------ */

/* 2^53: integers up to it in magnitude are exact as doubles. */
#define MF_LUA_MYSQL_EXACT (INT64_C(1) << 53)

void mf_lua_mysql_push_value(lua_State *L, const mf_mysql_value_t *v)
{
    char buf[24];
    switch (v->type) {
    case MF_MYSQL_NULL:
        lua_pushlightuserdata(L, NULL);
        return;
    case MF_MYSQL_INT:
        if (v->i >= -MF_LUA_MYSQL_EXACT && v->i <= MF_LUA_MYSQL_EXACT) {
            lua_pushnumber(L, (lua_Number)v->i);
            return;
        }
        lua_pushlstring(
            L, buf, (size_t)snprintf(buf, sizeof buf, "%lld", (long long)v->i));
        return;
    case MF_MYSQL_UINT:
        if (v->u <= (uint64_t)MF_LUA_MYSQL_EXACT) {
            lua_pushnumber(L, (lua_Number)v->u);
            return;
        }
        lua_pushlstring(L, buf,
                        (size_t)snprintf(buf, sizeof buf, "%llu",
                                         (unsigned long long)v->u));
        return;
    case MF_MYSQL_DOUBLE:
        lua_pushnumber(L, v->d);
        return;
    case MF_MYSQL_TEXT:
    case MF_MYSQL_BLOB:
        lua_pushlstring(L, v->s ? v->s : "", v->len);
        return;
    }
    lua_pushlightuserdata(L, NULL);
}

void mf_lua_mysql_push_names(lua_State *L, const mf_mysql_result_t *r)
{
    lua_createtable(L, (int)r->nfields, 0);
    for (unsigned c = 0; c < r->nfields; c++) {
        lua_pushlstring(L, r->fields[c].name, r->fields[c].name_len);
        lua_rawseti(L, -2, (int)c + 1);
    }
}

void mf_lua_mysql_push_row(lua_State *L, const mf_mysql_result_t *r, size_t i,
                           unsigned mode, int names)
{
    const mf_mysql_value_t *row = r->rows[i];
    int n = (int)r->nfields;
    lua_createtable(L, mode & MF_LUA_MYSQL_BY_INDEX ? n : 0,
                    mode & MF_LUA_MYSQL_BY_NAME ? n : 0);
    for (int c = 0; c < n; c++) {
        mf_lua_mysql_push_value(L, &row[c]);
        if (mode & MF_LUA_MYSQL_BY_NAME) {
            if (names)
                lua_rawgeti(L, names, c + 1);
            else
                lua_pushlstring(L, r->fields[c].name, r->fields[c].name_len);
            lua_pushvalue(L, -2);
            lua_rawset(L, -4);
        }
        if (mode & MF_LUA_MYSQL_BY_INDEX)
            lua_rawseti(L, -2, c + 1);
        else
            lua_pop(L, 1);
    }
}

static void mf_lua__push_fields(lua_State *L, const mf_mysql_result_t *r)
{
    lua_createtable(L, (int)r->nfields, 0);
    for (unsigned c = 0; c < r->nfields; c++) {
        const mf_mysql_field_t *f = &r->fields[c];
        lua_createtable(L, 0, 3);
        lua_pushlstring(L, f->name, f->name_len);
        lua_setfield(L, -2, "name");
        lua_pushnumber(L, f->type);
        lua_setfield(L, -2, "type");
        lua_pushstring(L, f->table ? f->table : "");
        lua_setfield(L, -2, "table");
        lua_rawseti(L, -2, (int)c + 1);
    }
}

static void mf_lua__set_number(lua_State *L, int t, const char *k, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, t, k);
}

/* One result set into the table at t (absolute); r NULL: an empty one. */
static void mf_lua__fill_set(lua_State *L, int t, const mf_mysql_result_t *r,
                             unsigned mode)
{
    static const mf_mysql_result_t none = {0};
    if (!r)
        r = &none;
    luaL_checkstack(L, 8, "mysql result");
    int names = 0; /* a table of the names pays off from the second row */
    if ((mode & MF_LUA_MYSQL_BY_NAME) && r->nfields && r->nrows > 1) {
        mf_lua_mysql_push_names(L, r);
        names = lua_gettop(L);
    }
    lua_createtable(L, (int)r->nrows, 0);
    for (size_t i = 0; i < r->nrows; i++) {
        mf_lua_mysql_push_row(L, r, i, mode, names);
        lua_pushvalue(L, -1);
        lua_rawseti(L, t, (int)i + 1);
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, t, "rows");
    mf_lua__push_fields(L, r);
    lua_setfield(L, t, "fields");
    mf_lua__set_number(L, t, "affected_rows", (double)r->affected_rows);
    mf_lua__set_number(L, t, "insert_id", (double)r->insert_id);
    mf_lua__set_number(L, t, "warnings", r->warnings);
    mf_lua__set_number(L, t, "server_status", r->server_status);
    if (names)
        lua_remove(L, names);
}

/* A table with the same content as the set at t (the same row tables). */
static void mf_lua__copy_set(lua_State *L, int t)
{
    static const char *const keys[] = {"rows",          "fields",
                                       "affected_rows", "insert_id",
                                       "warnings",      "server_status"};
    lua_getfield(L, t, "rows");
    int n = (int)lua_objlen(L, -1);
    lua_createtable(L, n, 6);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -2, i);
        lua_rawseti(L, -2, i);
    }
    lua_remove(L, -2);
    for (size_t k = 0; k < MF_ARRAY_SIZE(keys); k++) {
        lua_getfield(L, t, keys[k]);
        lua_setfield(L, -2, keys[k]);
    }
}

void mf_lua_mysql_fill(lua_State *L, int idx, const mf_task_t *task,
                       unsigned mode)
{
    int t = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
    size_t n = mf_task_mysql_nresults(task);
    mf_lua__fill_set(L, t, n ? mf_task_mysql_result(task, 0) : NULL, mode);
    if (n < 2)
        return;
    lua_createtable(L, (int)n, 0);
    mf_lua__copy_set(L, t);
    lua_rawseti(L, -2, 1);
    for (size_t i = 1; i < n; i++) {
        lua_createtable(L, (int)mf_task_mysql_result(task, i)->nrows, 6);
        mf_lua__fill_set(L, lua_gettop(L), mf_task_mysql_result(task, i), mode);
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, t, "sets");
}

/* ---- failures in words ------------------------------------------------- */

const char *mf_lua_mysql_explanation(const mf_task_t *task, char *buf,
                                     size_t len)
{
    const mf_mysql_error_t *e = mf_task_mysql_error(task);
    if (!e || e->code == 0)
        return NULL;
    snprintf(buf, len, "mysql %u %s: %s", e->code,
             e->sqlstate[0] ? e->sqlstate : "HY000",
             e->message ? e->message : "");
    return buf;
}

const char *mf_lua_mysql_error(const mf_task_t *task, char *buf, size_t len)
{
    int state = mf_task_state(task);
    if (state == MF_STATE_SUCCESS)
        return NULL;
    const char *pool = mf_task_mysql_pool_error(task);
    if (pool) { /* the pool's: no connection, no query ran */
        snprintf(buf, len, "%s: %s", mf_state_name(state), pool);
        return buf;
    }
    /* A timeout is ours: whatever the connector said after the KILL, the
     * caller needs to know it was the time. */
    if (state != MF_STATE_TIMEOUT && mf_lua_mysql_explanation(task, buf, len))
        return buf;
    snprintf(buf, len, "%s: %s", mf_state_name(state),
             mf_strerror(mf_task_error(task)));
    return buf;
}

/* ---- db:query ----------------------------------------------------------- */

typedef struct mf_lua_mysql_call {
    mf_lua_co_t *co; /* NULL once detached */
    mf_task_t *task; /* until its callback */
    mf_lua_mysql_pin_t *pin;
    unsigned mode;
} mf_lua_mysql_call_t;

/* Cleanup hook of the parked coroutine (abort, shutdown): the task forgets
 * it and is canceled; its callback still runs and frees the record. */
static void mf_lua__call_detach(void *arg)
{
    mf_lua_mysql_call_t *call = arg;
    mf_lua_co_host(call->co)->counts.tasks--;
    call->co = NULL;
    mf_task_cancel(call->task);
}

/* Pushes res, or nil, err; returns how many. */
static int mf_lua__push_outcome(lua_State *L, const mf_task_t *task,
                                unsigned mode, mf_lua_mysql_pin_t *pin)
{
    char buf[MF_LUA_MYSQL_ERR_MAX];
    const char *err = mf_lua_mysql_error(task, buf, sizeof buf);
    if (err) {
        if (pin)
            mf_lua_mysql_pin_failed(pin, err);
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    size_t n = mf_task_mysql_nresults(task);
    lua_createtable(L, n ? (int)mf_task_mysql_result(task, 0)->nrows : 0, 8);
    mf_lua_mysql_fill(L, -1, task, mode);
    return 1;
}

static void mf_lua__call_done(mf_task_t *task)
{
    mf_lua_mysql_call_t *call = task->user;
    mf_lua_co_t *co = call->co;
    int n = 0;
    if (co) {
        mf_lua_co_host(co)->counts.tasks--;
        mf_lua_co_unpark(co);
        n = mf_lua__push_outcome(mf_lua_co_thread(co), task, call->mode,
                                 call->pin);
    }
    if (call->pin)
        mf_lua_mysql_pin_release(call->pin);
    mf_loop_free(mf_task_loop(task), call, sizeof *call);
    if (co)
        mf_lua_co_resume(co, n);
}

/* db:query(sql, ...) / tx:query(sql, ...) -> res | nil, err */
static int mf_lua__query(lua_State *L)
{
    mf_lua_mysql_target_t t = mf_lua_mysql_target(L, 1);
    mf_lua_check_type(L, 2, LUA_TSTRING);
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_lua_mysql_params_t p;
    mf_lua_mysql_params_from_stack(L, &p, 3, lua_gettop(L));
    mf_task_t *task = mf_lua_mysql_task(L, &t, 2, &p, mf_lua__call_done, NULL);
    mf_lua_mysql_params_close(L, &p);
    mf_loop_t *loop = mf_task_loop(task);
    mf_lua_mysql_call_t *call = mf_loop_alloc(loop, sizeof *call);
    call->co = co;
    call->task = task;
    call->pin = t.pin;
    call->mode = t.mode;
    if (t.pin)
        mf_lua_mysql_pin_hold(t.pin);
    task->user = call;
    mf_lua_co_host(co)->counts.tasks++;
    mf_task_start(task);
    mf_lua_co_park(co, mf_lua__call_detach, call);
    return lua_yield(L, 0);
}

/* ---- db:quote ------------------------------------------------------------ */

static int mf_lua__quote(lua_State *L)
{
    mf_lua_mysql_target_t t = mf_lua_mysql_target(L, 1);
    size_t len;
    const char *s = mf_lua_check_lstring(L, 2, &len);
    char small[512];
    char *out = small;
    if (len > (sizeof small - 3) / 2) {
        if (len > ((size_t)-1 - 3) / 2)
            return luaL_error(L, "mysql quote: string too long");
        out = lua_newuserdata(L, 2 * len + 3); /* collected after */
    }
    size_t n = mf_mysql_quote(t.client, out, s, len);
    lua_pushlstring(L, out, n);
    return 1;
}

/* ---- clients ------------------------------------------------------------ */

static mf_lua_mysql_t *mf_lua__check_db(lua_State *L, int idx)
{
    return mf_lua_check_udata(L, idx, MF_LUA_MYSQL);
}

mf_lua_mysql_target_t mf_lua_mysql_target(lua_State *L, int idx)
{
    mf_lua_mysql_target_t t = {NULL, NULL, 0};
    mf_lua_mysql_t *db = luaL_testudata(L, idx, MF_LUA_MYSQL);
    if (db) {
        t.client = db->client;
        t.mode = db->mode;
        return t;
    }
    mf_lua_mysql_pinned_t *p = luaL_testudata(L, idx, MF_LUA_MYSQL_PINNED);
    if (!p)
        mf_lua_arg_error(L, idx,
                         lua_pushfstring(L,
                                         "a database object from mf.mysql "
                                         "(or the tx/s given to a "
                                         "transaction or session function) "
                                         "expected, got %s",
                                         luaL_typename(L, idx)));
    if (!p->pin)
        luaL_error(L, "mysql: this %s is over (its function returned)",
                   p->transaction ? "transaction" : "session");
    t.client = p->client;
    t.pin = p->pin;
    t.mode = p->mode;
    return t;
}

/* The numeric options: where each goes in mf_mysql_opts_t. */
typedef struct mf_lua_mysql_opt {
    const char *name;
    size_t offset;
    size_t size; /* sizeof the field: 4 (unsigned, uint32_t) or 8 */
} mf_lua_mysql_opt_t;

#define MF_LUA_MYSQL_OPT(name, field)             \
    {                                             \
        name, offsetof(mf_mysql_opts_t, field),   \
            sizeof(((mf_mysql_opts_t *)0)->field) \
    }

_Static_assert(sizeof(unsigned) == sizeof(uint32_t),
               "the options' unsigned fields are written as uint32_t");

static const mf_lua_mysql_opt_t mf_lua__opts[] = {
    MF_LUA_MYSQL_OPT("pool", max_connections),
    MF_LUA_MYSQL_OPT("queue", max_waiters),
    MF_LUA_MYSQL_OPT("queue_timeout", wait_timeout_ms),
    MF_LUA_MYSQL_OPT("timeout", query_timeout_ms),
    MF_LUA_MYSQL_OPT("connect_timeout", connect_timeout_ms),
    MF_LUA_MYSQL_OPT("idle_timeout", idle_timeout_ms),
    MF_LUA_MYSQL_OPT("stmt_cache", stmt_cache),
    MF_LUA_MYSQL_OPT("max_result", max_result),
    MF_LUA_MYSQL_OPT("pipeline", pipeline),
};

/* One option (key at -2, value at -1) into opts, or db's rows mode. */
static void mf_lua__client_opt(lua_State *L, mf_mysql_opts_t *opts,
                               mf_lua_mysql_t *db)
{
    const char *name =
        lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "(not a string)";
    if (strcmp(name, "rows") == 0) {
        db->mode = mf_lua_mysql_check_mode(L, -1, "mf.mysql");
        return;
    }
    size_t i = 0;
    while (i < MF_ARRAY_SIZE(mf_lua__opts) &&
           strcmp(mf_lua__opts[i].name, name) != 0)
        i++;
    if (i == MF_ARRAY_SIZE(mf_lua__opts))
        luaL_error(L, "mf.mysql: unknown option %s", name);
    const mf_lua_mysql_opt_t *o = &mf_lua__opts[i];
    lua_Number v = lua_tonumber(L, -1);
    lua_Number max = o->size == 8 ? 9007199254740992.0 : 4294967295.0;
    if (lua_type(L, -1) != LUA_TNUMBER || v < 0 || v > max || v != floor(v))
        luaL_error(L, "mf.mysql: option %s must be a whole number >= 0%s", name,
                   o->size == 8 ? "" : " (at most 2^32 - 1)");
    char *field = (char *)opts + o->offset;
    if (o->size == 8) {
        uint64_t u = (uint64_t)v;
        memcpy(field, &u, sizeof u);
    } else {
        uint32_t u = (uint32_t)v;
        memcpy(field, &u, sizeof u);
    }
}

/* Pushes url with its password masked: error messages end up in logs. */
static const char *mf_lua__push_masked(lua_State *L, const char *url)
{
    const char *auth = strstr(url, "://");
    const char *at = auth ? strchr(auth + 3, '@') : NULL;
    const char *colon =
        at ? memchr(auth + 3, ':', (size_t)(at - (auth + 3))) : NULL;
    if (!colon)
        return url;
    lua_pushlstring(L, url, (size_t)(colon + 1 - url));
    lua_pushliteral(L, "***");
    lua_pushstring(L, at);
    lua_concat(L, 3);
    return lua_tostring(L, -1);
}

/* client(url [, opts]) -> a new client object; raises on a malformed URL
 * or options (mf.mysql caches the objects per URL and options). */
static int mf_lua__client(lua_State *L)
{
    const char *url = mf_lua_check_string(L, 1);
    lua_settop(L, 2);
    mf_lua_mysql_t *db = lua_newuserdata(L, sizeof(*db));
    db->client = NULL;
    db->mode = MF_LUA_MYSQL_BY_NAME;
    mf_mysql_opts_t opts;
    mf_mysql_opts_init(&opts);
    if (!lua_isnil(L, 2)) {
        mf_lua_check_type(L, 2, LUA_TTABLE);
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            mf_lua__client_opt(L, &opts, db);
            lua_pop(L, 1);
        }
    }
    if (opts.max_connections == 0)
        return luaL_error(L, "mf.mysql: option pool must be at least 1");
    if (opts.pipeline > MF_MYSQL_PIPELINE_MAX)
        return luaL_error(L, "mf.mysql: option pipeline must be at most %d",
                          MF_MYSQL_PIPELINE_MAX);
    int err = 0;
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    db->client = mf_mysql_client(mf_lua_host_loop(host), url, &opts, &err);
    if (!db->client && err == MF_EINVAL) {
        static const char *const schemes[] = {"mysql", NULL};
        char why[320];
        return luaL_error(L, "%s: %s", mf_lua_usage(L),
                          mf_url_problem(url, schemes,
                                         "the user info, the database or an "
                                         "option (?name=value) it does not "
                                         "take",
                                         why, sizeof why));
    }
    if (!db->client)
        return luaL_error(L, "%s: cannot use '%s': %s", mf_lua_usage(L),
                          mf_lua__push_masked(L, url), mf_strerror(err));
    luaL_getmetatable(L, MF_LUA_MYSQL);
    lua_setmetatable(L, -2);
    return 1;
}

static int mf_lua__tostring(lua_State *L)
{
    lua_pushfstring(L, "mf.mysql: %p", lua_touserdata(L, 1));
    return 1;
}

/* db:open() -> connections open now (the specs watch the pool). */
static int mf_lua__open(lua_State *L)
{
    mf_lua_mysql_t *db = mf_lua__check_db(L, 1);
    lua_pushnumber(L, mf_mysql_client_open(db->client));
    return 1;
}

/* A metatable whose __index is a methods table; leaves the methods table
 * in the module table at -1 under key (init.lua adds the Lua-side ones). */
static void mf_lua__class(lua_State *L, const char *name, const luaL_Reg *m,
                          const char *key)
{
    luaL_newmetatable(L, name);
    lua_newtable(L);
    mf_lua_register(L, m);
    lua_pushvalue(L, -1);
    lua_setfield(L, -4, key);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, mf_lua__tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushstring(L, name);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
}

int mf_lua_open_mysql(lua_State *L)
{
    static const luaL_Reg db_methods[] = {
        {"query db:query(sql, ...)", mf_lua__query},
        {"quote db:quote(s)", mf_lua__quote},
        {"open db:open()", mf_lua__open},
        {NULL, NULL}};
    static const luaL_Reg pinned_methods[] = {
        {"query db:query(sql, ...)", mf_lua__query},
        {"quote db:quote(s)", mf_lua__quote},
        {NULL, NULL}};
    lua_newtable(L);
    mf_lua__class(L, MF_LUA_MYSQL, db_methods, "db_methods");
    mf_lua__class(L, MF_LUA_MYSQL_PINNED, pinned_methods, "pinned_methods");
    mf_lua_mysql_rows_init(L);
    mf_lua_mysql_pin_init(L);
    mf_lua_push_named(L, mf_lua__client, "mf.mysql(url [, opts])");
    lua_setfield(L, -2, "client");
    mf_lua_push_named(L, mf_lua_mysql_rows_next, "db:rows(sql, ...)");
    lua_setfield(L, -2, "rows_next");
    return 1;
}
