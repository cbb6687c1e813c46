/*
 * lua/net/mf_lua_socket.h — internals shared by the cosocket files: the record
 * behind a socket object (mf_lua_socket.c owns it: creation, connect, TLS,
 * send, keepalive, close, the collector), its receive buffer and the
 * receive patterns (mf_lua_socket_recv.c), and the UDP object
 * (mf_lua_socket_udp.c). Not installed.
 *
 * A record lives in loop memory, pointed to by its userdata; it is freed
 * once the userdata is collected and no stream callback is pending, so a
 * late completion never touches freed memory. The stream (moonflow/
 * stream.h) is the record's until close or keepalive. A coroutine parked
 * on a read or a write is on a side (rd, wr): a read and a write may wait
 * together, from two Lua threads, as in OpenResty.
 */
#ifndef MF_LUA_SOCKET_H
#define MF_LUA_SOCKET_H

#include <moonflow/dns.h>
#include <moonflow/stream.h>

#include "host/mf_lua_int.h"

#define MF_LUA_TCP "moonflow.socket.tcp"
#define MF_LUA_UDP "moonflow.socket.udp"

typedef struct mf_lua_sock mf_lua_sock_t;

typedef struct mf_lua_sock_side {
    mf_lua_sock_t *sock;
    mf_lua_co_t *co;     /* parked; NULL when none or detached */
    unsigned pending;    /* stream callbacks due */
    mf_stream_t *stream; /* the stream of the operation last started */
} mf_lua_sock_side_t;

/* How a receive ends (receive's pattern, receiveuntil's iterator). */
typedef enum mf_lua_recv_mode {
    MF_RECV_LINE,  /* "*l": up to \n, without it (and a \r before it) */
    MF_RECV_ALL,   /* "*a": up to the end of the stream */
    MF_RECV_BYTES, /* n bytes */
    MF_RECV_UNTIL, /* up to a pattern (receiveuntil) */
    MF_RECV_DGRAM  /* one datagram (UDP) */
} mf_lua_recv_mode_t;

struct mf_lua_sock {
    mf_lua_host_t *host;
    mf_loop_t *loop;
    mf_stream_t *stream; /* NULL: not connected, or closed */
    bool udp;
    bool collected;       /* the userdata is gone */
    uint32_t timeouts[3]; /* connect, send, read (ms; 0: the default) */
    mf_lua_owned_t owned; /* in its creating coroutine's list */
    mf_lua_sock_side_t rd, wr;
    /* the receive buffer: bytes [start, end) of cap */
    char *buf;
    size_t cap, start, end;
    /* the receive running */
    mf_lua_recv_mode_t mode;
    size_t want;     /* BYTES: bytes; UNTIL with a size: the most; DGRAM */
    size_t scanned;  /* LINE/UNTIL: bytes from start known not to match */
    const char *pat; /* UNTIL: the pattern (the iterator's upvalue) */
    size_t patlen;
    bool inclusive; /* UNTIL: the pattern is part of the data */
    bool sized;     /* UNTIL: called with a size */
    bool boundary;  /* UNTIL sized: the next call returns the end */
    /* the send: a copy of the data, written from soff on */
    char *sbuf;
    size_t scap, slen;
    struct iovec siov;
    unsigned pool_size; /* connect's pool_size: setkeepalive's default */
    char name[MF_DNS_MAX_HOST + 40]; /* host:port[:pool]: the pool's key */
    char peer[MF_DNS_MAX_HOST + 1];  /* for "could not be resolved" */
};

/* The record of the socket at idx (raises on another type, or on a record
 * of the other protocol than udp says). */
mf_lua_sock_t *mf_lua_sock_check(lua_State *L, int idx, bool udp);
/* Pushes a new socket object (TCP or UDP) and returns its record. */
mf_lua_sock_t *mf_lua_sock_new(lua_State *L, bool udp);
/* nil, err (and a third value: partial, when given): returns the count. */
int mf_lua_sock_fail(lua_State *L, const char *err);
/* OpenResty's word for a stream error ("timeout", "closed" ...). */
const char *mf_lua_sock_errstr(const mf_lua_sock_t *s, ssize_t code);
/* Closes the stream now (a pending wait resumes with "closed" later). */
void mf_lua_sock_close_stream(mf_lua_sock_t *s);
/* Parks the running coroutine on side; returns lua_yield's value.
 * An operation that may wait checks its caller (mf_lua_co_check) before it
 * starts: a raise there (not in a moonflow coroutine) must not leave an
 * operation running that no coroutine waits for. */
int mf_lua_sock_park(lua_State *L, mf_lua_sock_side_t *side);
/* The side's coroutine goes on with the nret values pushed on its thread. */
void mf_lua_sock_resume(mf_lua_sock_side_t *side, int nret);
/* A stream operation was started for side (its callback is due). */
void mf_lua_sock_started(mf_lua_sock_side_t *side);
/* A stream callback ran for the side data points to: the side, or NULL
 * when nobody waits for it — the waiter went away, or the callback is a
 * late one of an older stream while a new operation waits (the record may
 * have been freed then: touch nothing). */
mf_lua_sock_side_t *mf_lua_sock_side_done(void *data, mf_stream_t *stream);
/* The thread the side's results go on. */
lua_State *mf_lua_sock_thread(const mf_lua_sock_side_t *side);

/* Copies a string, a number, or a nested array of them at idx into the
 * send buffer (raises on another type). */
void mf_lua_sock_gather(lua_State *L, mf_lua_sock_t *s, int idx);
/* Writes the send buffer: the count of results (bytes sent, or 1 for
 * UDP, or nil, err) pushed on L now, or parks. */
int mf_lua_sock_send_buffer(lua_State *L, mf_lua_sock_t *s);

/* Room for need bytes in *p (cap *cap; the used bytes are kept): loop
 * memory up to its size classes, malloc beyond; false when too large or
 * refused. mf_lua_sock_release gives such a buffer back. */
bool mf_lua_sock_reserve(mf_loop_t *loop, char **p, size_t *cap, size_t used,
                         size_t need);
void mf_lua_sock_release(mf_loop_t *loop, char *p, size_t cap);

/* host (and port unless "unix:...") of connect / setpeername at 2 and 3,
 * kept in s->peer, s->name; returns the index of the next argument. */
int mf_lua_sock_peer(lua_State *L, mf_lua_sock_t *s, uint16_t *port);
/* Starts the connect of a new stream and parks. */
int mf_lua_sock_start_connect(lua_State *L, mf_lua_sock_t *s, uint16_t port);

/* Methods both protocols share (udp picks the class checked). */
int mf_lua_sock_send(lua_State *L, bool udp);
int mf_lua_sock_settimeout(lua_State *L, bool udp);
int mf_lua_sock_close(lua_State *L, bool udp);
int mf_lua_sock_tostring(lua_State *L);
int mf_lua_sock_gc(lua_State *L);

/* Runs a receive set up in s->mode ...: the count of results pushed on L
 * when it ended, or parks (mf_lua_socket_recv.c). */
int mf_lua_sock_recv(lua_State *L, mf_lua_sock_t *s);
/* Frees the buffers (the record's end). */
void mf_lua_sock_free_buffers(mf_lua_sock_t *s);

/* mf_lua_socket_recv.c's methods: receive, receiveuntil. */
int mf_lua_sock_receive(lua_State *L);
int mf_lua_sock_receiveuntil(lua_State *L);
/* UDP's receive([size]): one datagram (mf_lua_socket_recv.c). */
int mf_lua_sock_receive_dgram(lua_State *L);
/* mf_lua_socket_udp.c: mf.socket.udp() and its class. */
int mf_lua_sock_udp_new(lua_State *L);
void mf_lua_sock_udp_class(lua_State *L);

/* moonflow.socket: tcp, udp (mf_lua_socket.c). */
int mf_lua_open_socket(lua_State *L);
/* moonflow.upstream: mf.upstream (mf_lua_upstream.c). */
int mf_lua_open_upstream(lua_State *L);

#endif /* MF_LUA_SOCKET_H */
