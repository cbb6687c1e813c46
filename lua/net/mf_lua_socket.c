/*
 * lua/net/mf_lua_socket.c — the module moonflow.socket: OpenResty's cosockets
 * (mf.socket.tcp(), ngx.socket.tcp through moonflow.ngx) on moonflow's
 * streams (moonflow/stream.h): connect, sslhandshake, send, settimeout,
 * settimeouts, setkeepalive, getreusedtimes, close; receive and
 * receiveuntil are mf_lua_socket_recv.c's, the UDP object
 * mf_lua_socket_udp.c's.
 *
 * Every wait parks the calling coroutine (a plain coroutine too, through
 * mf_lua_co_check) and yields; the stream's callback pushes the results
 * and resumes it. Operational failures return nil and OpenResty's words
 * ("timeout", "closed", "connection refused" ...); misuse raises. A
 * failure other than a read timeout closes the connection, as there.
 *
 * Owns the socket records (mf_lua_socket.h) and their streams. A socket
 * that is still open when the coroutine that connected it ends (a
 * handler, a timer, a Lua thread) is closed then; one whose object is
 * collected is closed by the collector.
 */
#include <stdlib.h>
#include <string.h>

#include <moonflow/lua_arg.h>
#include <moonflow/error.h>

#include "mf_lua_socket.h"

#define MF_LUA_SOCK_MAX_BUFFER ((size_t)1 << 30)
#define MF_LUA_SOCK_MAX_NESTING 32

/* ---- the record ---------------------------------------------------------- */

static void mf_lua__sock_free_if_unused(mf_lua_sock_t *s)
{
    if (!s->collected || s->rd.pending || s->wr.pending)
        return;
    mf_lua_sock_free_buffers(s);
    mf_loop_free(s->loop, s, sizeof *s);
}

void mf_lua_sock_close_stream(mf_lua_sock_t *s)
{
    if (s->stream)
        mf_stream_close(s->stream);
    s->stream = NULL;
    s->start = s->end = s->scanned = 0;
    s->boundary = false;
    mf_lua_owned_drop(&s->owned);
    /* buffers back to the loop now, not at the next collection: a handler
     * per request makes a socket per request */
    if (!s->rd.pending && !s->wr.pending)
        mf_lua_sock_free_buffers(s);
}

/* The coroutine that connected it ended with the socket open. */
static void mf_lua__sock_release(mf_lua_owned_t *o)
{
    mf_lua_sock_t *s = mf_container_of(o, mf_lua_sock_t, owned);
    mf_lua_sock_close_stream(s);
}

static void mf_lua__sock_own(mf_lua_sock_t *s)
{
    mf_lua_co_t *co = mf_lua_host_current(s->host);
    if (co && !mf_list_linked(&s->owned.link))
        mf_lua_co_own(co, &s->owned);
}

static void mf_lua__sock_apply_timeouts(mf_lua_sock_t *s)
{
    if (s->stream)
        mf_stream_set_timeouts(s->stream, s->timeouts[0], s->timeouts[1],
                               s->timeouts[2]);
}

mf_lua_sock_t *mf_lua_sock_new(lua_State *L, bool udp)
{
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    mf_lua_sock_t **box = lua_newuserdata(L, sizeof *box);
    *box = NULL;
    luaL_getmetatable(L, udp ? MF_LUA_UDP : MF_LUA_TCP);
    lua_setmetatable(L, -2);
    mf_loop_t *loop = mf_lua_host_loop(host);
    mf_lua_sock_t *s = mf_loop_alloc(loop, sizeof *s);
    memset(s, 0, sizeof *s);
    s->host = host;
    s->loop = loop;
    s->udp = udp;
    s->rd.sock = s->wr.sock = s;
    mf_list_init(&s->owned.link);
    s->owned.release = mf_lua__sock_release;
    *box = s;
    return s;
}

mf_lua_sock_t *mf_lua_sock_check(lua_State *L, int idx, bool udp)
{
    mf_lua_sock_t **box =
        mf_lua_check_udata(L, idx, udp ? MF_LUA_UDP : MF_LUA_TCP);
    return *box;
}

static int mf_lua__sock_gc(lua_State *L)
{
    mf_lua_sock_t **box = lua_touserdata(L, 1);
    mf_lua_sock_t *s = *box;
    *box = NULL;
    if (!s)
        return 0;
    s->collected = true;
    mf_lua_sock_close_stream(s);
    mf_lua__sock_free_if_unused(s);
    return 0;
}

/* ---- buffers ------------------------------------------------------------- */

/* Room for need bytes in *p (cap *cap, used bytes kept): loop memory up to
 * its size classes, mf_try_malloc beyond (counted, and refusable by the
 * tests' mf_alloc_fail_next). false when too large or refused. */
bool mf_lua_sock_reserve(mf_loop_t *loop, char **p, size_t *cap, size_t used,
                         size_t need)
{
    if (need <= *cap)
        return true;
    if (need > MF_LUA_SOCK_MAX_BUFFER)
        return false;
    size_t ncap = *cap ? *cap : 4096;
    while (ncap < need)
        ncap *= 2;
    char *np = ncap <= MF_LOOP_ALLOC_MAX ? mf_loop_alloc(loop, ncap)
                                         : mf_try_malloc(ncap);
    if (!np)
        return false;
    if (used)
        memcpy(np, *p, used);
    mf_lua_sock_release(loop, *p, *cap);
    *p = np;
    *cap = ncap;
    return true;
}

void mf_lua_sock_release(mf_loop_t *loop, char *p, size_t cap)
{
    if (!p)
        return;
    if (cap <= MF_LOOP_ALLOC_MAX)
        mf_loop_free(loop, p, cap);
    else
        mf_free(p);
}

void mf_lua_sock_free_buffers(mf_lua_sock_t *s)
{
    mf_lua_sock_release(s->loop, s->buf, s->cap);
    mf_lua_sock_release(s->loop, s->sbuf, s->scap);
    s->buf = s->sbuf = NULL;
    s->cap = s->scap = 0;
}

/* ---- parking ------------------------------------------------------------- */

/* The waiting coroutine ended first (abort, shutdown): the connection
 * closes, as OpenResty's does with its request; the stream's callback
 * still comes, and finds nobody. */
static void mf_lua__sock_detach(void *op)
{
    mf_lua_sock_side_t *side = op;
    side->co = NULL;
    mf_lua_sock_close_stream(side->sock);
}

int mf_lua_sock_park(lua_State *L, mf_lua_sock_side_t *side)
{
    mf_lua_co_t *co = mf_lua_co_check(L);
    side->co = co;
    mf_lua_co_park(co, mf_lua__sock_detach, side);
    return lua_yield(L, 0);
}

void mf_lua_sock_started(mf_lua_sock_side_t *side)
{
    side->pending++;
    side->stream = side->sock->stream;
}

mf_lua_sock_side_t *mf_lua_sock_side_done(void *data, mf_stream_t *stream)
{
    mf_lua_sock_side_t *side = data;
    side->pending--;
    if (side->co && stream == side->stream)
        return side;
    mf_lua__sock_free_if_unused(side->sock);
    return NULL;
}

lua_State *mf_lua_sock_thread(const mf_lua_sock_side_t *side)
{
    return mf_lua_co_thread(side->co);
}

void mf_lua_sock_resume(mf_lua_sock_side_t *side, int nret)
{
    mf_lua_co_t *co = side->co;
    side->co = NULL;
    mf_lua_co_unpark(co);
    mf_lua_co_resume(co, nret);
}

/* ---- results --------------------------------------------------------------
 */

int mf_lua_sock_fail(lua_State *L, const char *err)
{
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
}

const char *mf_lua_sock_errstr(const mf_lua_sock_t *s, ssize_t code)
{
    (void)s;
    switch (code) {
    case MF_ETIMEDOUT:
        return "timeout";
    case MF_EOF:
    case MF_ECLOSED:
    case MF_ECANCELED:
    case MF_ENOTCONN:
    case MF_EPIPE:
        return "closed";
    case MF_ECONNREFUSED:
        return "connection refused";
    case MF_ECONNRESET:
        return "connection reset by peer";
    case MF_ETLS:
        return "handshake failed";
    default:
        return mf_strerror((int)code);
    }
}

/* nil and the error of a connect: a name that does not resolve is worded
 * as OpenResty words it. */
static int mf_lua__sock_connect_failed(lua_State *L, mf_lua_sock_t *s,
                                       ssize_t code)
{
    lua_pushnil(L);
    if (code == MF_EDNS)
        lua_pushfstring(L, "%s could not be resolved", s->peer);
    else
        lua_pushstring(L, mf_lua_sock_errstr(s, code));
    mf_lua_sock_close_stream(s);
    return 2;
}

/* ---- connect ------------------------------------------------------------- */

static void mf_lua__sock_connected(mf_stream_t *stream, ssize_t status,
                                   void *data)
{
    mf_lua_sock_side_t *side = mf_lua_sock_side_done(data, stream);
    if (!side)
        return;
    lua_State *T = mf_lua_sock_thread(side);
    int n = 1;
    if (status == 0)
        lua_pushinteger(T, 1);
    else
        n = mf_lua__sock_connect_failed(T, side->sock, status);
    mf_lua_sock_resume(side, n);
}

/* Starts the connect of a new stream and parks (TCP and UDP alike). */
int mf_lua_sock_start_connect(lua_State *L, mf_lua_sock_t *s, uint16_t port)
{
    mf_lua_co_check(L); /* before anything starts: see mf_lua_socket.h */
    s->stream =
        mf_stream_create(s->loop, s->udp ? MF_STREAM_UDP : MF_STREAM_TCP);
    mf_lua__sock_apply_timeouts(s);
    mf_lua__sock_own(s);
    mf_stream_connect(s->stream, s->peer, port, mf_lua__sock_connected, &s->wr);
    mf_lua_sock_started(&s->wr);
    return mf_lua_sock_park(L, &s->wr);
}

/* host and port of connect / setpeername at 2 and 3 ("unix:/path" takes
 * no port); returns the index of what follows them. */
int mf_lua_sock_peer(lua_State *L, mf_lua_sock_t *s, uint16_t *port)
{
    size_t hlen;
    const char *host = mf_lua_check_lstring(L, 2, &hlen);
    if (hlen == 0 || hlen >= sizeof s->peer)
        mf_lua_arg_error(L, 2, "bad host name length");
    memcpy(s->peer, host, hlen + 1);
    *port = 0;
    if (strncmp(host, "unix:", 5) == 0) {
        snprintf(s->name, sizeof s->name, "%s", host);
        return 3;
    }
    lua_Integer p = mf_lua_check_integer(L, 3);
    if (p < 1 || p > 65535)
        mf_lua_arg_error(L, 3, "port out of range (1 to 65535)");
    *port = (uint16_t)p;
    snprintf(s->name, sizeof s->name, "%s:%u", host, (unsigned)p);
    return 4;
}

/* connect's options: pool (the key), pool_size (kept for setkeepalive);
 * backlog is refused: moonflow does not queue connects. */
static void mf_lua__sock_connect_opts(lua_State *L, mf_lua_sock_t *s, int idx)
{
    if (lua_isnoneornil(L, idx))
        return;
    mf_lua_check_type(L, idx, LUA_TTABLE);
    lua_getfield(L, idx, "pool");
    if (!lua_isnil(L, -1)) {
        size_t n = 0;
        const char *pool =
            lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;
        if (!pool || n == 0 || n >= sizeof s->name)
            luaL_error(L,
                       "bad \"pool\" option: a non-empty string of at most "
                       "%d bytes",
                       (int)sizeof s->name - 1);
        memcpy(s->name, pool, n + 1);
    }
    lua_getfield(L, idx, "pool_size");
    if (!lua_isnil(L, -1)) {
        lua_Integer n = lua_tointeger(L, -1);
        if (lua_type(L, -1) != LUA_TNUMBER || n < 1 || n > 65535)
            luaL_error(L, "bad \"pool_size\" option: 1 to 65535");
        s->pool_size = (unsigned)n;
    }
    lua_getfield(L, idx, "backlog");
    if (!lua_isnil(L, -1))
        luaL_error(L, "the \"backlog\" option is not supported: moonflow "
                      "does not queue connects");
    lua_pop(L, 3);
}

static int mf_lua__sock_connect(lua_State *L)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, 1, false);
    if (s->rd.co || s->wr.co)
        return mf_lua_sock_fail(L, "socket busy");
    /* A connected socket reconnects: the old stream is closed before the
     * arguments change the socket's name, so a refused argument cannot
     * leave it open (and poolable) under another peer's name. */
    mf_lua_sock_close_stream(s);
    uint16_t port;
    int next = mf_lua_sock_peer(L, s, &port);
    mf_lua__sock_connect_opts(L, s, next);
    mf_stream_t *pooled = mf_stream_pool_take(s->loop, s->name);
    if (pooled) {
        s->stream = pooled;
        mf_lua__sock_apply_timeouts(s);
        mf_lua__sock_own(s);
        lua_pushinteger(L, 1);
        return 1;
    }
    return mf_lua_sock_start_connect(L, s, port);
}

/* ---- TLS -------------------------------------------------------------------
 */

static void mf_lua__sock_handshaken(mf_stream_t *stream, ssize_t status,
                                    void *data)
{
    mf_lua_sock_side_t *side = mf_lua_sock_side_done(data, stream);
    if (!side)
        return;
    lua_State *T = mf_lua_sock_thread(side);
    mf_lua_sock_t *s = side->sock;
    int n = 1;
    if (status == 0) {
        lua_pushboolean(T, 1);
    } else {
        char why[160];
        lua_pushnil(T);
        lua_pushstring(T, status == MF_ETLS
                              ? mf_stream_tls_error(stream, why, sizeof why)
                              : mf_lua_sock_errstr(s, status));
        mf_lua_sock_close_stream(s);
        n = 2;
    }
    mf_lua_sock_resume(side, n);
}

/* ssl_verify: nil (on: moonflow verifies by default), a boolean, or
 * {verify = bool, ca_file = path}. */
static bool mf_lua__sock_verify_arg(lua_State *L, int idx, const char **ca)
{
    *ca = NULL;
    if (lua_isnoneornil(L, idx))
        return true;
    if (lua_type(L, idx) == LUA_TBOOLEAN)
        return lua_toboolean(L, idx);
    mf_lua_check_type(L, idx, LUA_TTABLE);
    lua_getfield(L, idx, "ca_file");
    if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
        mf_lua_arg_error(L, idx, "ca_file: a path");
    *ca = lua_tostring(L, -1); /* anchored by the table until the call */
    lua_getfield(L, idx, "verify");
    bool verify = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_pop(L, 2);
    return verify;
}

static int mf_lua__sock_sslhandshake(lua_State *L)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, 1, false);
    const char *name = mf_lua_opt_string(L, 3, NULL);
    const char *ca;
    bool verify = mf_lua__sock_verify_arg(L, 4, &ca);
    if (name && strlen(name) > MF_DNS_MAX_HOST)
        mf_lua_arg_error(L, 3, "server name too long");
    if (!s->stream)
        return mf_lua_sock_fail(L, "closed");
    if (s->rd.co || s->wr.co)
        return mf_lua_sock_fail(L, "socket busy");
    mf_lua_co_check(L);
    mf_stream_handshake(s->stream, name, verify, ca, mf_lua__sock_handshaken,
                        &s->wr);
    mf_lua_sock_started(&s->wr);
    return mf_lua_sock_park(L, &s->wr);
}

/* ---- send ------------------------------------------------------------------
 */

static void mf_lua__sock_append(lua_State *L, mf_lua_sock_t *s, const char *p,
                                size_t n)
{
    if (!mf_lua_sock_reserve(s->loop, &s->sbuf, &s->scap, s->slen, s->slen + n))
        luaL_error(L, "send: data too large");
    memcpy(s->sbuf + s->slen, p, n);
    s->slen += n;
}

static void mf_lua__sock_gather_at(lua_State *L, mf_lua_sock_t *s, int idx,
                                   int depth)
{
    int t = lua_type(L, idx);
    if (t == LUA_TSTRING || t == LUA_TNUMBER) {
        size_t n;
        lua_pushvalue(L, idx); /* numbers convert on the copy */
        const char *p = lua_tolstring(L, -1, &n);
        mf_lua__sock_append(L, s, p, n);
        lua_pop(L, 1);
        return;
    }
    if (t != LUA_TTABLE)
        luaL_error(L, "bad argument #1 to 'send' (bad data type %s found)",
                   lua_typename(L, t));
    if (depth >= MF_LUA_SOCK_MAX_NESTING)
        luaL_error(L, "bad argument #1 to 'send' (tables nested too deep)");
    luaL_checkstack(L, 2, "send");
    size_t len = lua_objlen(L, idx);
    for (size_t i = 1; i <= len; i++) {
        lua_rawgeti(L, idx, (int)i);
        mf_lua__sock_gather_at(L, s, lua_gettop(L), depth + 1);
        lua_pop(L, 1);
    }
}

void mf_lua_sock_gather(lua_State *L, mf_lua_sock_t *s, int idx)
{
    s->slen = 0;
    mf_lua_check_any(L, idx);
    mf_lua__sock_gather_at(L, s, idx, 0);
}

/* bytes sent for TCP, 1 for UDP (as OpenResty answers each). */
static void mf_lua__sock_push_sent(lua_State *L, const mf_lua_sock_t *s)
{
    lua_pushinteger(L, s->udp ? 1 : (lua_Integer)s->slen);
}

static int mf_lua__sock_send_failed(lua_State *L, mf_lua_sock_t *s,
                                    ssize_t code)
{
    const char *err = mf_lua_sock_errstr(s, code);
    mf_lua_sock_close_stream(s);
    return mf_lua_sock_fail(L, err);
}

static void mf_lua__sock_sent(mf_stream_t *stream, ssize_t status, void *data)
{
    mf_lua_sock_side_t *side = mf_lua_sock_side_done(data, stream);
    if (!side)
        return;
    lua_State *T = mf_lua_sock_thread(side);
    int n = 1;
    if (status >= 0)
        mf_lua__sock_push_sent(T, side->sock);
    else
        n = mf_lua__sock_send_failed(T, side->sock, status);
    mf_lua_sock_resume(side, n);
}

int mf_lua_sock_send_buffer(lua_State *L, mf_lua_sock_t *s)
{
    s->siov.iov_base = s->sbuf;
    s->siov.iov_len = s->slen;
    /* An empty send is nothing to do on TCP, and an empty datagram on UDP
     * (as OpenResty sends one). */
    ssize_t n =
        s->slen || s->udp ? mf_stream_try_writev(s->stream, &s->siov, 1) : 0;
    if (n < 0)
        return mf_lua__sock_send_failed(L, s, n);
    if ((size_t)n == s->slen) {
        mf_lua__sock_push_sent(L, s);
        return 1;
    }
    mf_lua_co_check(L);
    s->siov.iov_base = s->sbuf + n;
    s->siov.iov_len = s->slen - (size_t)n;
    /* Nothing taken: the socket is full, wait for room; a part taken: the
     * rest may fit already, so the write tries first. */
    if (n == 0)
        mf_stream_wait_writev(s->stream, &s->siov, 1, mf_lua__sock_sent,
                              &s->wr);
    else
        mf_stream_writev(s->stream, &s->siov, 1, mf_lua__sock_sent, &s->wr);
    mf_lua_sock_started(&s->wr);
    return mf_lua_sock_park(L, &s->wr);
}

/* send(data) for both protocols. */
int mf_lua_sock_send(lua_State *L, bool udp)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, 1, udp);
    if (!s->stream)
        return mf_lua_sock_fail(L, "closed");
    if (s->wr.co)
        return mf_lua_sock_fail(L, "socket busy writing");
    mf_lua_sock_gather(L, s, 2);
    return mf_lua_sock_send_buffer(L, s);
}

static int mf_lua__sock_tcp_send(lua_State *L)
{
    return mf_lua_sock_send(L, false);
}

/* ---- timeouts, keepalive, close ----------------------------------------- */

static uint32_t mf_lua__sock_ms(lua_State *L, int idx)
{
    lua_Number ms = mf_lua_opt_number(L, idx, 0);
    if (!(ms >= 0 && ms <= 0x7fffffff))
        mf_lua_arg_error(L, idx, "a timeout in ms, 0 to 2^31 - 1");
    return (uint32_t)ms;
}

/* settimeout(ms) for both protocols: every wait. 0: the default (60 s). */
int mf_lua_sock_settimeout(lua_State *L, bool udp)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, 1, udp);
    uint32_t ms = mf_lua__sock_ms(L, 2);
    s->timeouts[0] = s->timeouts[1] = s->timeouts[2] = ms;
    mf_lua__sock_apply_timeouts(s);
    return 0;
}

static int mf_lua__sock_tcp_settimeout(lua_State *L)
{
    return mf_lua_sock_settimeout(L, false);
}

static int mf_lua__sock_settimeouts(lua_State *L)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, 1, false);
    for (int i = 0; i < 3; i++)
        s->timeouts[i] = mf_lua__sock_ms(L, i + 2);
    mf_lua__sock_apply_timeouts(s);
    return 0;
}

static int mf_lua__sock_setkeepalive(lua_State *L)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, 1, false);
    uint32_t idle = mf_lua__sock_ms(L, 2);
    lua_Integer size = mf_lua_opt_integer(L, 3, s->pool_size);
    if (size < 0 || size > 65535)
        mf_lua_arg_error(L, 3, "pool size out of range (1 to 65535)");
    if (!s->stream)
        return mf_lua_sock_fail(L, "closed");
    if (s->rd.co || s->wr.co)
        return mf_lua_sock_fail(L, "socket busy");
    if (s->end > s->start) {
        mf_lua_sock_close_stream(s);
        return mf_lua_sock_fail(L, "unread data in buffer");
    }
    mf_stream_t *stream = s->stream;
    s->stream = NULL;
    mf_lua_sock_close_stream(s); /* the record's side only */
    if (mf_stream_pool_put(stream, s->name, idle, (unsigned)size) < 0)
        return mf_lua_sock_fail(L, "connection in dubious state");
    lua_pushinteger(L, 1);
    return 1;
}

static int mf_lua__sock_getreusedtimes(lua_State *L)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, 1, false);
    if (!s->stream)
        return mf_lua_sock_fail(L, "closed");
    lua_pushinteger(L, mf_stream_reused(s->stream));
    return 1;
}

/* close() for both protocols: 1, or nil, "closed" when it was not open. */
int mf_lua_sock_close(lua_State *L, bool udp)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, 1, udp);
    if (!s->stream)
        return mf_lua_sock_fail(L, "closed");
    mf_lua_sock_close_stream(s);
    lua_pushinteger(L, 1);
    return 1;
}

static int mf_lua__sock_tcp_close(lua_State *L)
{
    return mf_lua_sock_close(L, false);
}

int mf_lua_sock_tostring(lua_State *L)
{
    mf_lua_sock_t **box = lua_touserdata(L, 1);
    mf_lua_sock_t *s = *box;
    lua_pushfstring(L, "%s (%s)", s && s->udp ? "udp socket" : "tcp socket",
                    s && s->stream ? s->name : "closed");
    return 1;
}

/* ---- the module ------------------------------------------------------------
 */

static int mf_lua__sock_tcp(lua_State *L)
{
    mf_lua_sock_new(L, false);
    return 1;
}

int mf_lua_sock_gc(lua_State *L)
{
    return mf_lua__sock_gc(L);
}

int mf_lua_open_socket(lua_State *L)
{
    static const luaL_Reg tcp_methods[] = {
        {"connect sock:connect(host, port [, opts])", mf_lua__sock_connect},
        {"sslhandshake sock:sslhandshake(reused_session, server_name, "
         "ssl_verify)",
         mf_lua__sock_sslhandshake},
        {"send sock:send(data)", mf_lua__sock_tcp_send},
        {"receive sock:receive([pattern])", mf_lua_sock_receive},
        {"receiveuntil sock:receiveuntil(pattern [, opts])",
         mf_lua_sock_receiveuntil},
        {"settimeout sock:settimeout(ms)", mf_lua__sock_tcp_settimeout},
        {"settimeouts sock:settimeouts(connect, send, read)",
         mf_lua__sock_settimeouts},
        {"setkeepalive sock:setkeepalive([idle_ms [, pool_size]])",
         mf_lua__sock_setkeepalive},
        {"getreusedtimes sock:getreusedtimes()", mf_lua__sock_getreusedtimes},
        {"close sock:close()", mf_lua__sock_tcp_close},
        {NULL, NULL}};
    static const luaL_Reg funcs[] = {
        {"tcp mf.socket.tcp()", mf_lua__sock_tcp},
        {"udp mf.socket.udp()", mf_lua_sock_udp_new},
        {NULL, NULL}};
    mf_lua_class(L, MF_LUA_TCP, tcp_methods, mf_lua__sock_gc,
                 mf_lua_sock_tostring);
    lua_pop(L, 1);
    mf_lua_sock_udp_class(L);
    lua_newtable(L);
    mf_lua_register(L, funcs);
    return 1;
}
