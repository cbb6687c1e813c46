/*
 * lua/http/mf_lua_form.c — form bodies as Lua tables (moonflow/lua_uri.h),
 * behind the HTTP server's req:form():
 *
 *   application/x-www-form-urlencoded  the table req.query gives
 *   multipart/form-data                fields as strings; file parts as
 *                                      {filename =, content_type =,
 *                                      data =}; a repeated name gives a
 *                                      list
 *
 * At most max fields or parts are read: past that, nil and "too many form
 * fields (more than N)". Any other type gives nil and "not a form
 * (Content-Type ...)"; a malformed multipart body nil and "bad multipart
 * body (part N)". Values are copied into Lua strings.
 *
 * Owns nothing past a call. May call: the HTTP layer's multipart parser.
 */
#include <lauxlib.h>
#include <strings.h>

#include <moonflow/http_parser.h>
#include <moonflow/lua_uri.h>

#include "host/mf_lua_int.h"

static int mf__form_fail(lua_State *L, int top, const char *fmt, unsigned n)
{
    lua_settop(L, top);
    lua_pushnil(L);
    lua_pushfstring(L, fmt, (int)n);
    return 2;
}

static void mf__form_push_part(lua_State *L, const mf_http_part_t *part)
{
    lua_pushlstring(L, part->name, part->name_len);
    if (!part->filename) {
        lua_pushlstring(L, part->data, part->data_len);
        return;
    }
    lua_createtable(L, 0, 3);
    lua_pushlstring(L, part->filename, part->filename_len);
    lua_setfield(L, -2, "filename");
    if (part->type) {
        lua_pushlstring(L, part->type, part->type_len);
        lua_setfield(L, -2, "content_type");
    }
    lua_pushlstring(L, part->data, part->data_len);
    lua_setfield(L, -2, "data");
}

static int mf__form_multipart(lua_State *L, const char *b, size_t blen,
                              const char *body, size_t n, unsigned max)
{
    int top = lua_gettop(L);
    mf_http_multipart_t mp;
    mf_http_part_t part;
    mf_http_multipart_init(&mp, body, n, b, blen);
    lua_newtable(L);
    int t = lua_gettop(L), rc;
    while ((rc = mf_http_multipart_next(&mp, &part)) == 1) {
        if (max && mp.parts > max)
            return mf__form_fail(L, top, "too many form fields (more than %d)",
                                 max);
        mf__form_push_part(L, &part);
        mf_lua_args_add(L, t);
    }
    if (rc < 0)
        return mf__form_fail(L, top, "bad multipart body (part %d)",
                             mp.parts + 1);
    return 1;
}

int mf_lua_push_form(lua_State *L, const char *type, size_t tlen,
                     const char *body, size_t n, unsigned max)
{
    static const char urlencoded[] = "application/x-www-form-urlencoded";
    const char *b;
    size_t blen;
    if (type && tlen >= sizeof urlencoded - 1 &&
        !strncasecmp(type, urlencoded, sizeof urlencoded - 1)) {
        if (!mf_lua_push_args(L, body, n, max))
            return 1;
        lua_pop(L, 1);
        lua_pushnil(L);
        lua_pushfstring(L, "too many form fields (more than %d)", (int)max);
        return 2;
    }
    if (type && mf_http_multipart_boundary(type, tlen, &b, &blen) == 0)
        return mf__form_multipart(L, b, blen, body, n, max);
    lua_pushnil(L);
    if (!type) {
        lua_pushliteral(L, "not a form (no Content-Type)");
        return 2;
    }
    lua_pushliteral(L, "not a form (Content-Type ");
    lua_pushlstring(L, type, tlen < 100 ? tlen : 100);
    lua_pushliteral(L, ")");
    lua_concat(L, 3);
    return 2;
}
