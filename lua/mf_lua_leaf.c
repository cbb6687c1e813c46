/*
 * lua/mf_lua_leaf.c — the leaf kinds of a flow description (timer, http,
 * go, redis): checking a description, creating its C task, and turning the
 * finished task into a result table {state, error, ...kind fields}.
 *
 * Owns nothing past a call: a task created here belongs to the series it is
 * pushed on; a copied ca_file belongs to the node (freed with the flow).
 */
#include <ctype.h>
#include <string.h>

#include <lauxlib.h>

#include <moonflow/common.h>
#include <moonflow/http_client.h>
#include <moonflow/tasks.h>

#include "mf_lua_flow.h"

#define MF_LUA_HEADERS "moonflow.headers"

mf_lua_kind_t mf_lua_desc_kind(lua_State *L, int idx)
{
    static const char *const names[] = {"series", "parallel", "timer", "http",
                                        "go",     "redis",    NULL};
    lua_getfield(L, idx, "kind");
    const char *kind = lua_tostring(L, -1);
    lua_pop(L, 1);
    for (int i = 0; kind && names[i]; i++)
        if (strcmp(kind, names[i]) == 0)
            return (mf_lua_kind_t)i;
    return (mf_lua_kind_t)luaL_error(
        L,
        "not a flow step (kind %s): build it with mf.task.*, mf.series "
        "or mf.parallel",
        kind ? kind : "missing");
}

/* desc[field] must be absent or of type t. */
static void mf_lua__opt_field(lua_State *L, int idx, const char *field, int t)
{
    lua_getfield(L, idx, field);
    int got = lua_type(L, -1);
    lua_pop(L, 1);
    if (got != LUA_TNIL && got != t)
        luaL_error(L, "task field '%s': %s expected, got %s", field,
                   lua_typename(L, t), lua_typename(L, got));
}

void mf_lua_leaf_check(lua_State *L, int idx, mf_lua_kind_t kind)
{
    mf_lua__opt_field(L, idx, "timeout", LUA_TNUMBER);
    mf_lua__opt_field(L, idx, "callback", LUA_TFUNCTION);
    if (kind == MF_LUA_TIMER) {
        lua_getfield(L, idx, "ms");
        if (lua_type(L, -1) != LUA_TNUMBER || lua_tonumber(L, -1) < 0)
            luaL_error(L, "timer task: ms must be a number >= 0");
        lua_pop(L, 1);
    } else if (kind == MF_LUA_HTTP) {
        lua_getfield(L, idx, "url");
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "http task: url must be a string");
        lua_pop(L, 1);
        mf_lua__opt_field(L, idx, "method", LUA_TSTRING);
        mf_lua__opt_field(L, idx, "headers", LUA_TTABLE);
        mf_lua__opt_field(L, idx, "body", LUA_TSTRING);
        mf_lua__opt_field(L, idx, "redirects", LUA_TNUMBER);
        mf_lua__opt_field(L, idx, "retries", LUA_TNUMBER);
        mf_lua__opt_field(L, idx, "verify", LUA_TBOOLEAN);
        mf_lua__opt_field(L, idx, "ca_file", LUA_TSTRING);
    } else if (kind == MF_LUA_GO) {
        mf_lua_go_check(L, idx);
    } else if (kind == MF_LUA_REDIS) {
        mf_lua_redis_leaf_check(L, idx);
    }
}

/* ---- creating the tasks ------------------------------------------------ */

static lua_Number mf_lua__num_field(lua_State *L, int idx, const char *field,
                                    lua_Number fallback)
{
    lua_getfield(L, idx, field);
    lua_Number v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : fallback;
    lua_pop(L, 1);
    return v;
}

/* headers = {Name = "v", ["Set-Thing"] = {"a", "b"}}: a list value sends
 * the field once per element. */
static void mf_lua__http_header(lua_State *L, mf_task_t *task)
{
    const char *name = lua_tostring(L, -2);
    if (lua_isstring(L, -1)) {
        mf_task_http_add_header(task, name, lua_tostring(L, -1));
        return;
    }
    int n = (int)lua_objlen(L, -1);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        if (lua_isstring(L, -1))
            mf_task_http_add_header(task, name, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
}

static void mf_lua__http_headers(lua_State *L, int idx, mf_task_t *task)
{
    lua_getfield(L, idx, "headers");
    if (lua_istable(L, -1)) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (lua_type(L, -2) == LUA_TSTRING)
                mf_lua__http_header(L, task);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
}

static void mf_lua__http_opts(lua_State *L, int idx, mf_task_t *task,
                              mf_lua_node_t *node)
{
    mf_http_client_opts_t opts;
    mf_http_client_opts_init(&opts);
    opts.max_redirects =
        (int)mf_lua__num_field(L, idx, "redirects", opts.max_redirects);
    opts.max_retries =
        (int)mf_lua__num_field(L, idx, "retries", opts.max_retries);
    lua_getfield(L, idx, "verify");
    if (lua_isboolean(L, -1))
        opts.tls_verify = lua_toboolean(L, -1);
    lua_getfield(L, idx, "ca_file");
    if (lua_isstring(L, -1)) {
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        node->ca_file = mf_xmalloc(len + 1);
        memcpy(node->ca_file, s, len + 1);
        opts.ca_file = node->ca_file;
    }
    lua_pop(L, 2);
    mf_task_http_set_opts(task, &opts);
}

static mf_task_t *mf_lua__http_create(lua_State *L, int idx,
                                      mf_lua_node_t *node, mf_loop_t *loop,
                                      mf_task_cb cb)
{
    lua_getfield(L, idx, "method");
    lua_getfield(L, idx, "url");
    mf_task_t *task = mf_task_http_create(loop, lua_tostring(L, -2),
                                          lua_tostring(L, -1), cb, node);
    lua_pop(L, 2);
    mf_lua__http_headers(L, idx, task);
    lua_getfield(L, idx, "body");
    size_t len;
    const char *body = lua_tolstring(L, -1, &len);
    if (body)
        mf_task_http_set_body(task, body, len);
    lua_pop(L, 1);
    mf_lua__http_opts(L, idx, task, node);
    return task;
}

mf_task_t *mf_lua_leaf_create(lua_State *L, int idx, mf_lua_node_t *node,
                              mf_loop_t *loop, mf_task_cb cb)
{
    mf_task_t *task;
    if (node->kind == MF_LUA_TIMER)
        task = mf_task_timer_create(
            loop, (uint64_t)mf_lua__num_field(L, idx, "ms", 0), cb, node);
    else if (node->kind == MF_LUA_HTTP)
        task = mf_lua__http_create(L, idx, node, loop, cb);
    else if (node->kind == MF_LUA_REDIS) {
        node->redis_flags = (unsigned char)mf_lua_redis_leaf_flags(L, idx);
        task = mf_lua_redis_leaf_create(L, idx, cb, node);
    } else
        task = mf_lua_go_create(L, idx, loop, cb, node);
    lua_Number timeout = mf_lua__num_field(L, idx, "timeout", 0);
    if (timeout > 0)
        mf_task_set_timeout(task, (uint32_t)timeout);
    return task;
}

/* ---- results ---------------------------------------------------------- */

/* headers[name] with any case: names are stored lowercased. */
static int mf_lua__headers_index(lua_State *L)
{
    size_t len;
    const char *key = lua_tolstring(L, 2, &len);
    if (!key || lua_type(L, 2) != LUA_TSTRING || len > 256)
        return 0;
    char lower[257];
    for (size_t i = 0; i < len; i++)
        lower[i] = (char)tolower((unsigned char)key[i]);
    lua_pushlstring(L, lower, len);
    lua_rawget(L, 1);
    return 1;
}

void mf_lua_headers_init(lua_State *L)
{
    if (luaL_newmetatable(L, MF_LUA_HEADERS)) {
        lua_pushcfunction(L, mf_lua__headers_index);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
}

/* Lowercased names; repeated fields joined with ", " (RFC 9110 5.3). */
static void mf_lua__push_headers(lua_State *L, const mf_http_response_t *r)
{
    lua_createtable(L, 0, r ? (int)r->num_headers : 0);
    for (size_t i = 0; r && i < r->num_headers; i++) {
        const mf_http_header_t *h = &r->headers[i];
        char name[256];
        size_t n = h->name_len < sizeof name ? h->name_len : sizeof name;
        for (size_t k = 0; k < n; k++)
            name[k] = (char)tolower((unsigned char)h->name[k]);
        lua_pushlstring(L, name, n);
        lua_pushvalue(L, -1);
        lua_rawget(L, -3);
        if (lua_isstring(L, -1)) {
            lua_pushliteral(L, ", ");
            lua_pushlstring(L, h->value, h->value_len);
            lua_concat(L, 3);
        } else {
            lua_pop(L, 1);
            lua_pushlstring(L, h->value, h->value_len);
        }
        lua_rawset(L, -3);
    }
    luaL_getmetatable(L, MF_LUA_HEADERS);
    lua_setmetatable(L, -2);
}

static void mf_lua__http_result(lua_State *L, mf_task_t *task)
{
    lua_pushinteger(L, mf_task_http_status(task));
    lua_setfield(L, -2, "status");
    mf_lua__push_headers(L, mf_task_http_response(task));
    lua_setfield(L, -2, "headers");
    size_t len = 0;
    const char *body = mf_task_http_body(task, &len);
    lua_pushlstring(L, body ? body : "", body ? len : 0);
    lua_setfield(L, -2, "body");
    const char *url = mf_task_http_url(task);
    if (url) {
        lua_pushstring(L, url);
        lua_setfield(L, -2, "url");
    }
}

void mf_lua_leaf_result(lua_State *L, mf_lua_node_t *node, mf_task_t *task)
{
    int state = mf_task_state(task);
    lua_pushstring(L, mf_state_name(state));
    lua_setfield(L, -2, "state");
    const char *err = mf_lua_errstr(state, mf_task_error(task));
    if (err) {
        lua_pushstring(L, err);
        lua_setfield(L, -2, "error");
    }
    if (state != MF_STATE_SUCCESS)
        return;
    if (node->kind == MF_LUA_HTTP)
        mf_lua__http_result(L, task);
    else if (node->kind == MF_LUA_GO) {
        mf_lua_go_push_value(L, task);
        lua_setfield(L, -2, "value");
    } else if (node->kind == MF_LUA_REDIS)
        mf_lua_redis_leaf_result(L, task, node->redis_flags);
}
