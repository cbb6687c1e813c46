/*
 * lua/net/mf_lua_socket_recv.c — receiving on a cosocket: receive("*l" | "*a"
 * | n), receiveuntil(pattern [, {inclusive = bool}]) and its iterator
 * (with OpenResty's size argument), and UDP's one datagram, over the
 * socket's receive buffer (mf_lua_socket.h).
 *
 * A receive first looks at what is buffered, then reads what the socket
 * has without waiting, and parks only when it needs more: the stream's
 * callback appends the bytes and runs the same matching again, resuming
 * the coroutine only when the receive has its answer (a long body read
 * with "*a" costs one resume). Failures return nil, the error and the
 * bytes received so far (consumed), as OpenResty does; any failure but a
 * timeout closes the connection.
 *
 * Owns nothing: the buffer is the record's (mf_lua_socket.c).
 */
#include <string.h>

#include <moonflow/lua_arg.h>
#include <moonflow/error.h>

#include "mf_lua_socket.h"

#define MF_LUA_RECV_WAIT (-1)
#define MF_LUA_RECV_CHUNK 4096
#define MF_LUA_DGRAM_DEFAULT 8192
#define MF_LUA_DGRAM_MAX 65536

static void mf_lua__recv_consume(mf_lua_sock_t *s, size_t n)
{
    s->start += n;
    s->scanned = 0;
    if (s->start == s->end)
        s->start = s->end = 0;
}

static void mf_lua__recv_push(lua_State *L, mf_lua_sock_t *s, size_t n)
{
    if (n == 0) { /* the buffer may not exist yet */
        lua_pushliteral(L, "");
        return;
    }
    lua_pushlstring(L, s->buf + s->start, n);
    mf_lua__recv_consume(s, n);
}

/* A line: bytes up to \n, without it and a \r before it. */
static int mf_lua__recv_line(lua_State *L, mf_lua_sock_t *s)
{
    const char *p = s->buf + s->start;
    size_t avail = s->end - s->start;
    const char *nl = avail > s->scanned
                         ? memchr(p + s->scanned, '\n', avail - s->scanned)
                         : NULL;
    if (!nl) {
        s->scanned = avail;
        return MF_LUA_RECV_WAIT;
    }
    size_t len = (size_t)(nl - p), n = len;
    if (n > 0 && p[n - 1] == '\r')
        n--;
    lua_pushlstring(L, p, n);
    mf_lua__recv_consume(s, len + 1);
    return 1;
}

/* receiveuntil's iterator: the data before the pattern (with it when
 * inclusive); called with a size, at most size bytes each time and nil
 * once the pattern is reached. */
static int mf_lua__recv_until(lua_State *L, mf_lua_sock_t *s)
{
    if (s->boundary) {
        s->boundary = false;
        lua_pushnil(L);
        return 1;
    }
    const char *p = s->buf + s->start;
    size_t avail = s->end - s->start;
    const char *hit =
        avail >= s->patlen
            ? memmem(p + s->scanned, avail - s->scanned, s->pat, s->patlen)
            : NULL;
    if (hit) {
        size_t pos = (size_t)(hit - p);
        if (!s->sized) {
            lua_pushlstring(L, p, pos + (s->inclusive ? s->patlen : 0));
            mf_lua__recv_consume(s, pos + s->patlen);
        } else if (pos > 0) {
            mf_lua__recv_push(L, s, pos < s->want ? pos : s->want);
        } else if (s->inclusive) { /* the pattern is the last chunk */
            mf_lua__recv_push(L, s, s->patlen);
            s->boundary = true;
        } else {
            mf_lua__recv_consume(s, s->patlen);
            lua_pushnil(L);
        }
        return 1;
    }
    /* no match starts before here; the tail may begin one */
    s->scanned = avail >= s->patlen ? avail - s->patlen + 1 : 0;
    if (s->sized && s->scanned >= s->want) {
        mf_lua__recv_push(L, s, s->want);
        return 1;
    }
    return MF_LUA_RECV_WAIT;
}

/* The answer from what is buffered, pushed on L: the count, or WAIT. */
static int mf_lua__recv_match(lua_State *L, mf_lua_sock_t *s)
{
    switch (s->mode) {
    case MF_RECV_LINE:
        return mf_lua__recv_line(L, s);
    case MF_RECV_BYTES:
        if (s->end - s->start < s->want)
            return MF_LUA_RECV_WAIT;
        mf_lua__recv_push(L, s, s->want);
        return 1;
    case MF_RECV_UNTIL:
        return mf_lua__recv_until(L, s);
    default: /* ALL waits for the end; DGRAM reads first */
        return MF_LUA_RECV_WAIT;
    }
}

/* The stream ended (code MF_EOF) or failed: "*a" answers what came; every
 * other receive returns nil, the error and the bytes buffered. */
static int mf_lua__recv_end(lua_State *L, mf_lua_sock_t *s, ssize_t code)
{
    if (s->mode == MF_RECV_DGRAM) /* a datagram socket stays open */
        return mf_lua_sock_fail(L, mf_lua_sock_errstr(s, code));
    int n = 1;
    if (code == MF_EOF && s->mode == MF_RECV_ALL) {
        mf_lua__recv_push(L, s, s->end - s->start);
    } else {
        lua_pushnil(L);
        lua_pushstring(L, mf_lua_sock_errstr(s, code));
        mf_lua__recv_push(L, s, s->end - s->start);
        n = 3;
    }
    if (code != MF_ETIMEDOUT)
        mf_lua_sock_close_stream(s);
    return n;
}

/* Room to read into: the buffered bytes moved to the front, then more. */
static bool mf_lua__recv_room(mf_lua_sock_t *s)
{
    size_t need = s->mode == MF_RECV_DGRAM ? s->want : MF_LUA_RECV_CHUNK;
    if (s->start > 0 && s->cap - s->end < need) {
        memmove(s->buf, s->buf + s->start, s->end - s->start);
        s->end -= s->start;
        s->start = 0;
    }
    return mf_lua_sock_reserve(s->loop, &s->buf, &s->cap, s->end,
                               s->end + need);
}

static void mf_lua__recv_read_done(mf_stream_t *stream, ssize_t status,
                                   void *data);

/* Reads until the receive has its answer: the count pushed on L, or WAIT
 * with a stream read started. caller: L is the receive's caller, whose
 * coroutine is checked before a read starts (the other L is a parked
 * coroutine's, resumed from the read's callback). */
static int mf_lua__recv_run(lua_State *L, mf_lua_sock_t *s, bool caller)
{
    for (;;) {
        int r = mf_lua__recv_match(L, s);
        if (r != MF_LUA_RECV_WAIT)
            return r;
        if (!s->stream)
            return mf_lua__recv_end(L, s, MF_ECLOSED);
        if (!mf_lua__recv_room(s))
            return mf_lua__recv_end(L, s, MF_ENOMEM);
        size_t room = s->mode == MF_RECV_DGRAM ? s->want : s->cap - s->end;
        ssize_t n = mf_stream_try_read(s->stream, s->buf + s->end, room);
        if (n == MF_EAGAIN) {
            if (caller)
                mf_lua_co_check(L);
            mf_stream_wait_read(s->stream, s->buf + s->end, room,
                                mf_lua__recv_read_done, &s->rd);
            mf_lua_sock_started(&s->rd);
            return MF_LUA_RECV_WAIT;
        }
        if (n < 0)
            return mf_lua__recv_end(L, s, n);
        if (s->mode == MF_RECV_DGRAM) {
            lua_pushlstring(L, s->buf + s->end, (size_t)n);
            return 1;
        }
        s->end += (size_t)n;
    }
}

static void mf_lua__recv_read_done(mf_stream_t *stream, ssize_t status,
                                   void *data)
{
    mf_lua_sock_side_t *side = mf_lua_sock_side_done(data, stream);
    if (!side)
        return;
    mf_lua_sock_t *s = side->sock;
    lua_State *T = mf_lua_sock_thread(side);
    int n;
    if (status < 0) {
        n = mf_lua__recv_end(T, s, status);
    } else if (s->mode == MF_RECV_DGRAM) {
        lua_pushlstring(T, s->buf + s->end, (size_t)status);
        n = 1;
    } else {
        s->end += (size_t)status;
        n = mf_lua__recv_run(T, s, false);
        if (n == MF_LUA_RECV_WAIT)
            return; /* still parked: another read runs */
    }
    mf_lua_sock_resume(side, n);
}

int mf_lua_sock_recv(lua_State *L, mf_lua_sock_t *s)
{
    int n = mf_lua__recv_run(L, s, true);
    if (n != MF_LUA_RECV_WAIT)
        return n;
    return mf_lua_sock_park(L, &s->rd);
}

/* The checks every receive starts with: nil, err pushed (2) or 0. */
static int mf_lua__recv_ready(lua_State *L, mf_lua_sock_t *s)
{
    if (!s->stream)
        return mf_lua_sock_fail(L, "closed");
    if (s->rd.co)
        return mf_lua_sock_fail(L, "socket busy reading");
    return 0;
}

int mf_lua_sock_receive(lua_State *L)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, 1, false);
    mf_lua_recv_mode_t mode;
    size_t want = 0;
    if (lua_isnumber(L, 2)) { /* a numeric string counts too, as there */
        lua_Number n = lua_tonumber(L, 2);
        if (!(n >= 0 && n <= 1e15))
            mf_lua_arg_error(L, 2, "bad pattern argument: a byte count >= 0");
        mode = MF_RECV_BYTES;
        want = (size_t)n;
    } else {
        const char *pat = mf_lua_opt_string(L, 2, "*l");
        if (strcmp(pat, "*l") == 0 || strcmp(pat, "l") == 0)
            mode = MF_RECV_LINE;
        else if (strcmp(pat, "*a") == 0 || strcmp(pat, "a") == 0)
            mode = MF_RECV_ALL;
        else
            return mf_lua_arg_error(L, 2, "bad pattern argument");
    }
    int busy = mf_lua__recv_ready(L, s);
    if (busy)
        return busy;
    if (mode == MF_RECV_BYTES && want == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    s->mode = mode;
    s->want = want;
    s->scanned = 0;
    return mf_lua_sock_recv(L, s);
}

/* The iterator: upvalues the socket, the pattern, inclusive. */
static int mf_lua__recv_iterate(lua_State *L)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, lua_upvalueindex(1), false);
    size_t plen;
    const char *pat = lua_tolstring(L, lua_upvalueindex(2), &plen);
    bool sized = !lua_isnoneornil(L, 1);
    lua_Integer size = sized ? mf_lua_check_integer(L, 1) : 0;
    if (sized && size < 1)
        mf_lua_arg_error(L, 1, "bad size: at least 1");
    int busy = mf_lua__recv_ready(L, s);
    if (busy)
        return busy;
    s->sized = sized;
    s->want = (size_t)size;
    s->mode = MF_RECV_UNTIL;
    /* the pattern stays alive: it is an upvalue of the function running */
    s->pat = pat;
    s->patlen = plen;
    s->inclusive = lua_toboolean(L, lua_upvalueindex(3));
    s->scanned = 0;
    return mf_lua_sock_recv(L, s);
}

int mf_lua_sock_receiveuntil(lua_State *L)
{
    mf_lua_sock_check(L, 1, false);
    size_t plen;
    mf_lua_check_lstring(L, 2, &plen);
    if (plen == 0)
        return mf_lua_arg_error(L, 2, "pattern is empty");
    bool inclusive = false;
    if (!lua_isnoneornil(L, 3)) {
        mf_lua_check_type(L, 3, LUA_TTABLE);
        lua_getfield(L, 3, "inclusive");
        if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TBOOLEAN)
            return mf_lua_arg_error(L, 3, "inclusive: a boolean");
        inclusive = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    lua_settop(L, 2);
    lua_pushboolean(L, inclusive);
    lua_pushcclosure(L, mf_lua__recv_iterate, 3);
    return 1;
}

/* UDP's receive(size): one datagram, cut to size (default 8192, at most
 * 65536). */
int mf_lua_sock_receive_dgram(lua_State *L)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, 1, true);
    lua_Integer size = mf_lua_opt_integer(L, 2, MF_LUA_DGRAM_DEFAULT);
    if (size < 1)
        mf_lua_arg_error(L, 2, "bad size: at least 1");
    int busy = mf_lua__recv_ready(L, s);
    if (busy)
        return busy;
    s->mode = MF_RECV_DGRAM;
    s->want = size > MF_LUA_DGRAM_MAX ? MF_LUA_DGRAM_MAX : (size_t)size;
    s->start = s->end = 0;
    return mf_lua_sock_recv(L, s);
}
