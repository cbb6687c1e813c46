/*
 * lua/serve/request.c — the `req` object of a handler (userdata
 * "moonflow.request"): its fields (method, path, uri, version, query,
 * headers, cookies, body, peer, ctx, id) read from the exchange's parsed
 * head (or from a copy of it, kept once the exchange is gone: a client
 * that left, a route with phases that answered), the costly ones made on
 * first use and cached for the request; req:header and req:form; and
 * request ids (serve.h, request.h). Every access checks that the running
 * coroutine is the request's own (request.h).
 *
 * May call: the HTTP exchange API, the Lua host, the query-string and
 * cookie parsers of the Lua layer (moonflow/lua_uri.h).
 */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <moonflow/lua_arg.h>
#include <moonflow/lua_uri.h>

#include "request.h"

/* ---- the request id ------------------------------------------------------ */

static bool mf__id_byte_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || strchr("._~:/+=@-", c) != NULL;
}

/* The head's X-Request-Id when it is one we pass on (safe in a log line, a
 * header and JSON as it is); else NULL. */
static inline __attribute__((always_inline)) const mf_http_header_t *
mf__given_id(const mf_http_request_t *head)
{
    const mf_http_header_t *h =
        head ? mf_http_find_header_n(head->headers, head->num_headers,
                                     "x-request-id", 12)
             : NULL;
    if (!h || h->value_len == 0 || h->value_len > MF_SERVE_ID_MAX)
        return NULL;
    for (size_t k = 0; k < h->value_len; k++)
        if (!mf__id_byte_ok((unsigned char)h->value[k]))
            return NULL;
    return h;
}

/* The 8 lowercase hex digits of v into out, a nibble a byte at once: its
 * nibbles spread into the bytes of a word (the first digit in the top
 * byte), then each byte moved to '0'..'9' or 'a'..'f'. */
static void mf__hex8(uint32_t v, char *out)
{
    uint64_t x = v;
    x = (x | (x << 16)) & 0x0000FFFF0000FFFFull;
    x = (x | (x << 8)) & 0x00FF00FF00FF00FFull;
    x = (x | (x << 4)) & 0x0F0F0F0F0F0F0F0Full;
    uint64_t letters =
        ((x + 0x0606060606060606ull) >> 4) & 0x0101010101010101ull;
    x += 0x3030303030303030ull + letters * ('a' - '9' - 1);
    x = __builtin_bswap64(x); /* the top byte's digit first in memory */
    memcpy(out, &x, 8);
}

/* The worker's prefix, then the serial's 16 hex digits. */
static size_t mf__made_id(const mf_serve_worker_t *w, const char *serial_hex,
                          char *out)
{
    memcpy(out, w->id_prefix_hex, 16);
    memcpy(out + 16, serial_hex, 16);
    out[32] = '\0';
    return 32;
}

/* The worker's next serial, its hex digits counted up in place: one
 * digit changes but once in sixteen (a made id ends every answer, so it is
 * not formatted anew for each). */
static uint64_t mf__next_serial(mf_serve_worker_t *w)
{
    char *hex = w->id_serial_hex;
    for (int i = 15; i >= 0; i--) {
        if (hex[i] != 'f') {
            hex[i] = hex[i] == '9' ? 'a' : (char)(hex[i] + 1);
            break;
        }
        hex[i] = '0';
    }
    return ++w->id_serial;
}

size_t mf_serve_make_request_id(mf_serve_worker_t *w,
                                const mf_http_request_t *req, char *out)
{
    const mf_http_header_t *h = mf__given_id(req);
    if (!h) {
        mf__next_serial(w);
        return mf__made_id(w, w->id_serial_hex, out);
    }
    memcpy(out, h->value, h->value_len);
    out[h->value_len] = '\0';
    return h->value_len;
}

void mf_serve_request_id_start(mf_serve_request_t *request,
                               const mf_http_request_t *head)
{
    const mf_http_header_t *h = mf__given_id(head);
    request->serial = mf__next_serial(request->w);
    memcpy(request->serial_hex, request->w->id_serial_hex, 16);
    request->id_len = 0;
    if (h) {
        memcpy(request->id, h->value, h->value_len);
        request->id[h->value_len] = '\0';
        request->id_len = (uint8_t)h->value_len;
    }
}

void mf_serve_add_request_id(const mf_serve_worker_t *w, mf_http_exchange_t *ex,
                             const char *id)
{
    const char *name = w->config->request_id_header;
    if (!name)
        return;
    /* on every answer: joined by hand (snprintf cost 900 instructions) */
    char line[MF_SERVE_ID_HEADER_MAX + MF_SERVE_ID_MAX + 5];
    size_t nlen = strlen(name), ilen = strlen(id);
    if (nlen > MF_SERVE_ID_HEADER_MAX || ilen > MF_SERVE_ID_MAX)
        return; /* cannot be: the config and the id checks bound both */
    memcpy(line, name, nlen);
    memcpy(line + nlen, ": ", 2);
    memcpy(line + nlen + 2, id, ilen);
    memcpy(line + nlen + 2 + ilen, "\r\n", 2);
    mf_http_exchange_add_header_line(ex, line, nlen + ilen + 4);
}

void mf_serve_request_id_line_open(mf_serve_worker_t *w)
{
    const char *name = w->config->request_id_header;
    size_t nlen = name ? strlen(name) : 0;
    w->id_name_len = 0;
    mf__hex8((uint32_t)(w->id_serial >> 32), w->id_serial_hex);
    mf__hex8((uint32_t)w->id_serial, w->id_serial_hex + 8);
    if (nlen == 0 || nlen > MF_SERVE_ID_HEADER_MAX)
        return; /* "off" (the config's check bounds a name) */
    memcpy(w->id_line_head, name, nlen);
    memcpy(w->id_line_head + nlen, ": ", 2);
    memcpy(w->id_line_head + nlen + 2, w->id_prefix_hex, 16);
    w->id_name_len = (uint8_t)nlen;
}

/* The header line of an id not written yet (the serial's, made): the
 * worker's head, then the serial's digits; the id itself is written only
 * when something asks for it. Returns the line's length. */
static size_t mf__made_id_line(const mf_serve_worker_t *w,
                               const char *serial_hex, char *line)
{
    size_t head = (size_t)w->id_name_len + 2 + 16;
    /* all of it, a constant size (no length to copy by): the bytes past
     * head are written over below */
    memcpy(line, w->id_line_head, sizeof w->id_line_head);
    memcpy(line + head, serial_hex, 16);
    memcpy(line + head + 16, "\r\n", 2);
    return head + 18;
}

/* The header line of an id already in the record (given, or asked for). */
static size_t mf__written_id_line(const mf_serve_request_t *request, char *line)
{
    size_t nlen = request->w->id_name_len, ilen = request->id_len;
    memcpy(line, request->w->id_line_head, nlen + 2);
    memcpy(line + nlen + 2, request->id, ilen);
    memcpy(line + nlen + 2 + ilen, "\r\n", 2);
    return nlen + ilen + 4;
}

void mf_serve_request_add_id(mf_serve_request_t *request)
{
    if (!request->w->id_name_len)
        return; /* request_id_header = "off" */
    char *line = request->id_line;
    size_t len = request->id_len
                     ? mf__written_id_line(request, line)
                     : mf__made_id_line(request->w, request->serial_hex, line);
    mf_http_exchange_add_header_static(request->ex, line, len);
}

const char *mf_serve_request_id(mf_serve_request_t *request)
{
    if (!request->id_len)
        request->id_len =
            (uint8_t)mf__made_id(request->w, request->serial_hex, request->id);
    return request->id;
}

/* ---- the object ---------------------------------------------------------- */

/* The object at idx is ours when its metatable is the one in upvalue mt_up
 * of the running C function: a pointer compare, no registry lookup by name
 * on every call. */
mf_serve_object_t *mf_serve_check_object(lua_State *L, int idx, int mt_up)
{
    mf_serve_object_t *obj = lua_touserdata(L, idx);
    if (!obj || !lua_getmetatable(L, idx) ||
        !lua_rawequal(L, -1, lua_upvalueindex(mt_up)))
        mf_lua_type_error(L, idx, "moonflow request or response");
    lua_pop(L, 1);
    return obj;
}

/* The request obj is bound to, if the running coroutine is the one
 * handling it (or a flow callback of it): from anywhere else (a timer,
 * another request, a later request) the object is over. */
mf_serve_object_t *mf_serve_current_object(mf_serve_worker_t *w, int slot)
{
    mf_lua_co_t *co = mf_lua_host_current(w->host);
    if (!co)
        return NULL;
    mf_serve_object_t *obj = mf_lua_co_keep_ptrs(co)[slot];
    mf_serve_request_t *request = obj ? obj->request : NULL;
    /* a thread's binding lasts until it ends: the record lives till then */
    return request && (request->co == co || obj->thread) ? obj : NULL;
}

mf_serve_request_t *mf_serve_current_request(mf_serve_worker_t *w)
{
    mf_serve_object_t *obj = mf_serve_current_object(w, MF_SERVE_KEEP_REQ);
    return obj ? obj->request : NULL;
}

/* Whether the running coroutine is a thread request's code spawned. */
static __attribute__((noinline, cold)) bool
mf__in_thread_of(const mf_serve_request_t *request)
{
    const mf_serve_object_t *own =
        mf_serve_current_object(request->w, MF_SERVE_KEEP_REQ);
    return own && own->thread && own->request == request;
}

mf_serve_request_t *mf_serve_object_request(const mf_serve_object_t *obj)
{
    mf_serve_request_t *request = obj->request;
    if (!request || (!request->ex && !request->kept))
        return NULL;
    if (MF_LIKELY(request->co &&
                  mf_lua_host_current(request->w->host) == request->co))
        return request;
    return mf__in_thread_of(request) ? request : NULL;
}

static mf_serve_request_t *mf__live_request(lua_State *L,
                                            const mf_serve_object_t *obj)
{
    mf_serve_request_t *request = mf_serve_object_request(obj);
    if (!request)
        luaL_error(L, "the request is over (answered or the client left), "
                      "or this is not its handler");
    return request;
}

mf_serve_request_t *mf_serve_check_request(lua_State *L, int idx, int mt_up)
{
    return mf__live_request(L, mf_serve_check_object(L, idx, mt_up));
}

/* The worker whose loop runs on this thread (one a thread). */
_Thread_local const mf_serve_worker_t *mf_serve__thread_worker;

void mf_serve_objects_open(mf_serve_worker_t *w)
{
    mf_serve__thread_worker = w;
}

/* Whether obj is the object the running coroutine's thread keeps in slot
 * (whatever it is bound to now). */
static bool mf__is_running_kept(const void *obj, int slot)
{
    mf_lua_co_t *co = mf_serve_running_co();
    return co && obj && obj == mf_lua_co_keep_ptrs(co)[slot];
}

/* The common case first: the running coroutine's own object, bound to the
 * request it handles; then the checks of mf_serve_check_request. */
mf_serve_request_t *mf_serve_check_kept_request(lua_State *L, int slot)
{
    mf_serve_object_t *obj = lua_touserdata(L, 1);
    mf_serve_request_t *request = mf_serve_kept_request_of(obj, slot);
    if (MF_LIKELY(request))
        return request;
    if (!mf__is_running_kept(obj, slot))
        obj = mf_serve_check_object(L, 1, 1);
    return mf__live_request(L, obj);
}

/* Pushes the cached req field key and returns 1, or returns 0 (nothing
 * pushed) when it is not computed yet. The cache table is made on first
 * use: a request that reads no such field allocates none. */
static int mf__fields_get(lua_State *L, mf_serve_request_t *request,
                          const char *key)
{
    if (request->fields_ref == LUA_NOREF)
        return 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, request->fields_ref);
    lua_getfield(L, -1, key);
    lua_remove(L, -2);
    if (!lua_isnil(L, -1))
        return 1;
    lua_pop(L, 1);
    return 0;
}

/* Stores the value on top under key (and leaves it there). */
static void mf__fields_set(lua_State *L, mf_serve_request_t *request,
                           const char *key)
{
    if (request->fields_ref == LUA_NOREF) {
        lua_newtable(L);
        request->fields_ref = mf_lua_ref(request->w->host, L);
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, request->fields_ref);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, key);
    lua_pop(L, 1);
}

static int mf__req_query(lua_State *L, const mf_http_request_t *head)
{
    mf_lua_push_args(L, head->query, head->query_len, 0);
    return 1;
}

/* Every Cookie header's cookies; the first of a repeated name wins. */
static void mf__req_cookies(lua_State *L, const mf_http_request_t *head)
{
    lua_newtable(L);
    int t = lua_gettop(L);
    for (size_t i = 0; i < head->num_headers; i++) {
        const mf_http_header_t *h = &head->headers[i];
        if (h->name_len == 6 && !strncasecmp(h->name, "cookie", 6))
            mf_lua_cookies_add(L, t, h->value, h->value_len);
    }
}

static int mf__req_headers(lua_State *L, const mf_http_request_t *head)
{
    char name[256];
    lua_createtable(L, 0, (int)head->num_headers);
    int t = lua_gettop(L);
    for (size_t i = 0; i < head->num_headers; i++) {
        const mf_http_header_t *h = &head->headers[i];
        size_t n = h->name_len < sizeof name ? h->name_len : sizeof name;
        for (size_t k = 0; k < n; k++)
            name[k] =
                (char)(h->name[k] |
                       ((h->name[k] >= 'A' && h->name[k] <= 'Z') ? 0x20 : 0));
        lua_pushlstring(L, name, n);
        lua_pushlstring(L, h->value, h->value_len);
        mf_lua_args_add(L, t);
    }
    luaL_getmetatable(L, "moonflow.headers"); /* case-insensitive reads */
    lua_setmetatable(L, t);
    return 1;
}

/* The request's parsed head, body and peer: the exchange's while it
 * lives, then the copy mf_serve_request_keep made. */
static const mf_http_request_t *mf__head(const mf_serve_request_t *request)
{
    return request->ex ? mf_http_exchange_request(request->ex)
                       : &request->kept_head->head;
}

static const char *mf__body(const mf_serve_request_t *request, size_t *len)
{
    if (request->ex)
        return mf_http_exchange_body(request->ex, len);
    *len = request->kept_head->body_len;
    return request->kept_head->body;
}

static const mf_sockaddr_t *mf__peer(const mf_serve_request_t *request)
{
    return request->ex ? mf_http_exchange_peer(request->ex)
                       : &request->kept_head->peer;
}

const mf_sockaddr_t *mf_serve_request_peer(const mf_serve_request_t *request)
{
    return mf__peer(request);
}

int mf_serve_req_header(lua_State *L)
{
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
    const char *name = mf_lua_check_string(L, 2);
    const mf_http_request_t *head = mf__head(request);
    const mf_http_header_t *h =
        mf_http_find_header(head->headers, head->num_headers, name);
    if (!h)
        return 0;
    lua_pushlstring(L, h->value, h->value_len);
    return 1;
}

/* req:form([max]): the body as a form (moonflow/lua_uri.h), or nil, err. */
int mf_serve_req_form(lua_State *L)
{
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
    lua_Integer max = mf_lua_opt_integer(L, 2, 100);
    mf_lua_arg_check(L, max >= 0 && max <= 1000000, 2, "a count of fields");
    const mf_http_request_t *head = mf__head(request);
    const mf_http_header_t *type =
        mf_http_find_header(head->headers, head->num_headers, "Content-Type");
    size_t len;
    const char *body = mf__body(request, &len);
    return mf_lua_push_form(L, type ? type->value : NULL,
                            type ? type->value_len : 0, body ? body : "", len,
                            (unsigned)max);
}

static int mf__req_peer(lua_State *L, mf_serve_request_t *request)
{
    char addr[64];
    mf_sockaddr_format(mf__peer(request), addr, sizeof addr);
    lua_pushstring(L, addr);
    return 1;
}

/* Past the blank line that ends the head (the parser's strings point into
 * its buffer, and a kept head copies it up to there): after the last field
 * (or the request line), at most whitespace, then two line ends in a row
 * ("\n\n" or "\n\r\n"). NULL cannot be: the parser saw that line. */
static const char *mf__head_end(const mf_http_request_t *head)
{
    const char *p = head->target + head->target_len;
    if (head->num_headers) {
        const mf_http_header_t *last = &head->headers[head->num_headers - 1];
        p = last->value_len ? last->value + last->value_len
                            : last->name + last->name_len;
    }
    for (const char *q = p; q < p + 8192; q++)
        if (q[0] == '\n' && (q[1] == '\n' || (q[1] == '\r' && q[2] == '\n')))
            return q + (q[1] == '\n' ? 2 : 3);
    return NULL;
}

/* The head as the client sent it, from its request line to its blank
 * line. */
static int mf__req_raw_header(lua_State *L, const mf_http_request_t *head)
{
    const char *end = mf__head_end(head);
    if (!end)
        return luaL_error(L, "req.raw_header: the head's end is not found");
    lua_pushlstring(L, head->method, (size_t)(end - head->method));
    return 1;
}

/* req.start_time: the request's start in seconds since the epoch, to the
 * millisecond (the loop's time then, moved onto the wall clock now). */
static double mf__request_start_time(const mf_serve_request_t *request)
{
    struct timespec real;
    clock_gettime(CLOCK_REALTIME, &real);
    uint64_t mono_ns = mf_monotonic_ns();
    uint64_t start_ns = request->start_ms * 1000000u;
    int64_t ago = mono_ns > start_ns ? (int64_t)(mono_ns - start_ns) : 0;
    int64_t real_ns = (int64_t)real.tv_sec * 1000000000 + real.tv_nsec;
    return (double)((real_ns - ago) / 1000000) / 1000.0;
}

/* "ip:port" the request came in on: the listening address's host (the
 * wildcard when it listens on every address) and the port it is bound to. */
static int mf__req_server_addr(lua_State *L, mf_serve_request_t *request)
{
    const char *listen = request->w->config->http.listen;
    const char *colon = listen ? strrchr(listen, ':') : NULL;
    size_t hlen = colon ? (size_t)(colon - listen) : 0;
    uint16_t port =
        request->ex ? mf_http_server_port(mf_http_exchange_server(request->ex))
                    : request->kept_head->port;
    char addr[80];
    if (hlen == 0 || hlen > 64)
        snprintf(addr, sizeof addr, "0.0.0.0:%u", (unsigned)port);
    else
        snprintf(addr, sizeof addr, "%.*s:%u", (int)hlen, listen,
                 (unsigned)port);
    lua_pushstring(L, addr);
    return 1;
}

/* req[key] (the key at index key) from the exchange's head. */
static int mf__req_field(lua_State *L, mf_serve_request_t *request, int keyidx)
{
    const mf_http_request_t *head = mf__head(request);
    const char *key = lua_tostring(L, keyidx);
    if (!strcmp(key, "method"))
        lua_pushlstring(L, head->method, head->method_len);
    else if (!strcmp(key, "path"))
        lua_pushlstring(L, head->path, head->path_len);
    else if (!strcmp(key, "uri"))
        lua_pushlstring(L, head->target, head->target_len);
    else if (!strcmp(key, "version"))
        lua_pushstring(L, head->http2           ? "2.0"
                          : head->minor_version ? "1.1"
                                                : "1.0");
    else if (!strcmp(key, "header"))
        lua_pushvalue(L, lua_upvalueindex(2)); /* made once, at open */
    else if (!strcmp(key, "form"))
        lua_pushvalue(L, lua_upvalueindex(3));
    else if (!strcmp(key, "peer"))
        return mf__req_peer(L, request);
    else if (!strcmp(key, "id"))
        lua_pushstring(L, mf_serve_request_id(request));
    else if (!strcmp(key, "socket")) { /* downstream.c */
        lua_pushvalue(L, lua_upvalueindex(1));
        lua_pushcclosure(L, mf_serve_req_socket, 1);
    } else if (!strcmp(key, "websocket")) { /* websocket.c */
        lua_pushvalue(L, lua_upvalueindex(1));
        lua_pushcclosure(L, mf_serve_req_websocket, 1);
    } else if (!strcmp(key, "trailers")) { /* trailers.c */
        lua_pushvalue(L, lua_upvalueindex(1));
        lua_pushcclosure(L, mf_serve_req_trailers, 1);
    } else if (!strcmp(key, "query") || !strcmp(key, "headers") ||
               !strcmp(key, "body") || !strcmp(key, "ctx") ||
               !strcmp(key, "cookies")) {
        if (mf__fields_get(L, request, key))
            return 1;
        if (!strcmp(key, "ctx"))
            lua_newtable(L); /* the request's own table, for the script */
        else if (!strcmp(key, "cookies"))
            mf__req_cookies(L, head);
        else if (key[0] == 'q')
            mf__req_query(L, head);
        else if (key[0] == 'h')
            mf__req_headers(L, head);
        else {
            size_t len;
            const char *body = mf__body(request, &len);
            lua_pushlstring(L, body ? body : "", len);
        }
        mf__fields_set(L, request, key);
    } else if (!strcmp(key, "raw_header")) /* rarer: after the cached ones */
        return mf__req_raw_header(L, head);
    else if (!strcmp(key, "start_time"))
        lua_pushnumber(L, mf__request_start_time(request));
    else if (!strcmp(key, "server_addr"))
        return mf__req_server_addr(L, request);
    else if (!strcmp(key, "scheme"))
        lua_pushstring(L, request->w->config->http.tls.cert_file ? "https"
                                                                 : "http");
    else
        lua_pushnil(L);
    return 1;
}

/* [start, end): the bytes of the head's buffer its pointers reach (a
 * pointer outside, as the "/" of an absolute-form target without a path,
 * is a literal of the parser's and stays as it is). */
static void mf__head_span(const mf_http_request_t *h, const char **start,
                          const char **end)
{
    const char *s = h->method, *e = h->target + h->target_len;
    for (size_t i = 0; i < h->num_headers; i++) {
        const char *v = h->headers[i].value + h->headers[i].value_len;
        const char *n = h->headers[i].name + h->headers[i].name_len;
        e = v > e ? v : e;
        e = n > e ? n : e;
    }
    *start = s;
    *end = e;
}

static const char *mf__rebase(const char *p, const char *start, const char *end,
                              const char *to)
{
    return p && p >= start && p <= end ? to + (p - start) : p;
}

void mf_serve_request_keep(mf_serve_request_t *request)
{
    if (request->kept || !request->ex)
        return;
    const mf_http_request_t *h = mf_http_exchange_request(request->ex);
    const char *start, *end;
    size_t body_len;
    const char *body = mf_http_exchange_body(request->ex, &body_len);
    mf__head_span(h, &start, &end);
    const char *head_end = mf__head_end(h); /* req.raw_header reads to it */
    if (head_end > end)
        end = head_end;
    size_t span = (size_t)(end - start);
    size_t hsize = h->num_headers * sizeof(mf_http_header_t);
    mf_serve_kept_head_t *k =
        mf_xmalloc(sizeof(*k) + hsize + span + body_len + 1);
    mf_http_header_t *headers = (mf_http_header_t *)(k + 1);
    char *bytes = (char *)headers + hsize;
    memcpy(bytes, start, span);
    if (body_len)
        memcpy(bytes + span, body, body_len);
    k->head = *h;
    k->head.headers = headers;
    k->head.method = mf__rebase(h->method, start, end, bytes);
    k->head.target = mf__rebase(h->target, start, end, bytes);
    k->head.path = mf__rebase(h->path, start, end, bytes);
    k->head.query = mf__rebase(h->query, start, end, bytes);
    k->head.host = mf__rebase(h->host, start, end, bytes);
    for (size_t i = 0; i < h->num_headers; i++) {
        headers[i] = h->headers[i];
        headers[i].name = mf__rebase(h->headers[i].name, start, end, bytes);
        headers[i].value = mf__rebase(h->headers[i].value, start, end, bytes);
    }
    k->body = bytes + span;
    k->body_len = body_len;
    k->peer = *mf_http_exchange_peer(request->ex);
    k->port = mf_http_server_port(mf_http_exchange_server(request->ex));
    request->kept_head = k;
    request->kept = request->extras = true; /* extras: freed at the end */
}

int mf_serve_req_index(lua_State *L)
{
    mf_serve_request_t *request =
        mf_serve_check_kept_request(L, MF_SERVE_KEEP_REQ);
    mf_lua_check_string(L, 2);
    return mf__req_field(L, request, 2);
}
