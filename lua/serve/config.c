/*
 * lua/serve/config.c — `moonflow serve --config FILE`: a Lua chunk that
 * returns a table, read in a throwaway lua_State:
 *
 *   return {
 *     listen = "127.0.0.1:8080", workers = 2, root = "site",
 *     access_log = "logs/access.log",            -- or "-" (stdout), "off"
 *     tls = { cert = "c.pem", key = "k.pem",
 *             sni = { ["api.test"] = { cert = "a.pem", key = "a.key" } } },
 *     limits = { max_body = 1048576, max_head = 8192, max_line = 8192,
 *                max_headers = 100, max_connections = 10000 },
 *     timeouts = { header = 10000, body = 10000, keepalive = 60000,
 *                  write = 10000, handler = 0 },          -- milliseconds
 *     routes = { ["/"] = "home.lua",
 *                ["/slow"] = { file = "slow.lua", timeout = 500 } },
 *   }
 *
 * Relative paths are taken from the config file's folder. Ownership: every
 * string is copied into the config (freed by mf_serve_config_free).
 */
#include <lauxlib.h>
#include <libgen.h>
#include <limits.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

char *mf_serve_config_strdup(mf_serve_config_t *c, const char *s)
{
    if (c->nstrings == MF_ARRAY_SIZE(c->strings))
        return NULL;
    return c->strings[c->nstrings++] = strdup(s);
}

void mf_serve_config_free(mf_serve_config_t *c)
{
    for (size_t i = 0; i < c->nstrings; i++)
        free(c->strings[i]);
    c->nstrings = 0;
}

/* A path from the config, relative to the config's folder. */
static char *mf__config_path(mf_serve_config_t *c, const char *dir,
                             const char *p)
{
    char buf[PATH_MAX];
    if (p[0] == '/' || !strcmp(p, "-") || !strcmp(p, "off"))
        return mf_serve_config_strdup(c, p);
    snprintf(buf, sizeof buf, "%s/%s", dir, p);
    return mf_serve_config_strdup(c, buf);
}

static const char *mf__field_string(lua_State *L, int t, const char *key)
{
    lua_getfield(L, t, key);
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1); /* the table still anchors the string */
    return s;
}

static bool mf__field_number(lua_State *L, int t, const char *key, double *out)
{
    lua_getfield(L, t, key);
    bool ok = lua_type(L, -1) == LUA_TNUMBER;
    if (ok)
        *out = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return ok;
}

static void mf__config_u32(lua_State *L, int t, const char *key, uint32_t *out)
{
    double v;
    if (mf__field_number(L, t, key, &v) && v >= 0)
        *out = (uint32_t)v;
}

static void mf__config_limits(lua_State *L, int t, mf_serve_config_t *c)
{
    double v;
    if (mf__field_number(L, t, "max_body", &v))
        c->http.max_body = (uint64_t)v;
    if (mf__field_number(L, t, "max_head", &v))
        c->http.limits.max_head_bytes = (size_t)v;
    if (mf__field_number(L, t, "max_line", &v))
        c->http.limits.max_request_line = (size_t)v;
    if (mf__field_number(L, t, "max_headers", &v))
        c->http.limits.max_headers = (size_t)v;
    if (mf__field_number(L, t, "max_connections", &v))
        c->http.max_connections = (size_t)v;
}

static void mf__config_timeouts(lua_State *L, int t, mf_serve_config_t *c)
{
    mf__config_u32(L, t, "header", &c->http.header_timeout_ms);
    mf__config_u32(L, t, "body", &c->http.body_timeout_ms);
    mf__config_u32(L, t, "keepalive", &c->http.keepalive_timeout_ms);
    mf__config_u32(L, t, "write", &c->http.write_timeout_ms);
    mf__config_u32(L, t, "handler", &c->handler_timeout_ms);
}

static void mf__config_tls(lua_State *L, int t, mf_serve_config_t *c,
                           const char *dir)
{
    const char *cert = mf__field_string(L, t, "cert");
    const char *key = mf__field_string(L, t, "key");
    if (cert && key) {
        c->http.tls.cert_file = mf__config_path(c, dir, cert);
        c->http.tls.key_file = mf__config_path(c, dir, key);
    }
    lua_getfield(L, t, "sni");
    int sni = lua_gettop(L);
    if (lua_istable(L, sni)) {
        lua_pushnil(L);
        while (lua_next(L, sni) && c->http.tls.sni_count < MF_SERVE_MAX_SNI) {
            int e = lua_gettop(L);
            const char *ec =
                lua_istable(L, e) ? mf__field_string(L, e, "cert") : NULL;
            const char *ek =
                lua_istable(L, e) ? mf__field_string(L, e, "key") : NULL;
            if (lua_type(L, -2) == LUA_TSTRING && ec && ek)
                c->sni[c->http.tls.sni_count++] =
                    (mf_tls_sni_t){.server_name = mf_serve_config_strdup(
                                       c, lua_tostring(L, -2)),
                                   .cert_file = mf__config_path(c, dir, ec),
                                   .key_file = mf__config_path(c, dir, ek)};
            lua_pop(L, 1);
        }
        c->http.tls.sni = c->sni;
    }
    lua_pop(L, 1);
}

static int mf__config_routes(lua_State *L, int t, mf_serve_config_t *c,
                             char *err, size_t errlen)
{
    lua_pushnil(L);
    while (lua_next(L, t)) {
        const char *path =
            lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        const char *file = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                           : lua_istable(L, -1)
                               ? mf__field_string(L, -1, "file")
                               : NULL;
        double timeout = 0;
        if (lua_istable(L, -1))
            mf__field_number(L, lua_gettop(L), "timeout", &timeout);
        if (!path || path[0] != '/' || !file) {
            snprintf(err, errlen,
                     "routes: each entry is [\"/path\"] = "
                     "\"file.lua\" or { file = ..., timeout = "
                     "ms }");
            return -1;
        }
        if (c->nroutes == MF_SERVE_MAX_ROUTES) {
            snprintf(err, errlen, "routes: more than %d", MF_SERVE_MAX_ROUTES);
            return -1;
        }
        mf_serve_route_spec_t *r = &c->routes[c->nroutes++];
        r->path = mf_serve_config_strdup(c, path);
        r->file = mf_serve_config_strdup(c, file);
        r->timeout_ms = (uint32_t)timeout;
        lua_pop(L, 1);
    }
    return 0;
}

static int mf__config_read(lua_State *L, mf_serve_config_t *c, const char *dir,
                           char *err, size_t errlen)
{
    int t = lua_gettop(L);
    const char *s;
    double v;
    if ((s = mf__field_string(L, t, "listen")))
        c->http.listen = mf_serve_config_strdup(c, s);
    if ((s = mf__field_string(L, t, "root")))
        c->root = mf__config_path(c, dir, s);
    if ((s = mf__field_string(L, t, "access_log")))
        c->access_log = mf__config_path(c, dir, s);
    if (mf__field_number(L, t, "workers", &v) && v >= 0)
        c->workers = (unsigned)v;
    const char *sections[] = {"limits", "timeouts", "tls", "routes"};
    for (int i = 0; i < 4; i++) {
        lua_getfield(L, t, sections[i]);
        int st = lua_gettop(L);
        if (lua_istable(L, st)) {
            if (i == 0)
                mf__config_limits(L, st, c);
            else if (i == 1)
                mf__config_timeouts(L, st, c);
            else if (i == 2)
                mf__config_tls(L, st, c, dir);
            else if (mf__config_routes(L, st, c, err, errlen) < 0)
                return -1;
        }
        lua_settop(L, t);
    }
    return 0;
}

int mf_serve_config_load(mf_serve_config_t *c, const char *file, char *err,
                         size_t errlen)
{
    lua_State *L = luaL_newstate();
    if (!L) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    luaL_openlibs(L);
    int rc = -1;
    if (luaL_loadfile(L, file) != 0 || lua_pcall(L, 0, 1, 0) != 0) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1));
    } else if (!lua_istable(L, -1)) {
        snprintf(err, errlen, "%s: the config must return a table", file);
    } else {
        char copy[PATH_MAX];
        snprintf(copy, sizeof copy, "%s", file);
        rc = mf__config_read(L, c, dirname(copy), err, errlen);
    }
    lua_close(L);
    return rc;
}
