/*
 * lua/serve/downstream.c — the downstream socket of a handler (userdata
 * "moonflow.downstream"): req:socket() reads the request body as a stream,
 * req:socket(true) sends the response head and hands the connection over
 * (WebSocket and other upgrades). OpenResty's ngx.req.socket, with its
 * methods: receive("*l" | "*a" | n), receiveuntil(pattern [, {inclusive =
 * bool}]) and its iterator (with the size argument), send (raw only),
 * settimeout, settimeouts, close.
 *
 * The bytes come from the exchange (mf_http_exchange_read): a body read
 * before the handler from memory, a streamed one (a route with body =
 * "stream") through the connection's window, so a receive copies at most
 * what it needs plus one read into the socket's buffer and memory stays
 * flat however long the body. A receive that needs more waits for the
 * exchange's readable call (or its read timeout: nil, "timeout", partial;
 * the socket stays usable). The server's body limits hold: a body past
 * max_body or with bad chunks, or one that comes too slowly, fails the
 * receive ("body too large", "bad body", "timeout") and the client hears
 * 413, 400 or 408 unless the handler's answer had begun.
 *
 * The handler's coroutine and the Lua threads it spawns may use the
 * socket while the request lasts (then it answers "closed"): one receive
 * and one send may wait at a time, in two threads (a WebSocket server
 * reading in one and sending in the other). A reader left parked when the
 * request ends wakes at its timeout with "closed". After req:socket(true)
 * the request counts as streaming for handler.c: its end sends nothing
 * more, and the server closes the connection.
 *
 * May call: the HTTP exchange API, the Lua host, request.h.
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include <moonflow/lua_arg.h>
#include <moonflow/lua_co.h>
#include <moonflow/lua_host.h>

#include "request.h"

#define MF_DS_MT "moonflow.downstream"
/* The registry's table of the socket each req object made last (weak
 * values): a second req:socket() of a request gets the same socket, with
 * the bytes it has buffered. */
#define MF_DS_MADE "moonflow.downstream.made"
/* Room made for each read from the exchange. */
#define MF_DS_CHUNK (16 * 1024)
/* The read timeout of a raw socket when none is set (OpenResty's). */
#define MF_DS_RAW_TIMEOUT_MS 60000
#define MF_DS_WAIT (-1)

typedef enum mf_ds_mode {
    MF_DS_LINE,  /* "*l" */
    MF_DS_ALL,   /* "*a" */
    MF_DS_BYTES, /* n */
    MF_DS_UNTIL  /* receiveuntil's iterator */
} mf_ds_mode_t;

typedef struct mf_ds {
    mf_serve_object_t *req;      /* the handler thread's req object */
    mf_serve_request_t *request; /* valid while req->request is it */
    uint64_t serial;             /* and has this serial */
    mf_loop_t *loop;
    mf_lua_co_t *rd, *wr; /* parked on a receive, on a send */
    mf_timer_t timer;     /* a parked receive's timeout */
    uint32_t read_ms;
    bool raw;
    bool closed; /* sock:close() */
    bool eof;    /* the body (or the connection) ended */
    size_t sent; /* a parked send's bytes */
    /* the receive buffer: bytes [start, end) of cap */
    char *buf;
    size_t cap, start, end;
    /* the receive running */
    mf_ds_mode_t mode;
    size_t want;    /* BYTES: bytes; UNTIL sized: the most per call */
    size_t scanned; /* LINE/UNTIL: bytes from start known not to match */
    const char *pat;
    size_t patlen;
    bool inclusive, sized, boundary;
} mf_ds_t;

/* ---- the socket's request --------------------------------------------------
 */

/* The exchange of the socket's request while the request lasts. */
static mf_http_exchange_t *mf__ds_live(const mf_ds_t *s)
{
    return mf_serve_request_live(s->req, s->request, s->serial);
}

/* The same for a call from Lua: not after sock:close(). Any Lua thread of
 * the request may call (a WebSocket server reads in one and sends in
 * another, as in OpenResty). */
static mf_http_exchange_t *mf__ds_exchange(const mf_ds_t *s)
{
    return s->closed ? NULL : mf__ds_live(s);
}

static int mf__ds_fail(lua_State *L, const char *err)
{
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
}

static const char *mf__ds_errstr(ssize_t code)
{
    switch (code) {
    case MF_EMSGSIZE:
        return "body too large";
    case MF_EPROTO:
        return "bad body";
    case MF_ETIMEDOUT:
        return "timeout";
    case MF_ENOMEM:
        return "no memory";
    default:
        return "closed";
    }
}

/* ---- matching what is buffered ---------------------------------------------
 */

static void mf__ds_consume(mf_ds_t *s, size_t n)
{
    s->start += n;
    s->scanned = 0;
    if (s->start == s->end)
        s->start = s->end = 0;
}

static void mf__ds_push(lua_State *L, mf_ds_t *s, size_t n)
{
    lua_pushlstring(L, n ? s->buf + s->start : "", n);
    mf__ds_consume(s, n);
}

/* "*l": up to \n, without it and a \r before it. */
static int mf__ds_line(lua_State *L, mf_ds_t *s)
{
    const char *p = s->buf + s->start;
    size_t avail = s->end - s->start;
    const char *nl = avail > s->scanned
                         ? memchr(p + s->scanned, '\n', avail - s->scanned)
                         : NULL;
    if (!nl) {
        s->scanned = avail;
        return MF_DS_WAIT;
    }
    size_t len = (size_t)(nl - p), n = len;
    if (n > 0 && p[n - 1] == '\r')
        n--;
    lua_pushlstring(L, p, n);
    mf__ds_consume(s, len + 1);
    return 1;
}

/* receiveuntil's iterator: the bytes before the pattern (and the pattern
 * when inclusive), or with a size at most that many each call and nil
 * once the pattern is reached (the pattern alone last when inclusive). */
static int mf__ds_until(lua_State *L, mf_ds_t *s)
{
    if (s->boundary) {
        s->boundary = false;
        lua_pushnil(L);
        return 1;
    }
    const char *p = s->buf + s->start;
    size_t avail = s->end - s->start;
    const char *hit =
        avail >= s->patlen && avail > s->scanned
            ? memmem(p + s->scanned, avail - s->scanned, s->pat, s->patlen)
            : NULL;
    if (!hit) {
        /* a match may start in the last patlen - 1 bytes */
        s->scanned = avail >= s->patlen ? avail - s->patlen + 1 : 0;
        if (s->sized && s->scanned >= s->want) {
            mf__ds_push(L, s, s->want);
            return 1;
        }
        return MF_DS_WAIT;
    }
    size_t pos = (size_t)(hit - p);
    if (!s->sized) {
        lua_pushlstring(L, p, pos + (s->inclusive ? s->patlen : 0));
        mf__ds_consume(s, pos + s->patlen);
    } else if (pos > 0) {
        mf__ds_push(L, s, pos < s->want ? pos : s->want);
    } else if (s->inclusive) {
        mf__ds_push(L, s, s->patlen);
        s->boundary = true;
    } else {
        mf__ds_consume(s, s->patlen);
        lua_pushnil(L);
    }
    return 1;
}

static int mf__ds_match(lua_State *L, mf_ds_t *s)
{
    switch (s->mode) {
    case MF_DS_LINE:
        return mf__ds_line(L, s);
    case MF_DS_BYTES:
        if (s->end - s->start < s->want)
            return MF_DS_WAIT;
        mf__ds_push(L, s, s->want);
        return 1;
    case MF_DS_UNTIL:
        return mf__ds_until(L, s);
    default: /* "*a" waits for the end */
        return MF_DS_WAIT;
    }
}

/* The receive ends without its answer: "*a" at the end answers what came;
 * anything else nil, err and the bytes buffered (consumed). */
static int mf__ds_end(lua_State *L, mf_ds_t *s, const char *err)
{
    if (s->mode == MF_DS_ALL && s->eof && !strcmp(err, "closed")) {
        mf__ds_push(L, s, s->end - s->start);
        return 1;
    }
    lua_pushnil(L);
    lua_pushstring(L, err);
    mf__ds_push(L, s, s->end - s->start);
    return 3;
}

/* ---- reading ---------------------------------------------------------------
 */

/* A body the server refused is answered by the server (413, 400, 408)
 * unless the handler's answer had begun: the access line, the metrics and
 * the route's log phase say that status too, whatever the handler does
 * next (answers, sets another status, raises). */
static void mf__ds_refused(mf_ds_t *s, ssize_t code)
{
    mf_serve_request_t *request = s->request;
    if (request->sent || request->streaming)
        return;
    if (code == MF_EMSGSIZE)
        request->status = 413;
    else if (code == MF_EPROTO)
        request->status = 400;
    else if (code == MF_ETIMEDOUT)
        request->status = 408;
    else
        return;
    request->refused = true;
}

/* Room for one read: buffered bytes moved to the front, then more. */
static bool mf__ds_room(mf_ds_t *s)
{
    if (s->start > 0 && s->cap - s->end < MF_DS_CHUNK) {
        memmove(s->buf, s->buf + s->start, s->end - s->start);
        s->end -= s->start;
        s->start = 0;
    }
    if (s->cap - s->end >= MF_DS_CHUNK)
        return true;
    size_t cap = s->cap ? s->cap * 2 : MF_DS_CHUNK;
    while (cap - s->end < MF_DS_CHUNK)
        cap *= 2;
    char *buf = realloc(s->buf, cap);
    if (!buf)
        return false;
    s->buf = buf;
    s->cap = cap;
    return true;
}

/* Reads until the receive has its answer: the count of results pushed on
 * L, or MF_DS_WAIT when the exchange has nothing more yet. */
static int mf__ds_run(lua_State *L, mf_ds_t *s, mf_http_exchange_t *ex)
{
    for (;;) {
        int r = mf__ds_match(L, s);
        if (r != MF_DS_WAIT)
            return r;
        if (s->eof || !ex)
            return mf__ds_end(L, s, "closed");
        if (!mf__ds_room(s))
            return mf__ds_end(L, s, "no memory");
        ssize_t n = mf_http_exchange_read(ex, s->buf + s->end, s->cap - s->end);
        if (n == MF_EAGAIN)
            return MF_DS_WAIT;
        if (n < 0) {
            mf__ds_refused(s, n);
            return mf__ds_end(L, s, mf__ds_errstr(n));
        }
        if (n == 0)
            s->eof = true;
        s->end += (size_t)n;
    }
}

/* The parked coroutine *side goes on with the n values on its thread. */
static void mf__ds_resume(mf_lua_co_t **side, int n)
{
    mf_lua_co_t *co = *side;
    *side = NULL;
    mf_lua_co_unpark(co);
    mf_lua_co_resume(co, n);
}

static void mf__ds_on_readable(mf_http_exchange_t *ex, void *arg)
{
    mf_ds_t *s = arg;
    if (!s->rd)
        return;
    int n = mf__ds_run(mf_lua_co_thread(s->rd), s, ex);
    if (n == MF_DS_WAIT) {
        mf_http_exchange_on_readable(ex, mf__ds_on_readable, s);
        return;
    }
    mf_timer_stop(s->loop, &s->timer);
    mf__ds_resume(&s->rd, n);
}

/* A receive waited past the read timeout; a reader whose request ended
 * meanwhile (a thread of the handler's) wakes here too. */
static void mf__ds_on_timeout(mf_timer_t *timer)
{
    mf_ds_t *s = timer->data;
    if (!s->rd)
        return;
    mf_http_exchange_t *ex = mf__ds_live(s);
    if (ex)
        mf_http_exchange_on_readable(ex, NULL, NULL);
    int n = mf__ds_end(mf_lua_co_thread(s->rd), s, ex ? "timeout" : "closed");
    mf__ds_resume(&s->rd, n);
}

/* A parked coroutine was aborted (handler timeout, shutdown, client gone):
 * nothing may call it back. */
static void mf__ds_cleanup_rd(void *op)
{
    mf_ds_t *s = op;
    s->rd = NULL;
    mf_timer_stop(s->loop, &s->timer);
    mf_http_exchange_t *ex = mf__ds_live(s);
    if (ex)
        mf_http_exchange_on_readable(ex, NULL, NULL);
}

static void mf__ds_cleanup_wr(void *op)
{
    mf_ds_t *s = op;
    s->wr = NULL;
    mf_http_exchange_t *ex = mf__ds_live(s);
    if (ex)
        mf_http_exchange_on_drain(ex, NULL, NULL);
}

/* Runs the receive set up in s: its results, or parks until they come. */
static int mf__ds_receive(lua_State *L, mf_ds_t *s, mf_http_exchange_t *ex)
{
    int n = mf__ds_run(L, s, ex);
    if (n != MF_DS_WAIT)
        return n;
    s->rd = mf_lua_co_check(L);
    mf_lua_co_park(s->rd, mf__ds_cleanup_rd, s);
    mf_http_exchange_on_readable(ex, mf__ds_on_readable, s);
    mf_timer_start(s->loop, &s->timer, s->read_ms);
    return lua_yield(L, 0);
}

/* ---- methods ---------------------------------------------------------------
 */

static mf_ds_t *mf__ds_check(lua_State *L, int idx)
{
    return mf_lua_check_udata(L, idx, MF_DS_MT);
}

/* sock:receive([pattern]): "*l" (the default), "*a" or a byte count. */
static int mf__ds_receive_method(lua_State *L)
{
    mf_ds_t *s = mf__ds_check(L, 1);
    mf_ds_mode_t mode;
    size_t want = 0;
    if (lua_type(L, 2) == LUA_TNUMBER) {
        lua_Number n = lua_tonumber(L, 2);
        if (!(n >= 0 && n <= 1e15))
            return mf_lua_arg_error(L, 2, "a byte count >= 0 expected");
        mode = MF_DS_BYTES;
        want = (size_t)n;
    } else {
        const char *pat = mf_lua_opt_string(L, 2, "*l");
        if (!strcmp(pat, "*l") || !strcmp(pat, "l"))
            mode = MF_DS_LINE;
        else if (!strcmp(pat, "*a") || !strcmp(pat, "a"))
            mode = MF_DS_ALL;
        else
            return mf_lua_arg_error(L, 2, "\"*l\", \"*a\" or a count expected");
    }
    mf_http_exchange_t *ex = mf__ds_exchange(s);
    if (!ex)
        return mf__ds_fail(L, "closed");
    if (s->rd)
        return mf__ds_fail(L, "socket busy reading");
    if (mode == MF_DS_BYTES && want == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    s->mode = mode;
    s->want = want;
    s->scanned = 0;
    return mf__ds_receive(L, s, ex);
}

/* The iterator of receiveuntil: upvalues the socket, the pattern,
 * inclusive. The pattern stays alive while it runs (its upvalue). */
static int mf__ds_iterate(lua_State *L)
{
    mf_ds_t *s = mf__ds_check(L, lua_upvalueindex(1));
    bool sized = !lua_isnoneornil(L, 1);
    lua_Integer size = sized ? mf_lua_check_integer(L, 1) : 0;
    if (sized && size < 1)
        return mf_lua_arg_error(L, 1, "a size of at least 1 expected");
    mf_http_exchange_t *ex = mf__ds_exchange(s);
    if (!ex)
        return mf__ds_fail(L, "closed");
    if (s->rd)
        return mf__ds_fail(L, "socket busy reading");
    s->mode = MF_DS_UNTIL;
    s->sized = sized;
    s->want = (size_t)size;
    s->pat = lua_tolstring(L, lua_upvalueindex(2), &s->patlen);
    s->inclusive = lua_toboolean(L, lua_upvalueindex(3));
    s->scanned = 0;
    return mf__ds_receive(L, s, ex);
}

/* sock:receiveuntil(pattern [, {inclusive = bool}]): an iterator. */
static int mf__ds_receiveuntil(lua_State *L)
{
    mf__ds_check(L, 1);
    size_t plen;
    mf_lua_check_lstring(L, 2, &plen);
    if (plen == 0)
        return mf_lua_arg_error(L, 2, "a pattern that is not empty expected");
    bool inclusive = false;
    if (!lua_isnoneornil(L, 3)) {
        mf_lua_check_type(L, 3, LUA_TTABLE);
        lua_getfield(L, 3, "inclusive");
        if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TBOOLEAN)
            return mf_lua_arg_error(L, 3, "inclusive: a boolean expected");
        inclusive = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    lua_settop(L, 2);
    lua_pushboolean(L, inclusive);
    lua_pushcclosure(L, mf__ds_iterate, 3);
    return 1;
}

static void mf__ds_on_drain(mf_http_exchange_t *ex, void *arg)
{
    mf_ds_t *s = arg;
    (void)ex;
    if (!s->wr)
        return;
    /* queued: sent as far as the socket goes (a closed connection fails
     * the next call) */
    lua_pushinteger(mf_lua_co_thread(s->wr), (lua_Integer)s->sent);
    mf__ds_resume(&s->wr, 1);
}

/* sock:send(data): raw sockets only; the bytes sent, or nil, err. Waits
 * while the client reads slowly. */
static int mf__ds_send(lua_State *L)
{
    mf_ds_t *s = mf__ds_check(L, 1);
    size_t len;
    const char *data = mf_lua_check_lstring(L, 2, &len);
    mf_http_exchange_t *ex = mf__ds_exchange(s);
    if (!ex)
        return mf__ds_fail(L, "closed");
    if (!s->raw)
        return mf__ds_fail(L, "not a raw socket (req:socket(true))");
    if (s->wr)
        return mf__ds_fail(L, "socket busy writing");
    int rc = mf_http_exchange_write(ex, data, len);
    if (rc < 0)
        return mf__ds_fail(L, "closed");
    s->request->bytes += len;
    if (rc == 0) {
        lua_pushinteger(L, (lua_Integer)len);
        return 1;
    }
    s->wr = mf_lua_co_check(L);
    s->sent = len;
    mf_lua_co_park(s->wr, mf__ds_cleanup_wr, s);
    mf_http_exchange_on_drain(ex, mf__ds_on_drain, s);
    return lua_yield(L, 0);
}

static uint32_t mf__ds_timeout_arg(lua_State *L, int idx, uint32_t keep)
{
    if (lua_isnoneornil(L, idx))
        return keep;
    lua_Number ms = mf_lua_check_number(L, idx);
    if (!(ms >= 0 && ms <= 86400000.0))
        mf_lua_arg_error(L, idx, "milliseconds expected");
    return ms >= 1 ? (uint32_t)ms : keep;
}

/* sock:settimeout(ms): the read timeout (the server's write timeout bounds
 * a stalled send). */
static int mf__ds_settimeout(lua_State *L)
{
    mf_ds_t *s = mf__ds_check(L, 1);
    s->read_ms = mf__ds_timeout_arg(L, 2, s->read_ms);
    return 0;
}

/* sock:settimeouts(connect, send, read): only read applies here. */
static int mf__ds_settimeouts(lua_State *L)
{
    mf_ds_t *s = mf__ds_check(L, 1);
    s->read_ms = mf__ds_timeout_arg(L, 4, s->read_ms);
    return 0;
}

/* sock:close(): no more use of the socket; the connection itself ends
 * with the handler. */
static int mf__ds_close(lua_State *L)
{
    mf_ds_t *s = mf__ds_check(L, 1);
    if (s->closed)
        return mf__ds_fail(L, "closed");
    s->closed = true;
    lua_pushinteger(L, 1);
    return 1;
}

static int mf__ds_gc(lua_State *L)
{
    mf_ds_t *s = lua_touserdata(L, 1);
    free(s->buf);
    s->buf = NULL;
    return 0;
}

/* ---- req:socket ------------------------------------------------------------
 */

static int mf__ds_new(lua_State *L, mf_serve_request_t *request, bool raw)
{
    mf_ds_t *s = lua_newuserdata(L, sizeof(*s));
    memset(s, 0, sizeof(*s));
    luaL_getmetatable(L, MF_DS_MT);
    lua_setmetatable(L, -2);
    s->req = request->req;
    s->request = request;
    s->serial = request->serial;
    s->raw = raw;
    s->loop = request->w->loop;
    uint32_t body_ms = request->w->config->http.body_timeout_ms;
    s->read_ms = raw || !body_ms ? MF_DS_RAW_TIMEOUT_MS : body_ms;
    mf_timer_init(&s->timer, mf__ds_on_timeout, s);
    return 1;
}

/* The socket the req object at 1 made for this request, pushed (its raw
 * flag in *raw), or false pushed. Compares without reading the socket's
 * record of an older request. */
static bool mf__ds_made(lua_State *L, mf_serve_request_t *request, bool *raw)
{
    lua_getfield(L, LUA_REGISTRYINDEX, MF_DS_MADE);
    lua_pushvalue(L, 1);
    lua_rawget(L, -2);
    lua_remove(L, -2);
    mf_ds_t *s = luaL_testudata(L, -1, MF_DS_MT);
    if (s && s->request == request && s->serial == request->serial) {
        *raw = s->raw;
        return true;
    }
    lua_pop(L, 1);
    lua_pushboolean(L, 0);
    return false;
}

/* Remembers the socket on top for the req object at 1. */
static int mf__ds_remember(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, MF_DS_MADE);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, -3);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    return 1;
}

/* req:socket([raw]) — upvalue 1: the request metatable. */
int mf_serve_req_socket(lua_State *L)
{
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
    bool raw = lua_toboolean(L, 2), made_raw = false;
    if (mf__ds_made(L, request, &made_raw) && (made_raw || !raw))
        return 1; /* the same socket again */
    lua_pop(L, 1);
    if (!raw) {
        const mf_http_request_t *head = mf_http_exchange_request(request->ex);
        if (head->body == MF_HTTP_BODY_NONE)
            return mf__ds_fail(L, "no body");
        mf__ds_new(L, request, false);
        return mf__ds_remember(L);
    }
    if (request->sent || request->streaming)
        return mf__ds_fail(L, "the response head was already sent");
    if (mf_serve_request_set_head(L, request) < 0)
        return mf__ds_fail(L, "the response head cannot be sent");
    int rc = mf_http_exchange_upgrade(request->ex);
    if (rc == MF_EBUSY)
        return mf__ds_fail(L, "the request body is not read yet");
    if (rc == MF_ENOSYS)
        return mf__ds_fail(L, "no raw connection over HTTP/2");
    if (rc < 0)
        return mf__ds_fail(L, rc == MF_ECLOSED ? "closed"
                                               : "the response head cannot "
                                                 "be sent");
    request->streaming = true; /* the head is out: the end sends nothing */
    mf__ds_new(L, request, true);
    return mf__ds_remember(L);
}

void mf_serve_downstream_open(mf_serve_worker_t *w)
{
    lua_State *L = mf_lua_host_state(w->host);
    static const luaL_Reg methods[] = {
        {"receive sock:receive([pattern])", mf__ds_receive_method},
        {"receiveuntil sock:receiveuntil(pattern [, options])",
         mf__ds_receiveuntil},
        {"send sock:send(data)", mf__ds_send},
        {"settimeout sock:settimeout(ms)", mf__ds_settimeout},
        {"settimeouts sock:settimeouts(connect, send, read)",
         mf__ds_settimeouts},
        {"close sock:close()", mf__ds_close},
        {NULL, NULL}};
    luaL_newmetatable(L, MF_DS_MT);
    lua_newtable(L);
    mf_lua_register(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, mf__ds_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    lua_newtable(L);
    lua_newtable(L);
    lua_pushliteral(L, "v");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, MF_DS_MADE);
}

bool mf_serve_downstream_stream_body(const mf_http_request_t *req, void *worker)
{
    mf_serve_worker_t *w = worker;
    return mf_serve_routes_stream_body(w->routes, req->path, req->path_len);
}
