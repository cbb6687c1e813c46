/*
 * lua/serve/handler.c — a request handled by a Lua handler: the request and
 * response objects (userdata "moonflow.request" / "moonflow.response"), the
 * coroutine that runs `handler(req, resp)`, and turning its end into an
 * HTTP answer.
 *
 * A call record (from the loop's free lists) ties the exchange, the
 * coroutine and the two userdata together for one request. It lives until
 * the coroutine has ended; the userdata point to it and are cut loose then
 * (a script that keeps `resp` and uses it later gets an error, never freed
 * memory). The exchange is held for the coroutine: its answer is sent by
 * resp:send/json/redirect, or when the handler returns (status and headers
 * set, empty body), or as a 500 when it raised, a 504 when it ran past its
 * timeout. A client that goes away aborts the coroutine (its pending task is
 * canceled) and the exchange is forgotten.
 */
#include <lauxlib.h>
#include <stdio.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"

typedef struct mf_serve_call mf_serve_call_t;

/* req and resp: made once per coroutine thread and kept with it
 * (mf_lua_co_keep), so a request allocates no Lua object. call is the
 * request the thread serves now; an object is usable only by the coroutine
 * that owns that call (mf__owned_call), so one kept past its request can
 * never reach another request's answer. */
typedef struct mf_serve_ud {
    mf_serve_call_t *call; /* NULL between requests */
} mf_serve_ud_t;

struct mf_serve_call {
    mf_serve_worker_t *w;
    mf_http_exchange_t *ex; /* NULL once answered or the client is gone */
    mf_lua_co_t *co;
    mf_serve_ud_t *req_ud;
    mf_serve_ud_t *resp_ud;
    int status;
    bool sent;      /* the answer (or its end) is queued */
    bool streaming; /* resp:write started a chunked answer */
    bool spawning;  /* inside mf_lua_host_spawn */
    bool exited;    /* the coroutine ended while spawning */
    bool timed_out;
    size_t bytes;
    int headers_ref; /* resp.headers, created on first use */
    int cache_ref;   /* req.query/headers/body, computed on first use */
    struct timespec start;
    mf_timer_t timer; /* the handler timeout */
};

static const char mf__req_mt[] = "moonflow.request";
static const char mf__resp_mt[] = "moonflow.response";

/* ---- answering -------------------------------------------------------------
 */

static double mf__call_seconds(const mf_serve_call_t *call)
{
    if (call->w->log_fd < 0)
        return 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - call->start.tv_sec) +
           (double)(now.tv_nsec - call->start.tv_nsec) / 1e9;
}

/* Copies resp.headers into the exchange; values may be strings, numbers
 * or lists of them. Returns whether a Content-Type was among them. */
static bool mf__apply_headers(lua_State *L, mf_serve_call_t *call)
{
    bool has_type = false;
    if (call->headers_ref == LUA_NOREF)
        return false;
    lua_rawgeti(L, LUA_REGISTRYINDEX, call->headers_ref);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        size_t nlen;
        const char *name =
            lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &nlen) : NULL;
        if (name && nlen) {
            if (nlen == 12 && !strncasecmp(name, "content-type", 12))
                has_type = true;
            int n = lua_istable(L, -1) ? (int)lua_objlen(L, -1) : 1;
            for (int i = 1; i <= n; i++) {
                if (lua_istable(L, -1))
                    lua_rawgeti(L, -1, i);
                else
                    lua_pushvalue(L, -1);
                size_t vlen;
                const char *v = lua_tolstring(L, -1, &vlen);
                if (v)
                    mf_http_exchange_add_header(call->ex, name, nlen, v, vlen);
                lua_pop(L, 1);
            }
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return has_type;
}

static void mf__set_default_type(mf_serve_call_t *call, bool has_type);

/* Status, headers and the default Content-Type, before the first byte. */
static void mf__call_head(lua_State *L, mf_serve_call_t *call)
{
    bool has_type = mf__apply_headers(L, call);
    mf__set_default_type(call, has_type);
    mf_http_exchange_set_status(call->ex, call->status);
}

static void mf__set_default_type(mf_serve_call_t *call, bool has_type)
{
    static const char line[] = "Content-Type: text/plain; charset=utf-8\r\n";
    if (!has_type) /* a constant line: no checks, no copy */
        mf_http_exchange_add_header_static(call->ex, line, sizeof line - 1);
}

/* The last step of every answer: the access log line, then the send (after
 * which the exchange and its request are gone). */
static void mf__call_send_body(mf_serve_call_t *call, const char *body,
                               size_t len)
{
    mf_http_exchange_t *ex = call->ex;
    mf_http_exchange_on_close(ex, NULL, NULL);
    mf_serve_log_request(call->w, mf_http_exchange_request(ex),
                         mf_http_exchange_peer(ex), call->status, call->bytes,
                         mf__call_seconds(call));
    call->ex = NULL;
    call->sent = true;
    mf_http_exchange_send_body(ex, body, len);
}

static void mf__call_send(mf_serve_call_t *call)
{
    mf__call_send_body(call, NULL, 0);
}

/* An answer without Lua (404, 500, 504). */
static void mf__call_fail(mf_serve_call_t *call, int status, const char *text)
{
    mf_http_exchange_set_status(call->ex, status);
    mf_http_exchange_add_header(call->ex, "Content-Type", 12, "text/plain", 10);
    mf_http_exchange_append(call->ex, text, strlen(text));
    call->status = status;
    call->bytes = strlen(text);
    mf__call_send(call);
}

/* ---- the coroutine's end ------------------------------------------------- */

static void mf__call_free(mf_serve_call_t *call)
{
    mf_loop_t *loop = call->w->loop;
    mf_timer_stop(loop, &call->timer);
    mf_lua_unref(call->w->host, call->headers_ref);
    mf_lua_unref(call->w->host, call->cache_ref);
    if (call->req_ud && call->req_ud->call == call)
        call->req_ud->call = NULL;
    if (call->resp_ud && call->resp_ud->call == call)
        call->resp_ud->call = NULL;
    mf_loop_free(loop, call, sizeof(*call));
}

/* The handler returned without sending: answer with what it set. */
static void mf__call_finish(mf_serve_call_t *call, lua_State *L)
{
    if (!call->ex || call->sent)
        return;
    if (!call->streaming)
        mf__call_head(L, call);
    mf__call_send(call); /* or ends the chunked body */
}

static void mf__on_exit(mf_lua_co_t *co, const mf_lua_co_exit_t *ex, void *data)
{
    mf_serve_call_t *call = data;
    (void)co;
    call->co = NULL;
    if (ex->status == MF_LUA_CO_ERROR) {
        const mf_http_request_t *req =
            call->ex ? mf_http_exchange_request(call->ex) : NULL;
        mf_lua_host_log(call->w->host, "moonflow: %.*s %.*s: %s",
                        req ? (int)req->method_len : 1, req ? req->method : "-",
                        req ? (int)req->path_len : 1, req ? req->path : "-",
                        ex->message);
        if (call->ex && !call->sent && !call->streaming)
            mf__call_fail(call, 500, "500 Internal Server Error\n");
    } else if (ex->status == MF_LUA_CO_ABORTED) {
        if (call->ex && call->timed_out && !call->streaming)
            mf__call_fail(call, 504, "504 Gateway Timeout\n");
    }
    if (call->ex && !call->sent)
        mf__call_finish(call, mf_lua_host_state(call->w->host));
    if (call->spawning)
        call->exited = true; /* freed when mf_lua_host_spawn returns */
    else
        mf__call_free(call);
}

static void mf__on_client_gone(mf_http_exchange_t *ex, void *arg)
{
    mf_serve_call_t *call = arg;
    (void)ex;
    call->ex = NULL; /* dead after this callback */
    if (call->co)
        mf_lua_co_abort(call->co, "client closed the connection");
}

static void mf__on_timeout(mf_timer_t *timer)
{
    mf_serve_call_t *call = timer->data;
    call->timed_out = true;
    if (call->co)
        mf_lua_co_abort(call->co, "handler timeout");
}

/* ---- the handler -----------------------------------------------------------
 */

/* Pushes the thread's kept object keep[slot] (made on the thread's first
 * request), bound to call. */
static mf_serve_ud_t *mf__push_ud(lua_State *T, int *keep, int mt_ref,
                                  mf_serve_call_t *call)
{
    mf_serve_ud_t *ud;
    if (*keep == LUA_NOREF) {
        ud = lua_newuserdata(T, sizeof(*ud));
        lua_rawgeti(T, LUA_REGISTRYINDEX, mt_ref);
        lua_setmetatable(T, -2);
        lua_pushvalue(T, -1);
        *keep = luaL_ref(T, LUA_REGISTRYINDEX);
    } else {
        lua_rawgeti(T, LUA_REGISTRYINDEX, *keep);
        ud = lua_touserdata(T, -1);
    }
    ud->call = call;
    return ud;
}

static mf_serve_call_t *mf__call_new(mf_serve_worker_t *w,
                                     mf_http_exchange_t *ex)
{
    mf_serve_call_t *call = mf_loop_alloc(w->loop, sizeof(*call));
    memset(call, 0, sizeof(*call));
    call->w = w;
    call->ex = ex;
    call->status = 200;
    call->headers_ref = LUA_NOREF;
    call->cache_ref = LUA_NOREF;
    if (w->log_fd >= 0) /* the request time is for the access log only */
        clock_gettime(CLOCK_MONOTONIC, &call->start);
    mf_timer_init(&call->timer, mf__on_timeout, call);
    return call;
}

void mf_serve_handle(mf_http_exchange_t *ex, void *worker)
{
    mf_serve_worker_t *w = worker;
    lua_State *L = mf_lua_host_state(w->host);
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    mf_serve_call_t *call = mf__call_new(w, ex);
    uint32_t timeout;
    int rc =
        mf_serve_routes_push(w->routes, L, req->path, req->path_len, &timeout);
    if (rc != MF_SERVE_FOUND) {
        if (rc == MF_SERVE_NOT_FOUND)
            mf__call_fail(call, 404, "404 Not Found\n");
        else
            mf__call_fail(call, 500, "500 Internal Server Error\n");
        mf__call_free(call);
        return;
    }
    mf_http_exchange_hold(ex);
    mf_http_exchange_on_close(ex, mf__on_client_gone, call);
    if (!timeout)
        timeout = w->config->handler_timeout_ms;
    if (timeout)
        mf_timer_start(w->loop, &call->timer, timeout);
    call->co = mf_lua_host_prepare(w->host, mf__on_exit, call);
    lua_State *T = mf_lua_co_thread(call->co);
    lua_xmove(L, T, 1); /* the handler */
    int *keep = mf_lua_co_keep(call->co);
    call->req_ud = mf__push_ud(T, &keep[0], w->req_mt_ref, call);
    call->resp_ud = mf__push_ud(T, &keep[1], w->resp_mt_ref, call);
    call->spawning = true;
    if (!mf_lua_co_start(call->co, 2))
        call->co = NULL;
    call->spawning = false;
    if (call->exited)
        mf__call_free(call);
}

/* ---- the request object ----------------------------------------------------
 */

/* The object at idx is ours when its metatable is the one in upvalue mt_up
 * of the running C function: a pointer compare, no registry lookup by name
 * on every call. */
static mf_serve_ud_t *mf__check_ud(lua_State *L, int idx, int mt_up)
{
    mf_serve_ud_t *ud = lua_touserdata(L, idx);
    if (!ud || !lua_getmetatable(L, idx) ||
        !lua_rawequal(L, -1, lua_upvalueindex(mt_up)))
        luaL_typerror(L, idx, "moonflow request or response");
    lua_pop(L, 1);
    return ud;
}

/* The call ud serves, if the running coroutine is the one handling it (or
 * a flow callback of it): from anywhere else (a timer, another request, a
 * later request) the object is over. */
static mf_serve_call_t *mf__owned_call(const mf_serve_ud_t *ud)
{
    mf_serve_call_t *call = ud->call;
    if (!call || !call->ex || !call->co ||
        mf_lua_host_current(call->w->host) != call->co)
        return NULL;
    return call;
}

static mf_serve_call_t *mf__check_call(lua_State *L, int idx, int mt_up)
{
    mf_serve_call_t *call = mf__owned_call(mf__check_ud(L, idx, mt_up));
    if (!call)
        luaL_error(L, "the request is over (answered or the client left), "
                      "or this is not its handler");
    return call;
}

/* Pushes the cached req field key and returns 1, or returns 0 (nothing
 * pushed) when it is not computed yet. The cache table is made on first
 * use: a request that reads no such field allocates none. */
static int mf__cached(lua_State *L, mf_serve_call_t *call, const char *key)
{
    if (call->cache_ref == LUA_NOREF)
        return 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, call->cache_ref);
    lua_getfield(L, -1, key);
    lua_remove(L, -2);
    if (!lua_isnil(L, -1))
        return 1;
    lua_pop(L, 1);
    return 0;
}

/* Stores the value on top under key (and leaves it there). */
static void mf__cache(lua_State *L, mf_serve_call_t *call, const char *key)
{
    if (call->cache_ref == LUA_NOREF) {
        lua_newtable(L);
        call->cache_ref = mf_lua_ref(call->w->host, L);
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, call->cache_ref);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, key);
    lua_pop(L, 1);
}

/* Adds value under key; a repeated key becomes a list (OpenResty's shape). */
static void mf__table_add(lua_State *L, int t)
{
    lua_pushvalue(L, -2);
    lua_rawget(L, t);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_rawset(L, t);
        return;
    }
    if (!lua_istable(L, -1)) {
        lua_createtable(L, 2, 0);
        lua_insert(L, -2);
        lua_rawseti(L, -2, 1);
    }
    lua_insert(L, -2);
    lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
    lua_rawset(L, t);
}

static void mf__push_decoded(lua_State *L, const char *s, size_t n)
{
    char small[256];
    char *buf = n < sizeof small ? small : malloc(n + 1);
    memcpy(buf, s, n);
    ssize_t len = mf_http_url_decode(buf, n, true);
    if (len < 0)
        lua_pushlstring(L, s, n); /* a bad escape: keep it as sent */
    else
        lua_pushlstring(L, buf, (size_t)len);
    if (buf != small)
        free(buf);
}

static int mf__req_query(lua_State *L, const mf_http_request_t *req)
{
    lua_newtable(L);
    int t = lua_gettop(L);
    const char *p = req->query, *end = p ? p + req->query_len : NULL;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        if (stop > p) {
            mf__push_decoded(L, p, (size_t)((eq ? eq : stop) - p));
            if (eq)
                mf__push_decoded(L, eq + 1, (size_t)(stop - eq - 1));
            else
                lua_pushboolean(L, 1);
            mf__table_add(L, t);
        }
        p = amp ? amp + 1 : NULL;
    }
    return 1;
}

static int mf__req_headers(lua_State *L, const mf_http_request_t *req)
{
    char name[256];
    lua_createtable(L, 0, (int)req->num_headers);
    int t = lua_gettop(L);
    for (size_t i = 0; i < req->num_headers; i++) {
        const mf_http_header_t *h = &req->headers[i];
        size_t n = h->name_len < sizeof name ? h->name_len : sizeof name;
        for (size_t k = 0; k < n; k++)
            name[k] =
                (char)(h->name[k] |
                       ((h->name[k] >= 'A' && h->name[k] <= 'Z') ? 0x20 : 0));
        lua_pushlstring(L, name, n);
        lua_pushlstring(L, h->value, h->value_len);
        mf__table_add(L, t);
    }
    luaL_getmetatable(L, "moonflow.headers"); /* case-insensitive reads */
    lua_setmetatable(L, t);
    return 1;
}

static int mf__req_header(lua_State *L)
{
    mf_serve_call_t *call = mf__check_call(L, 1, 1);
    const char *name = luaL_checkstring(L, 2);
    const mf_http_request_t *req = mf_http_exchange_request(call->ex);
    const mf_http_header_t *h =
        mf_http_find_header(req->headers, req->num_headers, name);
    if (!h)
        return 0;
    lua_pushlstring(L, h->value, h->value_len);
    return 1;
}

static int mf__req_peer(lua_State *L, mf_serve_call_t *call)
{
    char addr[64];
    mf_sockaddr_format(mf_http_exchange_peer(call->ex), addr, sizeof addr);
    lua_pushstring(L, addr);
    return 1;
}

static int mf__req_index(lua_State *L)
{
    mf_serve_call_t *call = mf__check_call(L, 1, 1);
    const mf_http_request_t *req = mf_http_exchange_request(call->ex);
    size_t klen;
    const char *key = luaL_checklstring(L, 2, &klen);
    if (!strcmp(key, "method"))
        lua_pushlstring(L, req->method, req->method_len);
    else if (!strcmp(key, "path"))
        lua_pushlstring(L, req->path, req->path_len);
    else if (!strcmp(key, "uri"))
        lua_pushlstring(L, req->target, req->target_len);
    else if (!strcmp(key, "version"))
        lua_pushstring(L, req->minor_version ? "1.1" : "1.0");
    else if (!strcmp(key, "header"))
        lua_pushvalue(L, lua_upvalueindex(2)); /* made once, at open */
    else if (!strcmp(key, "peer"))
        return mf__req_peer(L, call);
    else if (!strcmp(key, "query") || !strcmp(key, "headers") ||
             !strcmp(key, "body")) {
        if (mf__cached(L, call, key))
            return 1;
        if (key[0] == 'q')
            mf__req_query(L, req);
        else if (key[0] == 'h')
            mf__req_headers(L, req);
        else {
            size_t len;
            const char *body = mf_http_exchange_body(call->ex, &len);
            lua_pushlstring(L, body ? body : "", len);
        }
        mf__cache(L, call, key);
    } else
        lua_pushnil(L);
    return 1;
}

/* ---- the response object ---------------------------------------------------
 */

static int mf__resp_send_body(lua_State *L, mf_serve_call_t *call, int body)
{
    if (call->sent || call->streaming)
        return luaL_error(L, "the response was already sent");
    size_t len = 0;
    const char *data =
        lua_isnoneornil(L, body) ? "" : luaL_checklstring(L, body, &len);
    mf__call_head(L, call);
    call->bytes = len;
    mf__call_send_body(call, data, len);
    return 0;
}

static int mf__resp_send(lua_State *L)
{
    mf_serve_call_t *call = mf__check_call(L, 1, 1);
    return mf__resp_send_body(L, call, 2);
}

static int mf__resp_redirect(lua_State *L)
{
    mf_serve_call_t *call = mf__check_call(L, 1, 1);
    size_t len;
    const char *url = luaL_checklstring(L, 2, &len);
    int status = (int)luaL_optinteger(L, 3, 302);
    if (status < 300 || status > 399)
        return luaL_argerror(L, 3, "a 3xx status expected");
    mf_http_exchange_add_header(call->ex, "Location", 8, url, len);
    call->status = status;
    lua_settop(L, 1);
    return mf__resp_send_body(L, call, 2);
}

/* Pushes resp.headers, creating (and anchoring) it on first use. */
static void mf__push_resp_headers(lua_State *L, mf_serve_call_t *call)
{
    if (call->headers_ref == LUA_NOREF) {
        lua_newtable(L);
        lua_pushvalue(L, -1);
        call->headers_ref = mf_lua_ref(call->w->host, L);
        return;
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, call->headers_ref);
}

static int mf__resp_set_header(lua_State *L)
{
    mf_serve_call_t *call = mf__check_call(L, 1, 1);
    luaL_checkstring(L, 2);
    mf__push_resp_headers(L, call);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_settable(L, -3);
    return 0;
}

static void mf__write_cleanup(void *op)
{
    mf_serve_call_t *call = op;
    if (call->ex)
        mf_http_exchange_on_drain(call->ex, NULL, NULL);
}

static void mf__on_drain(mf_http_exchange_t *ex, void *arg)
{
    mf_serve_call_t *call = arg;
    (void)ex;
    if (!call->co)
        return;
    mf_lua_co_unpark(call->co);
    lua_pushboolean(mf_lua_co_thread(call->co), 1);
    mf_lua_co_resume(call->co, 1);
}

/* Streams a piece (chunked). Waits (yields) while the client is slow. */
static int mf__resp_write(lua_State *L)
{
    mf_serve_call_t *call = mf__check_call(L, 1, 1);
    size_t len;
    const char *data = luaL_checklstring(L, 2, &len);
    if (call->sent)
        return luaL_error(L, "the response was already sent");
    if (!call->streaming) {
        mf__call_head(L, call);
        call->streaming = true;
    }
    call->bytes += len;
    int rc = mf_http_exchange_write(call->ex, data, len);
    if (rc < 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "closed");
        return 2;
    }
    if (rc == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    /* The running coroutine, also during its first run (before
     * mf_lua_host_spawn has returned the handle). */
    mf_lua_co_t *co = mf_lua_co_check(L);
    call->co = co;
    mf_lua_co_park(co, mf__write_cleanup, call);
    mf_http_exchange_on_drain(call->ex, mf__on_drain, call);
    return lua_yield(L, 0);
}

/* resp's properties (status, headers, sent): the fallback of its __index,
 * which finds the methods first in a table (serve.lua), without a C call. */
static int mf__resp_property(lua_State *L)
{
    mf_serve_call_t *call = mf__owned_call(mf__check_ud(L, 1, 1));
    size_t len;
    const char *key = luaL_checklstring(L, 2, &len);
    if (len == 6 && !memcmp(key, "status", 6)) {
        lua_pushinteger(L, call ? call->status : 0);
        return 1;
    }
    if (len == 7 && !memcmp(key, "headers", 7)) {
        if (!call)
            return luaL_error(L, "the request is over");
        mf__push_resp_headers(L, call);
        return 1;
    }
    if (len == 4 && !memcmp(key, "sent", 4)) {
        lua_pushboolean(L, !call || call->sent);
        return 1;
    }
    lua_pushnil(L);
    return 1;
}

static int mf__resp_newindex(lua_State *L)
{
    mf_serve_call_t *call = mf__check_call(L, 1, 1);
    const char *key = luaL_checkstring(L, 2);
    if (!strcmp(key, "status")) {
        int status = (int)luaL_checkinteger(L, 3);
        if (status < 100 || status > 999)
            return luaL_argerror(L, 3, "an HTTP status (100-999) expected");
        if (call->sent || call->streaming)
            return luaL_error(L, "the status was already sent");
        call->status = status;
        return 0;
    }
    return luaL_error(L, "resp.%s cannot be set", key);
}

void mf_serve_http_open(mf_serve_worker_t *w)
{
    lua_State *L = mf_lua_host_state(w->host);
    /* request: __index(upvalues: metatable, req:header) */
    luaL_newmetatable(L, mf__req_mt);
    lua_pushvalue(L, -1);
    lua_pushvalue(L, -1);
    lua_pushcclosure(L, mf__req_header, 1);
    lua_pushcclosure(L, mf__req_index, 2);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);

    /* response: methods(upvalue: metatable); __index from serve.lua
     * (methods, then mf__resp_property); __newindex(metatable) */
    luaL_newmetatable(L, mf__resp_mt);
    int mt = lua_gettop(L);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "moonflow.serve");
    lua_call(L, 1, 1); /* the Lua-side methods (json ...) */
    static const luaL_Reg methods[] = {{"send", mf__resp_send},
                                       {"write", mf__resp_write},
                                       {"redirect", mf__resp_redirect},
                                       {"set_header", mf__resp_set_header},
                                       {NULL, NULL}};
    lua_getfield(L, -1, "response");
    lua_pushvalue(L, mt);
    luaL_openlib(L, NULL, methods, 1);
    lua_getfield(L, -2, "index"); /* index(methods, property) */
    lua_insert(L, -2);
    lua_pushvalue(L, mt);
    lua_pushcclosure(L, mf__resp_property, 1);
    lua_call(L, 2, 1);
    lua_setfield(L, mt, "__index");
    lua_getfield(L, -1, "headers_mt");
    lua_setfield(L, LUA_REGISTRYINDEX, "moonflow.headers");
    lua_pop(L, 1);
    lua_pushvalue(L, mt);
    lua_pushcclosure(L, mf__resp_newindex, 1);
    lua_setfield(L, mt, "__newindex");
    lua_settop(L, mt - 1);
    luaL_getmetatable(L, mf__req_mt);
    w->req_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    luaL_getmetatable(L, mf__resp_mt);
    w->resp_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}
