/*
 * lua/net/mf_lua_socket_udp.c — mf.socket.udp() (ngx.socket.udp): a connected
 * datagram socket with OpenResty's methods: setpeername(host, port) or
 * setpeername("unix:/path"), send(data) (1, or nil, err), receive([size])
 * (one datagram), settimeout(ms), close(). The record, the waits and the
 * send buffer are mf_lua_socket.c's; the datagram read is
 * mf_lua_socket_recv.c's.
 */
#include "mf_lua_socket.h"

static int mf_lua__udp_setpeername(lua_State *L)
{
    mf_lua_sock_t *s = mf_lua_sock_check(L, 1, true);
    if (s->rd.co || s->wr.co)
        return mf_lua_sock_fail(L, "socket busy");
    mf_lua_sock_close_stream(s); /* first: as connect (mf_lua_socket.c) */
    uint16_t port;
    mf_lua_sock_peer(L, s, &port);
    return mf_lua_sock_start_connect(L, s, port);
}

static int mf_lua__udp_send(lua_State *L)
{
    return mf_lua_sock_send(L, true);
}

static int mf_lua__udp_settimeout(lua_State *L)
{
    return mf_lua_sock_settimeout(L, true);
}

static int mf_lua__udp_close(lua_State *L)
{
    return mf_lua_sock_close(L, true);
}

int mf_lua_sock_udp_new(lua_State *L)
{
    mf_lua_sock_new(L, true);
    return 1;
}

void mf_lua_sock_udp_class(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"setpeername u:setpeername(host, port)", mf_lua__udp_setpeername},
        {"send u:send(data)", mf_lua__udp_send},
        {"receive u:receive([size])", mf_lua_sock_receive_dgram},
        {"settimeout u:settimeout(ms)", mf_lua__udp_settimeout},
        {"close u:close()", mf_lua__udp_close},
        {NULL, NULL}};
    mf_lua_class(L, MF_LUA_UDP, methods, mf_lua_sock_gc, mf_lua_sock_tostring);
    lua_pop(L, 1);
}
