/*
 * trailers.c — req:trailers(): the request's trailer fields as a table,
 * read from the exchange (mf_http_exchange_trailers) at each call, so a
 * handler that reads its body as a stream sees them once it has read to
 * the end. Owns nothing: the table is the caller's.
 */
#include <lauxlib.h>
#include <string.h>

#include "request.h"

/* Sets t[name] = value for one "name: value\r\n" line, joining a repeated
 * name's values with ", " (RFC 9110 §5.3). */
static void mf__trailer_field(lua_State *L, int t, const char *line, size_t len)
{
    const char *colon = memchr(line, ':', len);
    if (!colon)
        return; /* cannot happen: the protocol wrote the line */
    const char *v = colon + 2, *end = line + len - 2; /* ": ", "\r\n" */
    lua_pushlstring(L, line, (size_t)(colon - line));
    lua_pushvalue(L, -1);
    lua_rawget(L, t);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushlstring(L, v, (size_t)(end - v));
    } else {
        lua_pushliteral(L, ", ");
        lua_pushlstring(L, v, (size_t)(end - v));
        lua_concat(L, 3);
    }
    lua_rawset(L, t);
}

int mf_serve_req_trailers(lua_State *L)
{
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
    size_t len = 0;
    const char *lines =
        request->ex ? mf_http_exchange_trailers(request->ex, &len) : NULL;
    lua_newtable(L);
    int t = lua_gettop(L);
    const char *p = lines, *stop = lines ? lines + len : NULL;
    while (p && p < stop) {
        const char *eol = memchr(p, '\n', (size_t)(stop - p));
        if (!eol)
            break;
        mf__trailer_field(L, t, p, (size_t)(eol + 1 - p));
        p = eol + 1;
    }
    return 1;
}
