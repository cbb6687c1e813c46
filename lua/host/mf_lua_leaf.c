/*
 * lua/host/mf_lua_leaf.c — task descriptions, kind-agnostic: the host's
 * registry of task kinds, which step a description is, and checking,
 * creating and reporting a task through its kind's ops, with the fields
 * every kind shares (timeout, callback) handled here once.
 *
 * Owns: the registry table (name → kind, a light userdata; the kinds
 * themselves are their registrants'). Nothing past a call otherwise.
 */
#include <ctype.h>
#include <string.h>

#include <lauxlib.h>

#include <moonflow/common.h>

#include "mf_lua_leaf.h"

/* The registry key of the kinds table (a light userdata). */
static const char mf_lua__kinds_key;

/* Pushes the kinds table of L's host. */
static void mf_lua__push_kinds(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&mf_lua__kinds_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
}

/* The kind named by the string at idx (absolute), or NULL. */
static const mf_lua_kind_t *mf_lua__kind_named(lua_State *L, int idx)
{
    mf_lua__push_kinds(L);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    const mf_lua_kind_t *kind = lua_touserdata(L, -1);
    lua_pop(L, 2);
    return kind;
}

static bool mf_lua__is_structure(const char *name)
{
    return strcmp(name, "series") == 0 || strcmp(name, "parallel") == 0 ||
           strcmp(name, "graph") == 0;
}

int mf_lua_kind_register(mf_lua_host_t *host, const mf_lua_kind_t *kind)
{
    if (!kind || !kind->name || !*kind->name || !kind->check || !kind->create)
        return MF_EINVAL;
    lua_State *L = mf_lua_host_state(host);
    lua_pushstring(L, kind->name);
    bool taken = mf_lua__is_structure(kind->name) ||
                 mf_lua__kind_named(L, lua_gettop(L)) != NULL;
    if (!taken) {
        mf_lua__push_kinds(L);
        lua_pushvalue(L, -2);
        lua_pushlightuserdata(L, (void *)kind);
        lua_rawset(L, -3);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return taken ? MF_EEXIST : 0;
}

const mf_lua_kind_t *mf_lua_kind_find(lua_State *L, const char *name)
{
    lua_pushstring(L, name);
    const mf_lua_kind_t *kind = mf_lua__kind_named(L, lua_gettop(L));
    lua_pop(L, 1);
    return kind;
}

void mf_lua_kind_label_verb(const char *detail, char *buf, size_t len)
{
    if (!len)
        return;
    size_t at = 0;
    for (; *detail && !isspace((unsigned char)*detail) && at + 1 < len;
         detail++)
        buf[at++] = (char)toupper((unsigned char)*detail);
    buf[at] = '\0';
}

void mf_lua_kinds_init(mf_lua_host_t *host)
{
    lua_State *L = mf_lua_host_state(host);
    lua_pushlightuserdata(L, (void *)&mf_lua__kinds_key);
    lua_newtable(L);
    lua_rawset(L, LUA_REGISTRYINDEX);
    for (const mf_lua_kind_t *const *k = mf_lua_builtin_kinds; *k; k++)
        mf_lua_kind_register(host, *k);
}

int mf_lua_has_kind(lua_State *L)
{
    lua_pushboolean(L, lua_type(L, 1) == LUA_TSTRING &&
                           mf_lua__kind_named(L, 1) != NULL);
    return 1;
}

mf_lua_step_t mf_lua_desc_step(lua_State *L, int idx,
                               const mf_lua_kind_t **kind)
{
    lua_getfield(L, idx, "kind");
    const char *name =
        lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    *kind = NULL;
    if (name && strcmp(name, "series") == 0) {
        lua_pop(L, 1);
        return MF_LUA_STEP_SERIES;
    }
    if (name && strcmp(name, "parallel") == 0) {
        lua_pop(L, 1);
        return MF_LUA_STEP_PARALLEL;
    }
    if (name && strcmp(name, "graph") == 0) {
        lua_pop(L, 1);
        return MF_LUA_STEP_GRAPH;
    }
    if (name)
        *kind = mf_lua__kind_named(L, lua_gettop(L));
    lua_pop(L, 1);
    if (!*kind)
        luaL_error(L,
                   "not a flow step (kind %s): build it with mf.task.*, "
                   "mf.series, mf.parallel or mf.graph",
                   name ? name : "missing");
    return MF_LUA_STEP_TASK;
}

/* ---- helpers for the kinds ------------------------------------------- */

int mf_lua_desc_opt_field(lua_State *L, int idx, const char *field, int t)
{
    lua_getfield(L, idx, field);
    int got = lua_type(L, -1);
    lua_pop(L, 1);
    if (got != LUA_TNIL && got != t)
        luaL_error(L, "task field '%s': %s expected, got %s", field,
                   lua_typename(L, t), lua_typename(L, got));
    return got;
}

lua_Number mf_lua_desc_number(lua_State *L, int idx, const char *field,
                              lua_Number fallback)
{
    lua_getfield(L, idx, field);
    lua_Number v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : fallback;
    lua_pop(L, 1);
    return v;
}

/* ---- a task through its kind's ops ------------------------------------ */

bool mf_lua_leaf_check(lua_State *L, int idx, const mf_lua_kind_t *kind)
{
    mf_lua_desc_opt_field(L, idx, "timeout", LUA_TNUMBER);
    bool cb = mf_lua_desc_opt_field(L, idx, "callback", LUA_TFUNCTION) ==
              LUA_TFUNCTION;
    kind->check(L, idx);
    return cb;
}

mf_task_t *mf_lua_leaf_create(lua_State *L, int idx, const mf_lua_kind_t *kind,
                              void *data, mf_loop_t *loop, mf_task_cb cb,
                              void *user)
{
    mf_task_t *task = kind->create(L, idx, data, loop, cb, user);
    lua_Number timeout = mf_lua_desc_number(L, idx, "timeout", 0);
    if (timeout > 0)
        mf_task_set_timeout(task, (uint32_t)timeout);
    return task;
}

void mf_lua_leaf_result(lua_State *L, const mf_lua_kind_t *kind,
                        mf_task_t *task, void *data)
{
    int state = mf_task_state(task);
    lua_pushstring(L, mf_state_name(state));
    lua_setfield(L, -2, "state");
    const char *err = mf_lua_errstr(state, mf_task_error(task));
    char own[512];
    const char *whole =
        err && kind->error ? kind->error(task, data, own, sizeof own) : NULL;
    const char *detail =
        err && kind->error_detail ? kind->error_detail(task, data) : NULL;
    if (whole) {
        lua_pushstring(L, whole);
        lua_setfield(L, -2, "error");
    } else if (detail) {
        lua_pushfstring(L, "%s: %s", err, detail);
        lua_setfield(L, -2, "error");
    } else if (err) {
        lua_pushstring(L, err);
        lua_setfield(L, -2, "error");
    }
    if (state == MF_STATE_SUCCESS && kind->result)
        kind->result(L, task, data);
}

bool mf_lua_leaf_lean(const mf_lua_kind_t *kind, const mf_task_t *task,
                      void *data)
{
    return mf_task_state(task) == MF_STATE_SUCCESS &&
           !(kind->answer_failed && kind->answer_failed(task, data));
}

void mf_lua_leaf_release(const mf_lua_kind_t *kind, void *data)
{
    if (kind->release)
        kind->release(data);
}
