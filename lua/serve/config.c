/*
 * lua/serve/config.c — `moonflow serve --config FILE`: a Lua chunk that
 * returns a table, read in a throwaway lua_State:
 *
 *   return {
 *     listen = "127.0.0.1:8080", workers = 2, root = "site",
 *     access_log = "logs/access.log",            -- or "-" (stdout), "off"
 *     access_log_format = "combined",            -- or "json" (JSON lines)
 *     request_id_header = "X-Request-Id",        -- the id echoed; "off"
 *     tls = { cert = "c.pem", key = "k.pem",
 *             sni = { ["api.test"] = { cert = "a.pem", key = "a.key" } } },
 *     limits = { max_body = 1048576, max_head = 8192, max_line = 8192,
 *                max_headers = 100, max_connections = 10000,
 *                cpu = 1000,            -- ms a handler runs unyielding
 *                lua_memory = 1024,     -- MiB per worker's Lua state
 *                min_body_rate = 500 }, -- bytes a second
 *     timeouts = { header = 10000, body = 10000, keepalive = 60000,
 *                  write = 10000, handler = 0,          -- milliseconds
 *                  body_total = 0, body_rate_grace = 10000,
 *                  stop = 1000,         -- grace of a graceful stop
 *                  drain = 5000 },      -- taken over: idle keep-alive grace
 *     http2 = { enabled = true, max_concurrent_streams = 128,
 *               max_header_list_size = 65536, max_frame_size = 16384,
 *               initial_window_size = 65535 },  -- SETTINGS it announces
 *     jit = true,       -- LuaJIT's compiler (loop checks keep the limits)
 *     log_level = "info",  -- mf.log: the least severe level written
 *     init = "init.lua",   -- run once, on worker 0, as the server starts
 *     init_worker = "w.lua",  -- run on every worker as it starts
 *     routes = { ["/"] = "home.lua",
 *                ["/slow"] = { file = "slow.lua", timeout = 500 },
 *                ["/upload"] = { file = "up.lua", body = "stream" },
 *                ["/feed"] = { file = "feed.lua", compress = false } },
 *     shared = { hits = 1048576 },   -- dicts of every worker: name = bytes
 *     metrics = { path = "/metrics",  -- Prometheus's page; none without
 *                 listen = "127.0.0.1:9145" },  -- its own address
 *     trace = { file = "trace.jsonl", sample = 1000, token = "t0k" },
 *     upstreams = { api = { servers = { "10.0.0.1:80" },  -- as mf.upstream
 *                           health = { type = "http" } } },
 *     compress = { types = { "text/html", "application/json" },
 *                  min_length = 1024, level = 6,   -- gzip's
 *                  brotli = true, brotli_level = 4 },
 *   }
 *
 * Relative paths are taken from the config file's folder (route scripts:
 * from the root). Every key is checked as it is read: an unknown key, a
 * wrong type or a number that is not an integer in its range is an error
 * naming the file and the key (the files it names are checked at start by
 * config_check.c). Ownership: every string is copied into the config
 * (freed by mf_serve_config_free).
 */
#include <ctype.h>
#include <lauxlib.h>
#include <libgen.h>
#include <limits.h>
#include <lualib.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <moonflow/lua_upstream.h>
#include "serve.h"

/* A string the config owns: a list, freed with the config. */
struct mf_serve_config_string {
    struct mf_serve_config_string *next;
    char text[];
};

/* Room for a string of len bytes (and its NUL), owned by the config. */
static char *mf__config_string(mf_serve_config_t *c, size_t len)
{
    struct mf_serve_config_string *s = mf_xmalloc(sizeof(*s) + len + 1);
    s->next = c->strings;
    c->strings = s;
    return s->text;
}

char *mf_serve_config_strdup(mf_serve_config_t *c, const char *s)
{
    size_t len = strlen(s);
    return memcpy(mf__config_string(c, len), s, len + 1);
}

void mf_serve_config_free(mf_serve_config_t *c)
{
    while (c->strings) {
        struct mf_serve_config_string *s = c->strings;
        c->strings = s->next;
        mf_free(s);
    }
}

/* A path from the config, relative to the config's folder. */
static char *mf__config_path(mf_serve_config_t *c, const char *dir,
                             const char *p)
{
    if (p[0] == '/' || !strcmp(p, "-") || !strcmp(p, "off"))
        return mf_serve_config_strdup(c, p);
    size_t dlen = strlen(dir), plen = strlen(p);
    char *path = mf__config_string(c, dlen + 1 + plen);
    memcpy(path, dir, dlen);
    path[dlen] = '/';
    memcpy(path + dlen + 1, p, plen + 1);
    return path;
}

/* Pushes t[key] without metamethods: the config is data, and reading it
 * must run no code of its own (an __index could raise outside any pcall,
 * or never return). */
static void mf__rawfield(lua_State *L, int t, const char *key)
{
    if (t < 0)
        t = lua_gettop(L) + t + 1;
    lua_pushstring(L, key);
    lua_rawget(L, t);
}

static const char *mf__field_string(lua_State *L, int t, const char *key)
{
    mf__rawfield(L, t, key);
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1); /* the table still anchors the string */
    return s;
}

static bool mf__field_number(lua_State *L, int t, const char *key, double *out)
{
    mf__rawfield(L, t, key);
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
    mf__config_u32(L, t, "cpu", &c->cpu_budget_ms);
    mf__config_u32(L, t, "lua_memory", &c->lua_memory_mib);
    mf__config_u32(L, t, "min_body_rate", &c->http.min_body_rate);
}

static void mf__config_timeouts(lua_State *L, int t, mf_serve_config_t *c)
{
    mf__config_u32(L, t, "header", &c->http.header_timeout_ms);
    mf__config_u32(L, t, "body", &c->http.body_timeout_ms);
    mf__config_u32(L, t, "keepalive", &c->http.keepalive_timeout_ms);
    mf__config_u32(L, t, "write", &c->http.write_timeout_ms);
    mf__config_u32(L, t, "handler", &c->handler_timeout_ms);
    mf__config_u32(L, t, "drain", &c->drain_timeout_ms);
    mf__config_u32(L, t, "stop", &c->stop_timeout_ms);
    mf__config_u32(L, t, "body_total", &c->http.body_total_timeout_ms);
    mf__config_u32(L, t, "body_rate_grace", &c->http.body_rate_grace_ms);
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
    mf__rawfield(L, t, "sni");
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

/* ---- checks: a key the server does not know, or a value of the wrong
 * type or out of range, is an error that names it (a typo must not pass
 * for a default, nor 1e12 ms wrap around to a short timeout). */

typedef struct mf_config_key {
    const char *name;
    int type;         /* LUA_TSTRING, LUA_TNUMBER, LUA_TBOOLEAN or LUA_TTABLE */
    double min, max;  /* numbers: integers from min to max */
    const char *unit; /* numbers: what they count, for the message */
} mf_config_key_t;

#define MF_CONFIG_MS(name)                                 \
    {                                                      \
        name, LUA_TNUMBER, 0, UINT32_MAX, " (ms; 0: none)" \
    }
#define MF_CONFIG_END       \
    {                       \
        NULL, 0, 0, 0, NULL \
    }

/* The server's header array holds 100 (MF_HTTP_MAX_HEADERS): more would be
 * cut to it silently. Heads and lines up to 16 MiB, 2^53 body bytes (what
 * a Lua number holds exactly). */
static const mf_config_key_t mf__top_keys[] = {
    {"listen", LUA_TSTRING, 0, 0, NULL},
    {"root", LUA_TSTRING, 0, 0, NULL},
    {"access_log", LUA_TSTRING, 0, 0, NULL},
    {"access_log_format", LUA_TSTRING, 0, 0, NULL},
    {"request_id_header", LUA_TSTRING, 0, 0, NULL},
    {"workers", LUA_TNUMBER, 0, MF_SERVE_MAX_WORKERS, " (0: one per core)"},
    {"limits", LUA_TTABLE, 0, 0, NULL},
    {"timeouts", LUA_TTABLE, 0, 0, NULL},
    {"tls", LUA_TTABLE, 0, 0, NULL},
    {"http2", LUA_TTABLE, 0, 0, NULL},
    {"routes", LUA_TTABLE, 0, 0, NULL},
    {"jit", LUA_TBOOLEAN, 0, 0, NULL},
    {"log_level", LUA_TSTRING, 0, 0, NULL},
    {"init", LUA_TSTRING, 0, 0, NULL},
    {"init_worker", LUA_TSTRING, 0, 0, NULL},
    {"shared", LUA_TTABLE, 0, 0, NULL},
    {"metrics", LUA_TTABLE, 0, 0, NULL},
    {"trace", LUA_TTABLE, 0, 0, NULL},
    {"upstreams", LUA_TTABLE, 0, 0, NULL},
    {"compress", LUA_TTABLE, 0, 0, NULL},
    {"static", LUA_TTABLE, 0, 0, NULL},
    MF_CONFIG_END};
static const mf_config_key_t mf__limits_keys[] = {
    {"max_body", LUA_TNUMBER, 0, 9007199254740992.0, " (bytes)"},
    {"max_head", LUA_TNUMBER, 1, 16 << 20, " (bytes)"},
    {"max_line", LUA_TNUMBER, 1, 16 << 20, " (bytes)"},
    {"max_headers", LUA_TNUMBER, 1, 100, NULL},
    {"max_connections", LUA_TNUMBER, 1, 1 << 20, " (per worker)"},
    {"cpu", LUA_TNUMBER, 0, UINT32_MAX, " (ms; 0: none)"},
    {"lua_memory", LUA_TNUMBER, 0, 1 << 20, " (MiB; 0: no cap)"},
    {"min_body_rate", LUA_TNUMBER, 0, UINT32_MAX, " (bytes a second)"},
    MF_CONFIG_END};
static const mf_config_key_t mf__timeouts_keys[] = {
    MF_CONFIG_MS("header"),
    MF_CONFIG_MS("body"),
    MF_CONFIG_MS("keepalive"),
    MF_CONFIG_MS("write"),
    MF_CONFIG_MS("handler"),
    MF_CONFIG_MS("drain"),
    MF_CONFIG_MS("stop"),
    MF_CONFIG_MS("body_total"),
    MF_CONFIG_MS("body_rate_grace"),
    MF_CONFIG_END};
static const mf_config_key_t mf__tls_keys[] = {
    {"cert", LUA_TSTRING, 0, 0, NULL},
    {"key", LUA_TSTRING, 0, 0, NULL},
    {"sni", LUA_TTABLE, 0, 0, NULL},
    MF_CONFIG_END};
static const mf_config_key_t mf__http2_keys[] = {
    {"enabled", LUA_TBOOLEAN, 0, 0, NULL},
    {"max_concurrent_streams", LUA_TNUMBER, 1, UINT32_MAX, " (per connection)"},
    {"max_header_list_size", LUA_TNUMBER, 1, UINT32_MAX, " (bytes)"},
    {"max_frame_size", LUA_TNUMBER, 16384, 16777215, " (bytes)"},
    {"initial_window_size", LUA_TNUMBER, 0, 2147483647, " (bytes)"},
    MF_CONFIG_END};
static const mf_config_key_t mf__cert_keys[] = {
    {"cert", LUA_TSTRING, 0, 0, NULL},
    {"key", LUA_TSTRING, 0, 0, NULL},
    MF_CONFIG_END};
static const mf_config_key_t mf__trace_keys[] = {
    {"file", LUA_TSTRING, 0, 0, NULL},
    {"sample", LUA_TNUMBER, 0, 1000000000, " (one request in N; 0: none)"},
    {"token", LUA_TSTRING, 0, 0, NULL},
    MF_CONFIG_END};
static const mf_config_key_t mf__metrics_keys[] = {
    {"path", LUA_TSTRING, 0, 0, NULL},
    {"listen", LUA_TSTRING, 0, 0, NULL},
    MF_CONFIG_END};
static const mf_config_key_t mf__compress_keys[] = {
    {"types", LUA_TTABLE, 0, 0, NULL},
    {"min_length", LUA_TNUMBER, 0, 9007199254740992.0, " (bytes)"},
    {"level", LUA_TNUMBER, 1, 9, " (gzip's)"},
    {"brotli", LUA_TBOOLEAN, 0, 0, NULL},
    {"brotli_level", LUA_TNUMBER, 0, 11, NULL},
    {"precompressed", LUA_TBOOLEAN, 0, 0, NULL},
    MF_CONFIG_END};
static const mf_config_key_t mf__route_keys[] = {
    {"file", LUA_TSTRING, 0, 0, NULL},
    MF_CONFIG_MS("timeout"),
    {"body", LUA_TSTRING, 0, 0, NULL},
    {"limit", LUA_TTABLE, 0, 0, NULL},
    {"compress", LUA_TNONE, 0, 0, NULL}, /* false or a table: its reader */
    MF_CONFIG_END};
static const mf_config_key_t mf__limit_keys[] = {
    {"req", LUA_TTABLE, 0, 0, NULL},
    {"conn", LUA_TTABLE, 0, 0, NULL},
    {"count", LUA_TTABLE, 0, 0, NULL},
    MF_CONFIG_END};
/* What every limit of a route takes, after its own numbers. */
#define MF_CONFIG_LIMIT_COMMON                                               \
    {"key", LUA_TSTRING, 0, 0, NULL}, {"dict", LUA_TSTRING, 0, 0, NULL},     \
        {"redis", LUA_TSTRING, 0, 0, NULL},                                  \
        {"on_redis_error", LUA_TSTRING, 0, 0, NULL},                         \
        {"status", LUA_TNUMBER, 400, 599, " (the answer to a refused one)"}, \
        MF_CONFIG_END
static const mf_config_key_t mf__limit_req_keys[] = {
    {"rate", LUA_TNUMBER, 1, 1e9, " (requests a second)"},
    {"burst", LUA_TNUMBER, 0, 1e9, " (requests)"},
    MF_CONFIG_LIMIT_COMMON};
static const mf_config_key_t mf__limit_conn_keys[] = {
    {"max", LUA_TNUMBER, 1, 1e9, " (requests in flight)"},
    {"burst", LUA_TNUMBER, 0, 1e9, " (requests)"},
    MF_CONFIG_LIMIT_COMMON};
static const mf_config_key_t mf__limit_count_keys[] = {
    {"limit", LUA_TNUMBER, 1, 1e9, " (requests a window)"},
    {"window", LUA_TNUMBER, 1, 1e9, " (seconds)"},
    MF_CONFIG_LIMIT_COMMON};

static const mf_config_key_t *mf__config_key(const mf_config_key_t *keys,
                                             const char *name)
{
    while (keys->name && strcmp(keys->name, name) != 0)
        keys++;
    return keys->name ? keys : NULL;
}

/* The value on top of L fits k (type, and for numbers: an integer in
 * range). */
static bool mf__config_value_fits(lua_State *L, const mf_config_key_t *k)
{
    if (k->type == LUA_TNONE)
        return true; /* a key of more than one type checks itself */
    if (lua_type(L, -1) != k->type)
        return false;
    if (k->type != LUA_TNUMBER)
        return true;
    double v = lua_tonumber(L, -1);
    return v >= k->min && v <= k->max && v == floor(v); /* NaN fails */
}

/* "an integer from 0 to 4294967295 (ms; 0: none) expected, got -1" */
static void mf__config_type_error(lua_State *L, const char *where,
                                  const char *name, const mf_config_key_t *k,
                                  char *err, size_t errlen)
{
    char got[64];
    if (lua_type(L, -1) == LUA_TNUMBER)
        snprintf(got, sizeof got, "%.14g", lua_tonumber(L, -1));
    else
        snprintf(got, sizeof got, "a %s", luaL_typename(L, -1));
    if (k->type == LUA_TNUMBER)
        snprintf(err, errlen,
                 "%s%s: an integer from %.0f to %.0f%s expected, "
                 "got %s",
                 where, name, k->min, k->max, k->unit ? k->unit : "", got);
    else
        snprintf(err, errlen, "%s%s: a %s expected, got %s", where, name,
                 lua_typename(L, k->type), got);
}

/* The key and value on top of L (as lua_next leaves them) are one of keys.
 * where names the table ("" or "limits." ...). */
static int mf__config_check_pair(lua_State *L, const char *where,
                                 const mf_config_key_t *keys, char *err,
                                 size_t errlen)
{
    const char *name =
        lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    const mf_config_key_t *k = name ? mf__config_key(keys, name) : NULL;
    if (!k) {
        snprintf(err, errlen, "%s%s: unknown key", where,
                 name ? name : "(a key that is not a string)");
        return -1;
    }
    if (!mf__config_value_fits(L, k)) {
        mf__config_type_error(L, where, name, k, err, errlen);
        return -1;
    }
    return 0;
}

/* Every key of the table at t is one of keys. */
static int mf__config_check(lua_State *L, int t, const char *where,
                            const mf_config_key_t *keys, char *err,
                            size_t errlen)
{
    int top = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, t)) {
        if (mf__config_check_pair(L, where, keys, err, errlen) < 0) {
            lua_settop(L, top);
            return -1;
        }
        lua_pop(L, 1);
    }
    return 0;
}

/* A table with a certificate: cert and key, both or neither. */
static int mf__config_check_cert(lua_State *L, int t, const char *where,
                                 char *err, size_t errlen)
{
    if (!mf__field_string(L, t, "cert") == !mf__field_string(L, t, "key"))
        return 0;
    snprintf(err, errlen, "%s: cert and key go together", where);
    return -1;
}

/* tls.sni[name] = { cert = ..., key = ... }, the entry on top of L. */
static int mf__config_check_sni_entry(lua_State *L, char *err, size_t errlen)
{
    char where[128];
    bool named = lua_type(L, -2) == LUA_TSTRING;
    snprintf(where, sizeof where, "tls.sni[%.100s].",
             named ? lua_tostring(L, -2) : "?");
    if (!named || !lua_istable(L, -1)) {
        snprintf(err, errlen,
                 "tls.sni: each entry is [\"name\"] = { cert = ..., "
                 "key = ... }");
        return -1;
    }
    int e = lua_gettop(L);
    if (mf__config_check(L, e, where, mf__cert_keys, err, errlen) < 0)
        return -1;
    if (mf__field_string(L, e, "cert") && mf__field_string(L, e, "key"))
        return 0;
    snprintf(err, errlen, "%s: needs cert and key", where);
    return -1;
}

/* tls = { cert, key, sni = { [name] = { cert, key } } }: checked whole
 * before it is read, so no entry is dropped silently. */
static int mf__config_check_tls(lua_State *L, int t, char *err, size_t errlen)
{
    if (mf__config_check(L, t, "tls.", mf__tls_keys, err, errlen) < 0 ||
        mf__config_check_cert(L, t, "tls", err, errlen) < 0)
        return -1;
    mf__rawfield(L, t, "sni");
    int sni = lua_gettop(L), n = 0, rc = 0;
    if (lua_istable(L, sni)) {
        lua_pushnil(L);
        while (rc == 0 && lua_next(L, sni)) {
            rc = mf__config_check_sni_entry(L, err, errlen);
            if (rc == 0 && ++n > MF_SERVE_MAX_SNI) {
                snprintf(err, errlen, "tls.sni: more than %d names",
                         MF_SERVE_MAX_SNI);
                rc = -1;
            }
            lua_pop(L, 1);
        }
    }
    lua_settop(L, sni - 1);
    return rc;
}

/* A limit's key: what of the request it counts by. */
static bool mf__limit_key_ok(const char *key)
{
    static const char *const names[] = {"remote_addr", "uri", "host", "global",
                                        NULL};
    for (int i = 0; names[i]; i++)
        if (!strcmp(key, names[i]))
            return true;
    if (strncmp(key, "header:", 7) != 0 || !key[7])
        return false;
    for (const char *p = key + 7; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_')
            return false;
    return true;
}

/* Appends "\tname=value" for each key of the limit table at t to the
 * buffer (moonflow.limit's route() reads it back). */
static int mf__limit_fields(lua_State *L, int t, const char *where, char *buf,
                            size_t cap, size_t *len, char *err, size_t errlen)
{
    lua_pushnil(L);
    while (lua_next(L, t)) {
        const char *name = lua_tostring(L, -2);
        char value[512];
        if (lua_type(L, -1) == LUA_TNUMBER)
            snprintf(value, sizeof value, "%.17g", lua_tonumber(L, -1));
        else
            snprintf(value, sizeof value, "%s", lua_tostring(L, -1));
        if (strpbrk(value, "\t\n")) {
            snprintf(err, errlen, "%s%s: no tab or newline expected", where,
                     name);
            return -1;
        }
        if (!strcmp(name, "key") && !mf__limit_key_ok(value)) {
            snprintf(err, errlen,
                     "%skey: \"remote_addr\", \"uri\", \"host\", "
                     "\"global\" or \"header:NAME\" expected, got '%.100s'",
                     where, value);
            return -1;
        }
        int n = snprintf(buf + *len, cap - *len, "\t%s=%s", name, value);
        if (n < 0 || (size_t)n >= cap - *len) {
            snprintf(err, errlen, "%s: too long", where);
            return -1;
        }
        *len += (size_t)n;
        lua_pop(L, 1);
    }
    return 0;
}

/* routes[path].limit = { req = {...}, conn = {...}, count = {...} }, the
 * table at t: checked, and written as lines "kind\tname=value..." into
 * *out (owned by the config). */
static int mf__config_route_limit(lua_State *L, int t, const char *path,
                                  mf_serve_config_t *c, const char **out,
                                  char *err, size_t errlen)
{
    static const struct {
        const char *kind, *needs, *needs2;
        const mf_config_key_t *keys;
    } kinds[] = {{"req", "rate", NULL, mf__limit_req_keys},
                 {"conn", "max", NULL, mf__limit_conn_keys},
                 {"count", "limit", "window", mf__limit_count_keys}};
    char where[160], buf[2048];
    size_t len = 0;
    snprintf(where, sizeof where, "routes[%.100s].limit.", path);
    if (mf__config_check(L, t, where, mf__limit_keys, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < MF_ARRAY_SIZE(kinds); i++) {
        mf__rawfield(L, t, kinds[i].kind);
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            continue;
        }
        int k = lua_gettop(L);
        snprintf(where, sizeof where, "routes[%.100s].limit.%s.", path,
                 kinds[i].kind);
        if (mf__config_check(L, k, where, kinds[i].keys, err, errlen) < 0)
            return -1;
        const char *need[] = {kinds[i].needs, kinds[i].needs2};
        for (int j = 0; j < 2; j++) {
            double v;
            if (need[j] && !mf__field_number(L, k, need[j], &v)) {
                snprintf(err, errlen, "%s%s: missing", where, need[j]);
                return -1;
            }
        }
        if (!mf__field_string(L, k, "dict") &&
            !mf__field_string(L, k, "redis")) {
            snprintf(err, errlen, "%sdict: missing (or redis)", where);
            return -1;
        }
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s",
                                len ? "\n" : "", kinds[i].kind);
        if (mf__limit_fields(L, k, where, buf, sizeof buf, &len, err, errlen) <
            0)
            return -1;
        lua_pop(L, 1);
    }
    *out = len ? mf_serve_config_strdup(c, buf) : NULL;
    return 0;
}

/* A media type of compress.types: "type/subtype", tokens, no parameters. */
static bool mf__config_media_type(const char *s, size_t len)
{
    const char *slash = memchr(s, '/', len);
    if (!slash || slash == s || slash == s + len - 1)
        return false;
    size_t a = (size_t)(slash - s), b = len - a - 1;
    return mf_http_field_name_valid(s, a) &&
           mf_http_field_name_valid(slash + 1, b);
}

/* where.types = { "text/html", ... }, the table at t: a list of media
 * types, copied into types (room for MF_HTTP_COMPRESS_MAX_TYPES). */
static int mf__config_compress_types(lua_State *L, int t, const char *where,
                                     mf_serve_config_t *c, const char **types,
                                     unsigned *ntypes, char *err, size_t errlen)
{
    size_t n = lua_objlen(L, t), seen = 0;
    if (n > MF_HTTP_COMPRESS_MAX_TYPES) {
        snprintf(err, errlen, "%stypes: at most %d types", where,
                 MF_HTTP_COMPRESS_MAX_TYPES);
        return -1;
    }
    lua_pushnil(L);
    while (lua_next(L, t)) {
        size_t len = 0;
        bool indexed = lua_type(L, -2) == LUA_TNUMBER &&
                       lua_tonumber(L, -2) >= 1 &&
                       lua_tonumber(L, -2) <= (double)n;
        const char *s =
            lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
        if (!indexed || !s || !mf__config_media_type(s, len)) {
            snprintf(err, errlen,
                     "%stypes: a list of media types like \"text/html\" "
                     "expected, got %s%.80s",
                     where, s ? "" : "a ", s ? s : luaL_typename(L, -1));
            return -1;
        }
        types[(size_t)lua_tonumber(L, -2) - 1] = mf_serve_config_strdup(c, s);
        seen++;
        lua_pop(L, 1);
    }
    if (seen != n) {
        snprintf(err, errlen, "%stypes: a list without holes expected", where);
        return -1;
    }
    *ntypes = (unsigned)n;
    return 0;
}

/* A compress table (the server's or a route's) at t: checked, then read
 * over the defaults into out, its types into types. where names it
 * ("compress." or "routes[/x].compress."). */
static int mf__config_compress(lua_State *L, int t, const char *where,
                               mf_serve_config_t *c,
                               mf_http_compress_config_t *out,
                               const char **types, char *err, size_t errlen)
{
    if (mf__config_check(L, t, where, mf__compress_keys, err, errlen) < 0)
        return -1;
    mf_http_compress_config_init(out);
    double v;
    if (mf__field_number(L, t, "min_length", &v))
        out->min_length = (size_t)v;
    if (mf__field_number(L, t, "level", &v))
        out->level = (int)v;
    if (mf__field_number(L, t, "brotli_level", &v))
        out->brotli_level = (int)v;
    mf__rawfield(L, t, "brotli");
    if (lua_isboolean(L, -1))
        out->brotli = lua_toboolean(L, -1);
    lua_pop(L, 1);
    mf__rawfield(L, t, "types");
    int rc = 0;
    if (lua_istable(L, -1)) {
        rc = mf__config_compress_types(L, lua_gettop(L), where, c, types,
                                       &out->ntypes, err, errlen);
        out->types = types;
    }
    lua_pop(L, 1);
    return rc;
}

/* routes[path].compress, on top of L: false (none) or a table of its own;
 * sets r's own_compress and compress. */
static int mf__config_route_compress(lua_State *L, const char *path,
                                     mf_serve_config_t *c,
                                     mf_serve_route_spec_t *r, char *err,
                                     size_t errlen)
{
    if (lua_isnil(L, -1))
        return 0;
    char where[140];
    snprintf(where, sizeof where, "routes[%.100s].compress.", path);
    if (lua_isboolean(L, -1) && !lua_toboolean(L, -1)) {
        r->own_compress = true; /* none on this route */
        return 0;
    }
    if (!lua_istable(L, -1)) {
        snprintf(err, errlen,
                 "routes[%.100s].compress: false or a table expected, got "
                 "%s",
                 path, lua_isboolean(L, -1) ? "true" : luaL_typename(L, -1));
        return -1;
    }
    mf_http_compress_config_t *cc =
        (mf_http_compress_config_t *)(void *)mf__config_string(c, sizeof(*cc));
    const char **types = (const char **)(void *)mf__config_string(
        c, MF_HTTP_COMPRESS_MAX_TYPES * sizeof(*types));
    if (mf__config_compress(L, lua_gettop(L), where, c, cc, types, err,
                            errlen) < 0)
        return -1;
    mf__rawfield(L, lua_gettop(L), "precompressed");
    if (!lua_isnil(L, -1)) {
        snprintf(err, errlen,
                 "routes[%.100s].compress.precompressed: only in the top "
                 "level's compress (it is for static mounts)",
                 path);
        return -1;
    }
    lua_pop(L, 1);
    r->own_compress = true;
    r->compress = cc;
    return 0;
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
        const char *body = NULL, *limit = NULL;
        mf_serve_route_spec_t spec = {0};
        if (lua_istable(L, -1)) {
            char where[128];
            snprintf(where, sizeof where, "routes[%.100s].", path ? path : "?");
            if (mf__config_check(L, lua_gettop(L), where, mf__route_keys, err,
                                 errlen) < 0)
                return -1;
            mf__field_number(L, lua_gettop(L), "timeout", &timeout);
            body = mf__field_string(L, lua_gettop(L), "body");
            mf__rawfield(L, -1, "limit");
            if (lua_istable(L, -1) &&
                mf__config_route_limit(L, lua_gettop(L), path ? path : "?", c,
                                       &limit, err, errlen) < 0)
                return -1;
            lua_pop(L, 1);
            mf__rawfield(L, -1, "compress");
            if (mf__config_route_compress(L, path ? path : "?", c, &spec, err,
                                          errlen) < 0)
                return -1;
            lua_pop(L, 1);
        }
        if (body && strcmp(body, "stream") != 0) {
            snprintf(err, errlen,
                     "routes[%.100s].body: \"stream\" or nothing (the body "
                     "read before the handler)",
                     path ? path : "?");
            return -1;
        }
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
        r->stream_body = body != NULL;
        r->limit = limit;
        r->compress = spec.compress;
        r->own_compress = spec.own_compress;
        lua_pop(L, 1);
    }
    return 0;
}

/* shared = { name = bytes, ... }: identifiers, and capacities a dict
 * accepts (moonflow/shdict.h). The name rule is the registry's
 * (mf_lua_shared_check_name), checked here without the Lua host so that
 * this file builds alone (the config's fuzz target). */
static bool mf__config_dict_name(const char *name)
{
    size_t len = strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"
                              "VWXYZ0123456789_");
    return len > 0 && len <= MF_LUA_SHARED_MAX_NAME && !name[len] &&
           !(name[0] >= '0' && name[0] <= '9');
}

static const mf_config_key_t mf__shared_bytes = {
    "", LUA_TNUMBER, MF_SHDICT_MIN_CAPACITY, (double)MF_SHDICT_MAX_CAPACITY,
    " (bytes)"};

static int mf__config_shared(lua_State *L, int t, mf_serve_config_t *c,
                             char *err, size_t errlen)
{
    lua_pushnil(L);
    while (lua_next(L, t)) {
        const char *name =
            lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (!name || !mf__config_dict_name(name)) {
            snprintf(err, errlen,
                     "shared.%.100s: a dict name expected (letters, digits "
                     "and _, not first a digit, up to %d bytes)",
                     name ? name : "(a key that is not a string)",
                     MF_LUA_SHARED_MAX_NAME);
            return -1;
        }
        if (!mf__config_value_fits(L, &mf__shared_bytes)) {
            mf__config_type_error(L, "shared.", name, &mf__shared_bytes, err,
                                  errlen);
            return -1;
        }
        if (c->nshared == MF_LUA_SHARED_MAX) {
            snprintf(err, errlen, "shared: more than %d dicts",
                     MF_LUA_SHARED_MAX);
            return -1;
        }
        c->shared[c->nshared].name = mf_serve_config_strdup(c, name);
        c->shared[c->nshared++].bytes = (size_t)lua_tonumber(L, -1);
        lua_pop(L, 1);
    }
    return 0;
}

/* The sections (subtables): each is checked, then read. */
typedef int (*mf_config_section_fn)(lua_State *L, int t, mf_serve_config_t *c,
                                    const char *dir, char *err, size_t errlen);

static int mf__config_section_limits(lua_State *L, int t, mf_serve_config_t *c,
                                     const char *dir, char *err, size_t errlen)
{
    (void)dir;
    if (mf__config_check(L, t, "limits.", mf__limits_keys, err, errlen) < 0)
        return -1;
    mf__config_limits(L, t, c);
    return 0;
}

static int mf__config_section_timeouts(lua_State *L, int t,
                                       mf_serve_config_t *c, const char *dir,
                                       char *err, size_t errlen)
{
    (void)dir;
    if (mf__config_check(L, t, "timeouts.", mf__timeouts_keys, err, errlen) < 0)
        return -1;
    mf__config_timeouts(L, t, c);
    return 0;
}

static int mf__config_section_tls(lua_State *L, int t, mf_serve_config_t *c,
                                  const char *dir, char *err, size_t errlen)
{
    if (mf__config_check_tls(L, t, err, errlen) < 0)
        return -1;
    mf__config_tls(L, t, c, dir);
    return 0;
}

/* http2 = { ... }: HTTP/2 beside HTTP/1.1 (moonflow/http_server.h). */
static int mf__config_section_http2(lua_State *L, int t, mf_serve_config_t *c,
                                    const char *dir, char *err, size_t errlen)
{
    mf_http2_config_t *h2 = &c->http.http2;
    (void)dir;
    if (mf__config_check(L, t, "http2.", mf__http2_keys, err, errlen) < 0)
        return -1;
    mf__rawfield(L, t, "enabled");
    if (lua_isboolean(L, -1))
        h2->enabled = lua_toboolean(L, -1);
    lua_pop(L, 1);
    mf__config_u32(L, t, "max_concurrent_streams", &h2->max_concurrent_streams);
    mf__config_u32(L, t, "max_header_list_size", &h2->max_header_list_size);
    mf__config_u32(L, t, "max_frame_size", &h2->max_frame_size);
    mf__config_u32(L, t, "initial_window_size", &h2->initial_window_size);
    return 0;
}

static int mf__config_section_routes(lua_State *L, int t, mf_serve_config_t *c,
                                     const char *dir, char *err, size_t errlen)
{
    (void)dir;
    return mf__config_routes(L, t, c, err, errlen);
}

static int mf__config_section_shared(lua_State *L, int t, mf_serve_config_t *c,
                                     const char *dir, char *err, size_t errlen)
{
    (void)dir;
    return mf__config_shared(L, t, c, err, errlen);
}

/* metrics = { path = "/metrics" }: the page, a path of its own. */
static int mf__config_section_metrics(lua_State *L, int t, mf_serve_config_t *c,
                                      const char *dir, char *err, size_t errlen)
{
    (void)dir;
    if (mf__config_check(L, t, "metrics.", mf__metrics_keys, err, errlen) < 0)
        return -1;
    const char *path = mf__field_string(L, t, "path");
    if (!path || path[0] != '/' || strpbrk(path, "?# \t\r\n")) {
        snprintf(err, errlen,
                 "metrics.path: a path starting with / (no query) "
                 "expected, got %s",
                 path ? path : "none");
        return -1;
    }
    c->metrics_path = mf_serve_config_strdup(c, path);
    const char *listen = mf__field_string(L, t, "listen");
    char why[200];
    if (listen && mf_serve_check_listen(listen, why, sizeof why) < 0) {
        snprintf(err, errlen, "metrics.listen: %s", why);
        return -1;
    }
    c->metrics_listen = listen ? mf_serve_config_strdup(c, listen) : NULL;
    return 0;
}

/* trace = { file = "trace.jsonl", sample = 100, token = "..." } */
static int mf__config_section_trace(lua_State *L, int t, mf_serve_config_t *c,
                                    const char *dir, char *err, size_t errlen)
{
    if (mf__config_check(L, t, "trace.", mf__trace_keys, err, errlen) < 0)
        return -1;
    const char *file = mf__field_string(L, t, "file");
    if (!file || !*file) {
        snprintf(err, errlen, "trace.file: a file name expected, got %s",
                 file ? "\"\"" : "none");
        return -1;
    }
    c->trace_file = mf__config_path(c, dir, file);
    double v;
    if (mf__field_number(L, t, "sample", &v))
        c->trace_sample = (uint32_t)v;
    const char *token = mf__field_string(L, t, "token");
    if (token && (!*token || strlen(token) > 128)) {
        snprintf(err, errlen, "trace.token: 1 to 128 bytes expected");
        return -1;
    }
    c->trace_token = token ? mf_serve_config_strdup(c, token) : NULL;
    return 0;
}

/* One group of upstreams: read as mf.upstream reads it, copied into the
 * config (its addresses checked when it is defined, at start). */
static int mf__config_upstream(lua_State *L, mf_serve_config_t *c,
                               const char *name, char *err, size_t errlen)
{
    if (c->nupstreams == MF_SERVE_MAX_UPSTREAMS) {
        snprintf(err, errlen, "upstreams: at most %d groups",
                 MF_SERVE_MAX_UPSTREAMS);
        return -1;
    }
    struct mf_serve_upstream_spec *u = &c->upstreams[c->nupstreams];
    mf_upstream_server_conf_t servers[MF_UPSTREAM_MAX_SERVERS];
    char why[300];
    if (mf_lua_upstream_read(L, -1, &u->conf, servers, &u->nservers, why,
                             sizeof why) < 0) {
        snprintf(err, errlen, "upstreams.%s: %s", name, why);
        return -1;
    }
    u->name = mf_serve_config_strdup(c, name);
    u->servers = (mf_upstream_server_conf_t *)mf__config_string(
        c, u->nservers * sizeof(*u->servers));
    for (size_t i = 0; i < u->nservers; i++) {
        u->servers[i] = servers[i];
        u->servers[i].address = mf_serve_config_strdup(c, servers[i].address);
    }
    c->nupstreams++;
    return 0;
}

/* upstreams = { api = { servers = {...}, policy =, health = {...} } }:
 * the process's groups, defined at start (a balancer is set from
 * init_worker with mf.upstream). */
static int mf__config_section_upstreams(lua_State *L, int t,
                                        mf_serve_config_t *c, const char *dir,
                                        char *err, size_t errlen)
{
    (void)dir;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        const char *name =
            lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (!name || !lua_istable(L, -1)) {
            snprintf(err, errlen,
                     "upstreams: name = { servers = ... } entries expected");
            return -1;
        }
        if (mf__config_upstream(L, c, name, err, errlen) < 0)
            return -1;
        lua_pop(L, 1);
    }
    return 0;
}

/* compress = {...}: the server's (moonflow/http_compress.h); absent:
 * none. */
static int mf__config_section_compress(lua_State *L, int t,
                                       mf_serve_config_t *c, const char *dir,
                                       char *err, size_t errlen)
{
    (void)dir;
    if (mf__config_compress(L, t, "compress.", c, &c->compress,
                            c->compress_types, err, errlen) < 0)
        return -1;
    c->http.compress = &c->compress;
    mf__rawfield(L, t, "precompressed");
    c->static_precompressed = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return 0;
}

/* One mount of static = { ["/assets"] = "public/" }: the prefix kept
 * without its trailing "/", the folder as given (taken from the scripts
 * folder when relative, as routes' files are). */
static int mf__config_static_mount(mf_serve_config_t *c, const char *prefix,
                                   const char *dir, char *err, size_t errlen)
{
    if (!prefix || prefix[0] != '/' || strpbrk(prefix, "?#% \t\r\n") ||
        strstr(prefix, "/../") || !dir || !*dir) {
        snprintf(err, errlen,
                 "static: each entry is [\"/prefix\"] = \"folder\" (a path "
                 "starting with /, no query, no %%-escape), got [%s]",
                 prefix ? prefix : "?");
        return -1;
    }
    if (c->nstatics == MF_SERVE_MAX_STATIC) {
        snprintf(err, errlen, "static: at most %d mounts", MF_SERVE_MAX_STATIC);
        return -1;
    }
    size_t len = strlen(prefix);
    while (len && prefix[len - 1] == '/')
        len--;
    char *kept = mf__config_string(c, len + 1);
    memcpy(kept, prefix, len);
    kept[len] = '\0';
    size_t i = c->nstatics++;
    /* longest prefix first: "/a/b" is tried before "/a" */
    while (i && strlen(c->statics[i - 1].prefix) < len) {
        c->statics[i] = c->statics[i - 1];
        i--;
    }
    c->statics[i].prefix = kept;
    c->statics[i].dir = mf_serve_config_strdup(c, dir);
    return 0;
}

static int mf__config_section_static(lua_State *L, int t, mf_serve_config_t *c,
                                     const char *dir, char *err, size_t errlen)
{
    (void)dir;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        const char *prefix =
            lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        const char *folder =
            lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (mf__config_static_mount(c, prefix, folder, err, errlen) < 0)
            return -1;
        lua_pop(L, 1);
    }
    return 0;
}

static const struct {
    const char *name;
    mf_config_section_fn read;
} mf__config_section_table[] = {{"static", mf__config_section_static},
                                {"upstreams", mf__config_section_upstreams},
                                {"limits", mf__config_section_limits},
                                {"timeouts", mf__config_section_timeouts},
                                {"tls", mf__config_section_tls},
                                {"http2", mf__config_section_http2},
                                {"routes", mf__config_section_routes},
                                {"shared", mf__config_section_shared},
                                {"metrics", mf__config_section_metrics},
                                {"trace", mf__config_section_trace},
                                {"compress", mf__config_section_compress}};

static int mf__config_sections(lua_State *L, int t, mf_serve_config_t *c,
                               const char *dir, char *err, size_t errlen)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < MF_ARRAY_SIZE(mf__config_section_table);
         i++) {
        mf__rawfield(L, t, mf__config_section_table[i].name);
        if (lua_istable(L, -1))
            rc = mf__config_section_table[i].read(L, lua_gettop(L), c, dir, err,
                                                  errlen);
        lua_settop(L, t);
    }
    return rc;
}

/* request_id_header: a field name the handlers may set (not one the server
 * manages: the answer would become a 500), or "off". */
static int mf__config_id_header(mf_serve_config_t *c, const char *s, char *err,
                                size_t errlen)
{
    static const char *const managed[] = {"content-length", "transfer-encoding",
                                          "connection", "keep-alive", "date"};
    size_t len = strlen(s);
    bool ok = len <= MF_SERVE_ID_HEADER_MAX && mf_http_field_name_valid(s, len);
    for (size_t i = 0; ok && i < MF_ARRAY_SIZE(managed); i++)
        ok = strcasecmp(s, managed[i]) != 0;
    if (!ok) {
        snprintf(err, errlen,
                 "request_id_header: a header name (a token of at most %d "
                 "bytes, not one the server sets) or \"off\" expected, got "
                 "\"%.80s\"",
                 MF_SERVE_ID_HEADER_MAX, s);
        return -1;
    }
    c->request_id_header =
        strcmp(s, "off") ? mf_serve_config_strdup(c, s) : NULL;
    return 0;
}

/* The top-level keys, then the sections; the table at t. */
static int mf__config_read_table(lua_State *L, int t, mf_serve_config_t *c,
                                 const char *dir, char *err, size_t errlen)
{
    const char *s;
    double v;
    if (mf__config_check(L, t, "", mf__top_keys, err, errlen) < 0)
        return -1;
    if ((s = mf__field_string(L, t, "listen"))) {
        char why[200];
        if (mf_serve_check_listen(s, why, sizeof why) < 0) {
            snprintf(err, errlen, "listen: %s", why);
            return -1;
        }
        c->http.listen = mf_serve_config_strdup(c, s);
    }
    if ((s = mf__field_string(L, t, "root")))
        c->root = mf__config_path(c, dir, s);
    if ((s = mf__field_string(L, t, "access_log")))
        c->access_log = mf__config_path(c, dir, s);
    if ((s = mf__field_string(L, t, "access_log_format"))) {
        if (strcmp(s, "combined") && strcmp(s, "json")) {
            snprintf(err, errlen,
                     "access_log_format: \"combined\" or \"json\" "
                     "expected, got \"%s\"",
                     s);
            return -1;
        }
        c->access_log_json = !strcmp(s, "json");
    }
    if ((s = mf__field_string(L, t, "request_id_header")) &&
        mf__config_id_header(c, s, err, errlen) < 0)
        return -1;
    if ((s = mf__field_string(L, t, "init")))
        c->init = mf__config_path(c, dir, s);
    if ((s = mf__field_string(L, t, "init_worker")))
        c->init_worker = mf__config_path(c, dir, s);
    mf__rawfield(L, t, "jit");
    if (lua_isboolean(L, -1))
        c->jit = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if ((s = mf__field_string(L, t, "log_level")) &&
        !(c->log_level = mf_lua_log_level(s))) {
        snprintf(err, errlen,
                 "log_level: \"%s\" is not a level (debug, info, notice, "
                 "warn, error, crit, alert or emerg)",
                 s);
        return -1;
    }
    if (mf__field_number(L, t, "workers", &v))
        c->workers = (unsigned)v; /* checked: 0 to MF_SERVE_MAX_WORKERS */
    return mf__config_sections(L, t, c, dir, err, errlen);
}

int mf_serve_config_read(mf_serve_config_t *c, lua_State *L, const char *dir,
                         char *err, size_t errlen)
{
    int t = lua_gettop(L);
    if (!lua_istable(L, t)) {
        snprintf(err, errlen, "the config must return a table");
        return -1;
    }
    int rc = mf__config_read_table(L, t, c, dir, err, errlen);
    lua_settop(L, t); /* a failed check may leave its keys */
    return rc;
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
        const char *why = lua_tostring(L, -1);
        snprintf(err, errlen, "%s%s%s", why ? "" : file, why ? "" : ": raised ",
                 why ? why : luaL_typename(L, -1));
    } else {
        char msg[400];
        c->file = mf_serve_config_strdup(c, file);
        rc = mf_serve_config_read(
            c, L, dirname(mf_serve_config_strdup(c, file)), msg, sizeof msg);
        if (rc < 0)
            snprintf(err, errlen, "%s: %s", file, msg);
    }
    lua_close(L);
    return rc;
}
