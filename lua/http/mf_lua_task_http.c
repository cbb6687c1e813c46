/*
 * lua/http/mf_lua_task_http.c — the "http" task kind (mf.task.http, and
 * mf.http.get/post/request waiting on one): {url =, method =, headers =,
 * body =, redirects =, retries =, verify =, ca_file =, max_body =,
 * insecure_redirects =, http2 =} plus the fields every task has (timeout,
 * callback); any other field is an error. The result has status, headers
 * (lowercased names, looked up in any case), body, url (the final one,
 * after redirects) and version ("2", "1.1" or "1.0").
 *
 * Owns: a copy of ca_file in the task's data (the client reads it when it
 * connects, which may be after the description is gone), released after
 * the task's callback.
 */
#include <ctype.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>

#include <moonflow/common.h>
#include <moonflow/http_client.h>

#include "host/mf_lua_leaf.h"

#define MF_LUA_HEADERS "moonflow.headers"

typedef struct mf_lua_http_data {
    char *ca_file;
} mf_lua_http_data_t;

/* The fields of an http task and their types; "kind", "timeout" and
 * "callback" are every task's (checked by the leaf). */
static const struct {
    const char *name;
    int type;
} mf_lua__http_fields[] = {{"kind", LUA_TSTRING},
                           {"timeout", LUA_TNUMBER},
                           {"callback", LUA_TFUNCTION},
                           {"url", LUA_TSTRING},
                           {"method", LUA_TSTRING},
                           {"headers", LUA_TTABLE},
                           {"body", LUA_TSTRING},
                           {"redirects", LUA_TNUMBER},
                           {"retries", LUA_TNUMBER},
                           {"verify", LUA_TBOOLEAN},
                           {"ca_file", LUA_TSTRING},
                           {"max_body", LUA_TNUMBER},
                           {"insecure_redirects", LUA_TBOOLEAN},
                           {"upstream_key", LUA_TSTRING},
                           {"retry_unsafe", LUA_TBOOLEAN},
                           {"http2", LUA_TNONE}}; /* mf_lua__http2_mode */

/* A misspelt option (max_body_size, redirect) would be ignored: raise. */
static void mf_lua__http_known_fields(lua_State *L, int idx)
{
    idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        const char *key =
            lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        size_t i = 0;
        while (key && i < MF_ARRAY_SIZE(mf_lua__http_fields) &&
               strcmp(key, mf_lua__http_fields[i].name) != 0)
            i++;
        if (!key)
            luaL_error(L, "http task: fields are named, not %s keys",
                       luaL_typename(L, -1));
        if (i == MF_ARRAY_SIZE(mf_lua__http_fields))
            luaL_error(L, "http task: unknown field '%s'", key);
    }
}

/* http2 = true (the default: h2 when an https server picks it by ALPN),
 * false (HTTP/1.1 only) or "prior_knowledge" (h2c on http://): the
 * mf_http2_mode_t, or -1 for anything else. */
static int mf_lua__http2_mode(lua_State *L, int idx)
{
    lua_getfield(L, idx, "http2");
    int mode = -1;
    if (lua_isnil(L, -1) || (lua_isboolean(L, -1) && lua_toboolean(L, -1)))
        mode = MF_HTTP2_ALPN;
    else if (lua_isboolean(L, -1))
        mode = MF_HTTP2_OFF;
    else if (lua_type(L, -1) == LUA_TSTRING &&
             strcmp(lua_tostring(L, -1), "prior_knowledge") == 0)
        mode = MF_HTTP2_PRIOR_KNOWLEDGE;
    lua_pop(L, 1);
    return mode;
}

static void mf_lua__http_check(lua_State *L, int idx)
{
    lua_getfield(L, idx, "url");
    if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "http task: url must be a string");
    lua_pop(L, 1);
    mf_lua__http_known_fields(L, idx);
    for (size_t i = 0; i < MF_ARRAY_SIZE(mf_lua__http_fields); i++)
        if (mf_lua__http_fields[i].type != LUA_TNONE)
            mf_lua_desc_opt_field(L, idx, mf_lua__http_fields[i].name,
                                  mf_lua__http_fields[i].type);
    if (mf_lua__http2_mode(L, idx) < 0)
        luaL_error(L, "http task: http2 must be true, false or "
                      "'prior_knowledge'");
    lua_Number max = mf_lua_desc_number(L, idx, "max_body", 0);
    if (max < 0 || max != floor(max) || max > 9007199254740992.0)
        luaL_error(L, "http task: max_body must be a whole number of bytes "
                      ">= 0");
}

/* ---- the task from a description ---------------------------------------- */

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

/* The description's headers; then, for a request's coroutine, its id as
 * X-Request-Id unless they name one (the upstream logs the same id). */
static void mf_lua__http_headers(lua_State *L, int idx, mf_task_t *task)
{
    bool has_id = false;
    lua_getfield(L, idx, "headers");
    if (lua_istable(L, -1)) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (lua_type(L, -2) == LUA_TSTRING) {
                mf_lua__http_header(L, task);
                has_id |= !strcasecmp(lua_tostring(L, -2), "x-request-id");
            }
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    const char *id = host && !has_id ? mf_lua_host_request_id(host) : NULL;
    if (id)
        mf_task_http_add_header(task, "X-Request-Id", id);
}

static void mf_lua__http_opts(lua_State *L, int idx, mf_task_t *task,
                              mf_lua_http_data_t *data)
{
    mf_http_client_opts_t opts;
    mf_http_client_opts_init(&opts);
    opts.max_redirects =
        (int)mf_lua_desc_number(L, idx, "redirects", opts.max_redirects);
    opts.max_retries =
        (int)mf_lua_desc_number(L, idx, "retries", opts.max_retries);
    opts.max_response_body = (uint64_t)mf_lua_desc_number(
        L, idx, "max_body", (lua_Number)opts.max_response_body);
    lua_getfield(L, idx, "insecure_redirects");
    opts.allow_insecure_redirects = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, idx, "verify");
    if (lua_isboolean(L, -1))
        opts.tls_verify = lua_toboolean(L, -1);
    lua_getfield(L, idx, "ca_file");
    if (lua_isstring(L, -1)) {
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        data->ca_file = mf_xmalloc(len + 1);
        memcpy(data->ca_file, s, len + 1);
        opts.ca_file = data->ca_file;
    }
    lua_pop(L, 2);
    lua_getfield(L, idx, "retry_unsafe");
    opts.retry_non_idempotent = lua_toboolean(L, -1);
    lua_getfield(L, idx, "upstream_key");
    if (lua_isstring(L, -1)) {
        size_t len;
        const char *key = lua_tolstring(L, -1, &len);
        mf_task_http_set_upstream_key(task, key, len);
    }
    lua_pop(L, 2);
    opts.http2 = mf_lua__http2_mode(L, idx); /* checked */
    mf_task_http_set_opts(task, &opts);
}

static mf_task_t *mf_lua__http_create(lua_State *L, int idx, void *data,
                                      mf_loop_t *loop, mf_task_cb cb,
                                      void *user)
{
    lua_getfield(L, idx, "method");
    lua_getfield(L, idx, "url");
    mf_task_t *task = mf_task_http_create(loop, lua_tostring(L, -2),
                                          lua_tostring(L, -1), cb, user);
    lua_pop(L, 2);
    mf_lua__http_headers(L, idx, task);
    lua_getfield(L, idx, "body");
    size_t len;
    const char *body = lua_tolstring(L, -1, &len);
    if (body)
        mf_task_http_set_body(task, body, len);
    lua_pop(L, 1);
    mf_lua__http_opts(L, idx, task, data);
    return task;
}

static void mf_lua__http_release(void *data)
{
    mf_lua_http_data_t *d = data;
    mf_free(d->ca_file);
}

/* ---- the result --------------------------------------------------------- */

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

/* Pushes the "moonflow.headers" metatable, made on first use (the server
 * may have put its own, with the same lookup, there first). */
static void mf_lua__push_headers_meta(lua_State *L)
{
    if (luaL_newmetatable(L, MF_LUA_HEADERS)) {
        lua_pushcfunction(L, mf_lua__headers_index);
        lua_setfield(L, -2, "__index");
    }
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
    mf_lua__push_headers_meta(L);
    lua_setmetatable(L, -2);
}

static void mf_lua__http_result(lua_State *L, mf_task_t *task, void *data)
{
    (void)data;
    lua_pushinteger(L, mf_task_http_status(task));
    lua_setfield(L, -2, "status");
    mf_lua__push_headers(L, mf_task_http_response(task));
    lua_setfield(L, -2, "headers");
    size_t len = 0;
    const char *body = mf_task_http_body(task, &len);
    lua_pushlstring(L, body ? body : "", body ? len : 0);
    lua_setfield(L, -2, "body");
    int version = mf_task_http_version(task);
    if (version) {
        lua_pushstring(L, version == 20 ? "2" : version == 11 ? "1.1" : "1.0");
        lua_setfield(L, -2, "version");
    }
    const char *url = mf_task_http_url(task);
    if (url) {
        lua_pushstring(L, url);
        lua_setfield(L, -2, "url");
    }
}

/* A status >= 400: the server answered, refusing or failing the request. */
static bool mf_lua__http_answer_failed(const mf_task_t *task, void *data)
{
    (void)data;
    return mf_task_http_status(task) >= 400;
}

/* For reports: the method. */
/* "tls error: https://host:443: 18: self-signed certificate", "invalid
 * argument: malformed URL: no host": what the failure is about. */
static const char *mf_lua__http_error_detail(const mf_task_t *task, void *data)
{
    return mf_task_http_error_detail(task);
}

static void mf_lua__http_describe(lua_State *L, int idx)
{
    lua_getfield(L, idx, "method");
}

const mf_lua_kind_t mf_lua_task_http_kind = {
    .name = "http",
    .data_size = sizeof(mf_lua_http_data_t),
    .check = mf_lua__http_check,
    .create = mf_lua__http_create,
    .result = mf_lua__http_result,
    .release = mf_lua__http_release,
    .answer_failed = mf_lua__http_answer_failed,
    .describe = mf_lua__http_describe,
    .error_detail = mf_lua__http_error_detail,
};
