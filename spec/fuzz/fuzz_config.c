/*
 * fuzz_config.c — the config reader of `moonflow serve`
 * (mf_serve_config_read: lua/serve/config.c, with config_check.c's listen
 * check) over configs made from the input. An input whose first byte is
 * even is a Lua chunk as given (libFuzzer mutates the seed configs); an odd one
 * is decoded into a table constructor — known and unknown keys at every level,
 * numbers at and past each range's ends (NaN, infinities, fractions), odd
 * strings, functions, tables with metamethods that raise — written out as Lua
 * source. Either way the chunk runs in a fresh state: base, string, table and
 * math libraries without what touches files or prints, the JIT off so an
 * instruction-count hook bounds it, and its memory from a hand-poisoned arena
 * (1 MiB for the chunk). What it returns goes to the reader, which must give 0
 * and a config within its ranges, or -1 and a message, leave the stack as it
 * was, and free everything it kept (LeakSanitizer) — never crash.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <luajit.h>
#include <lualib.h>
#include <sanitizer/asan_interface.h>

#include <moonflow/dns.h>

#include "fuzz_assert.h"
#include "serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- a bounded Lua state ------------------------------------------------- */

/* The state's memory is one arena per process, handed out by bumping and
 * reset for each input: ASan's malloc for every Lua object made a fresh
 * state four times slower. Blocks are poisoned by hand instead — freed
 * ones, and 16 bytes after each — so a read of freed Lua memory (a string
 * used after its anchor is gone) or past a block still stops the run.
 * Nothing is reused within an input: a chunk may allocate 1 MiB in all. */
#define FUZZ_ARENA (4u << 20)
#define FUZZ_CHUNK_LIMIT (1u << 20)
#define FUZZ_REDZONE 16
#define FUZZ_INSTRUCTIONS 200000
#define FUZZ_HOOK_EVERY 1000

typedef struct fuzz_heap {
    unsigned char *base;
    size_t top;   /* bytes handed out, redzones included */
    size_t limit; /* FUZZ_CHUNK_LIMIT while the chunk runs, then the arena */
} fuzz_heap_t;

static fuzz_heap_t *fuzz_heap_reset(void)
{
    static fuzz_heap_t heap;
    if (!heap.base) {
        heap.base = malloc(FUZZ_ARENA);
        FUZZ_CHECK(heap.base != NULL);
    }
    ASAN_POISON_MEMORY_REGION(heap.base, FUZZ_ARENA);
    heap.top = 0;
    heap.limit = FUZZ_CHUNK_LIMIT;
    return &heap;
}

static void *fuzz_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    fuzz_heap_t *h = ud;
    if (ptr && nsize <= osize) { /* freed, or shrunk in place */
        ASAN_POISON_MEMORY_REGION((unsigned char *)ptr + nsize, osize - nsize);
        return nsize ? ptr : NULL;
    }
    size_t need = (nsize + FUZZ_REDZONE + 15) & ~(size_t)15;
    if (nsize == 0 || need > h->limit - h->top)
        return NULL;
    void *p = h->base + h->top;
    h->top += need;
    ASAN_UNPOISON_MEMORY_REGION(p, nsize);
    if (ptr) {
        memcpy(p, ptr, osize);
        ASAN_POISON_MEMORY_REGION(ptr, osize);
    }
    return p;
}

static int fuzz_steps;

static void fuzz_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    fuzz_steps += FUZZ_HOOK_EVERY;
    if (fuzz_steps > FUZZ_INSTRUCTIONS)
        luaL_error(L, "instruction limit");
}

/* What a config could use, less what reaches files, prints or runs code at
 * collection; the pattern functions go too (backtracking on a long string
 * is seconds of C that no hook bounds). */
static void fuzz_open_libs(lua_State *L)
{
    static const lua_CFunction libs[] = {luaopen_base, luaopen_string,
                                         luaopen_table, luaopen_math};
    for (size_t i = 0; i < sizeof libs / sizeof *libs; i++) {
        lua_pushcfunction(L, libs[i]);
        lua_call(L, 0, 0);
    }
    static const char *const drop[] = {"print",    "dofile",  "loadfile",
                                       "newproxy", "require", "module"};
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++) {
        lua_pushnil(L);
        lua_setglobal(L, drop[i]);
    }
    static const char *const patterns[] = {"find", "match", "gmatch", "gsub"};
    lua_getglobal(L, "string");
    for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++) {
        lua_pushnil(L);
        lua_setfield(L, -2, patterns[i]);
    }
    lua_pop(L, 1);
}

/* ---- table constructors from bytes ----------------------------------------
 */

typedef struct fuzz_gen {
    const uint8_t *p;
    size_t n;
    char *out;
    size_t len, cap;
} fuzz_gen_t;

static unsigned fuzz_byte(fuzz_gen_t *g)
{
    if (!g->n)
        return 0;
    g->n--;
    return *g->p++;
}

static void fuzz_put(fuzz_gen_t *g, const char *s)
{
    size_t n = strlen(s);
    if (g->len + n + 1 > g->cap) {
        g->cap = (g->len + n + 1) * 2;
        g->out = realloc(g->out, g->cap);
        FUZZ_CHECK(g->out != NULL);
    }
    memcpy(g->out + g->len, s, n + 1);
    g->len += n;
}

/* Every key the reader knows, at any level, and some it does not. */
static const char *const fuzz_any_keys[] = {"listen",
                                            "root",
                                            "access_log",
                                            "workers",
                                            "limits",
                                            "timeouts",
                                            "tls",
                                            "http2",
                                            "routes",
                                            "max_body",
                                            "max_head",
                                            "max_line",
                                            "max_headers",
                                            "max_connections",
                                            "header",
                                            "body",
                                            "keepalive",
                                            "write",
                                            "handler",
                                            "cert",
                                            "key",
                                            "sni",
                                            "enabled",
                                            "max_frame_size",
                                            "initial_window_size",
                                            "file",
                                            "timeout",
                                            "compress",
                                            "types",
                                            "level",
                                            "/",
                                            "/api",
                                            "api.test",
                                            "wrokers",
                                            "",
                                            "__index",
                                            "1"};

/* The keys of each table the reader knows, by the key that holds it: a
 * table under "limits" mostly gets limits' keys, so inputs get past the
 * first level. */
static const char *const fuzz_top[] = {"listen",  "root",   "access_log",
                                       "workers", "limits", "timeouts",
                                       "tls",     "routes", "compress",
                                       "http2"};
static const char *const fuzz_limits[] = {"max_body", "max_head", "max_line",
                                          "max_headers", "max_connections"};
static const char *const fuzz_timeouts[] = {"header", "body", "keepalive",
                                            "write", "handler"};
static const char *const fuzz_tls[] = {"cert", "key", "sni"};
static const char *const fuzz_http2[] = {
    "enabled", "max_concurrent_streams", "max_header_list_size",
    "max_frame_size", "initial_window_size"};
static const char *const fuzz_names[] = {"api.test", "a", "", "x.y"};
static const char *const fuzz_cert[] = {"cert", "key"};
static const char *const fuzz_paths[] = {"/", "/a", "/api/x", "x", ""};
static const char *const fuzz_route[] = {"file", "timeout", "compress"};
static const char *const fuzz_compress[] = {"types", "min_length", "level",
                                            "brotli", "brotli_level"};

typedef struct fuzz_keys {
    const char *const *list;
    size_t n;
} fuzz_keys_t;

#define FUZZ_KEYS(a) ((fuzz_keys_t){a, sizeof a / sizeof *a})

/* The keys of a table held by key parent (NULL: the top). */
static fuzz_keys_t fuzz_keys_under(const char *parent, const char *grand)
{
    if (!parent)
        return FUZZ_KEYS(fuzz_top);
    if (!strcmp(parent, "limits"))
        return FUZZ_KEYS(fuzz_limits);
    if (!strcmp(parent, "timeouts"))
        return FUZZ_KEYS(fuzz_timeouts);
    if (!strcmp(parent, "tls"))
        return FUZZ_KEYS(fuzz_tls);
    if (!strcmp(parent, "http2"))
        return FUZZ_KEYS(fuzz_http2);
    if (!strcmp(parent, "sni"))
        return FUZZ_KEYS(fuzz_names);
    if (!strcmp(parent, "routes"))
        return FUZZ_KEYS(fuzz_paths);
    if (!strcmp(parent, "compress"))
        return FUZZ_KEYS(fuzz_compress);
    if (grand && !strcmp(grand, "sni"))
        return FUZZ_KEYS(fuzz_cert);
    if (grand && !strcmp(grand, "routes"))
        return FUZZ_KEYS(fuzz_route);
    return FUZZ_KEYS(fuzz_any_keys);
}

static const char *const fuzz_numbers[] = {"0",
                                           "1",
                                           "-1",
                                           "0.5",
                                           "100",
                                           "101",
                                           "1024",
                                           "1025",
                                           "65535",
                                           "16777216",
                                           "16777217",
                                           "4294967295",
                                           "4294967296",
                                           "1e12",
                                           "9007199254740992",
                                           "9007199254740993",
                                           "0/0",
                                           "1/0",
                                           "-1/0",
                                           "-0",
                                           "2^31",
                                           "1048576",
                                           "1048577"};

static const char *const fuzz_strings[] = {"127.0.0.1:8080",
                                           ":0",
                                           "[::1]:80",
                                           "localhost:99999",
                                           "*:80",
                                           "[::1",
                                           "a:b:c",
                                           "off",
                                           "-",
                                           "a.lua",
                                           "",
                                           "/abs/x.lua",
                                           "../up.lua",
                                           "x\\0y",
                                           "c.pem",
                                           "k.pem"};

static void fuzz_value(fuzz_gen_t *g, int depth, const char *key,
                       const char *parent);

/* A quoted string of the next few bytes, each escaped as \ddd. */
static void fuzz_raw_string(fuzz_gen_t *g)
{
    unsigned n = fuzz_byte(g) % 12;
    fuzz_put(g, "\"");
    for (unsigned i = 0; i < n; i++) {
        char esc[8];
        snprintf(esc, sizeof esc, "\\%u", fuzz_byte(g));
        fuzz_put(g, esc);
    }
    fuzz_put(g, "\"");
}

static const char *fuzz_pick(fuzz_gen_t *g, const char *const *list, size_t n,
                             int quote)
{
    const char *s = list[fuzz_byte(g) % n];
    if (quote)
        fuzz_put(g, "\"");
    fuzz_put(g, s);
    if (quote)
        fuzz_put(g, "\"");
    return s;
}

/* Writes a key: mostly one of keys; returns it (NULL for another kind). */
static const char *fuzz_key(fuzz_gen_t *g, fuzz_keys_t keys)
{
    switch (fuzz_byte(g) % 8) {
    case 0:
        return fuzz_pick(g, fuzz_any_keys,
                         sizeof fuzz_any_keys / sizeof *fuzz_any_keys, 1);
    case 1:
        fuzz_raw_string(g);
        return NULL;
    case 2:
        fuzz_pick(g, fuzz_numbers, 6, 0); /* numbers that are valid keys */
        return NULL;
    case 3:
        fuzz_put(g, fuzz_byte(g) & 1 ? "true" : "false");
        return NULL;
    default:
        return fuzz_pick(g, keys.list, keys.n, 1);
    }
}

/* A table constructor held by key (NULL: the top) inside parent. */
static void fuzz_table(fuzz_gen_t *g, int depth, const char *key,
                       const char *parent)
{
    fuzz_keys_t keys = fuzz_keys_under(key, parent);
    unsigned n = fuzz_byte(g) % 9;
    fuzz_put(g, "{");
    for (unsigned i = 0; i < n && g->n; i++) {
        fuzz_put(g, "[");
        const char *k = fuzz_key(g, keys);
        fuzz_put(g, "]=");
        fuzz_value(g, depth + 1, k, key);
        fuzz_put(g, ",");
    }
    fuzz_put(g, "}");
}

static void fuzz_value(fuzz_gen_t *g, int depth, const char *key,
                       const char *parent)
{
    switch (fuzz_byte(g) % 12) {
    case 0:
    case 1:
        fuzz_pick(g, fuzz_numbers, sizeof fuzz_numbers / sizeof *fuzz_numbers,
                  0);
        return;
    case 2: {
        char num[16];
        snprintf(num, sizeof num, "%u", fuzz_byte(g) << 8 | fuzz_byte(g));
        fuzz_put(g, num);
        return;
    }
    case 3:
    case 4:
        fuzz_pick(g, fuzz_strings, sizeof fuzz_strings / sizeof *fuzz_strings,
                  1);
        return;
    case 5:
        fuzz_raw_string(g);
        return;
    case 6:
        fuzz_put(g, fuzz_byte(g) & 1 ? "true" : "function() end");
        return;
    case 7: /* raw reads only: these must never run */
        fuzz_put(g, "setmetatable({}, {__index = function() error('x') end, "
                    "__newindex = error, __len = error})");
        return;
    default:
        if (depth < 5)
            fuzz_table(g, depth, key, parent);
        else
            fuzz_put(g, "{}");
    }
}

/* ---- one input ----------------------------------------------------------- */

static const char *fuzz_source(const uint8_t *data, size_t size, fuzz_gen_t *g,
                               size_t *len)
{
    if (data[0] % 2 == 0) {
        *len = size - 1;
        return (const char *)data + 1;
    }
    g->p = data + 1;
    g->n = size - 1;
    fuzz_put(g, "return ");
    if (fuzz_byte(g) % 16)
        fuzz_table(g, 0, NULL, NULL);
    else
        fuzz_value(g, 0, NULL, NULL);
    *len = g->len;
    return g->out;
}

/* A compression config within the ranges the encoders take. */
static void fuzz_check_compress(const mf_http_compress_config_t *cc)
{
    FUZZ_CHECK(cc->level >= 1 && cc->level <= 9);
    FUZZ_CHECK(cc->brotli_level >= 0 && cc->brotli_level <= 11);
    FUZZ_CHECK(cc->ntypes <= MF_HTTP_COMPRESS_MAX_TYPES);
    for (unsigned i = 0; i < cc->ntypes; i++)
        FUZZ_CHECK(cc->types[i] && strchr(cc->types[i], '/'));
}

/* A config the reader accepted is one the server can take. */
static void fuzz_check_config(const mf_serve_config_t *c)
{
    mf_sockaddr_t addr;
    FUZZ_CHECK(c->workers <= MF_SERVE_MAX_WORKERS);
    FUZZ_CHECK(c->nroutes <= MF_SERVE_MAX_ROUTES);
    for (size_t i = 0; i < c->nroutes; i++) {
        FUZZ_CHECK(c->routes[i].path && c->routes[i].path[0] == '/');
        FUZZ_CHECK(c->routes[i].file != NULL);
        FUZZ_CHECK(!c->routes[i].compress || c->routes[i].own_compress);
        if (c->routes[i].compress)
            fuzz_check_compress(c->routes[i].compress);
    }
    if (c->http.compress)
        fuzz_check_compress(c->http.compress);
    FUZZ_CHECK(!c->http.tls.cert_file == !c->http.tls.key_file);
    FUZZ_CHECK(c->http.tls.sni_count <= MF_SERVE_MAX_SNI);
    for (size_t i = 0; i < c->http.tls.sni_count; i++)
        FUZZ_CHECK(c->sni[i].server_name && c->sni[i].cert_file &&
                   c->sni[i].key_file);
    FUZZ_CHECK(mf_sockaddr_parse_listen(c->http.listen, &addr) == 0);
    FUZZ_CHECK(c->http.limits.max_headers >= 1 &&
               c->http.limits.max_headers <= 100);
    FUZZ_CHECK(c->http.limits.max_head_bytes >= 1 &&
               c->http.limits.max_request_line >= 1);
    FUZZ_CHECK(c->http.max_connections >= 1);
    const mf_http2_config_t *h2 = &c->http.http2; /* RFC 9113 §6.5.2 */
    FUZZ_CHECK(h2->max_concurrent_streams >= 1 &&
               h2->max_header_list_size >= 1);
    FUZZ_CHECK(h2->max_frame_size >= 16384 && h2->max_frame_size <= 16777215);
    FUZZ_CHECK(h2->initial_window_size <= 2147483647u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || size > 4096)
        return 0;
    fuzz_heap_t *heap = fuzz_heap_reset();
    fuzz_gen_t gen = {0};
    lua_State *L = lua_newstate(fuzz_alloc, heap);
    FUZZ_CHECK(L != NULL);
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
    size_t len;
    const char *src = fuzz_source(data, size, &gen, &len);
    int ran = luaL_loadbuffer(L, src, len, "=config") == 0;
    if (ran) { /* most mutated chunks do not parse: no libraries for them */
        fuzz_open_libs(L);
        fuzz_steps = 0;
        lua_sethook(L, fuzz_hook, LUA_MASKCOUNT, FUZZ_HOOK_EVERY);
        ran = lua_pcall(L, 0, 1, 0) == 0;
    }
    lua_sethook(L, NULL, 0, 0);
    free(gen.out);
    if (ran) {
        heap->limit = FUZZ_ARENA; /* the reader's few strings never fail */
        mf_serve_config_t c;
        memset(&c, 0, sizeof c);
        c.http.listen = "127.0.0.1:8080";
        c.http.limits = (mf_http_limits_t)MF_HTTP_LIMITS_DEFAULT;
        c.http.max_connections = 10000;
        c.http.http2 = (mf_http2_config_t)MF_HTTP2_CONFIG_DEFAULT;
        char err[400];
        err[0] = '\0';
        int top = lua_gettop(L);
        int rc = mf_serve_config_read(&c, L, "/etc/moonflow", err, sizeof err);
        FUZZ_CHECK(lua_gettop(L) == top);
        FUZZ_CHECK(rc == 0 || rc == -1);
        if (rc == 0)
            fuzz_check_config(&c);
        else
            FUZZ_CHECK(err[0] != '\0' && strlen(err) < sizeof err);
        mf_serve_config_free(&c);
    }
    lua_close(L);
    return 0;
}
