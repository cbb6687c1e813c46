/*
 * lua/engine/mf_lua_go.c — the table of C functions mf.go can call: the
 * built-in ones and those registered by the program (moonflow/lua_go.h). The
 * task kind that runs one is lua/engine/mf_lua_task_go.c.
 *
 * Owns: the process-wide table (names and functions as registered).
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <moonflow/common.h>
#include <moonflow/error.h>

#include "host/mf_lua_int.h"
#include "mf_lua_go.h"

#define MF_LUA_GO_MAX_FUNCS 64

static struct {
    const char *name;
    mf_lua_go_fn fn;
} mf_lua__go_table[MF_LUA_GO_MAX_FUNCS];
static size_t mf_lua__go_count;

int mf_lua_go_register(const char *name, mf_lua_go_fn fn)
{
    if (mf_lua_go_find(name))
        return MF_EEXIST;
    if (mf_lua__go_count == MF_LUA_GO_MAX_FUNCS)
        return MF_ENOSPC;
    mf_lua__go_table[mf_lua__go_count].name = name;
    mf_lua__go_table[mf_lua__go_count].fn = fn;
    mf_lua__go_count++;
    return 0;
}

/* ---- built-in functions -------------------------------------------------- */

static int mf_lua__go_sha256(const mf_lua_go_args_t *args, char **out,
                             size_t *out_len)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (args->n != 1)
        return MF_EINVAL;
    if (!EVP_Digest(args->v[0], args->len[0], md, &mdlen, EVP_sha256(), NULL))
        return MF_EIO;
    *out = mf_xmalloc(2 * mdlen + 1);
    for (unsigned i = 0; i < mdlen; i++)
        snprintf(*out + 2 * i, 3, "%02x", md[i]);
    *out_len = 2 * mdlen;
    return 0;
}

static int mf_lua__go_sleep_ms(const mf_lua_go_args_t *args, char **out,
                               size_t *out_len)
{
    if (args->n != 1)
        return MF_EINVAL;
    long ms = strtol(args->v[0], NULL, 10);
    if (ms < 0)
        return MF_EINVAL;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
    *out = mf_xmalloc(args->len[0] + 1);
    memcpy(*out, args->v[0], args->len[0] + 1);
    *out_len = args->len[0];
    return 0;
}

mf_lua_go_fn mf_lua_go_find(const char *name)
{
    static const struct {
        const char *name;
        mf_lua_go_fn fn;
    } builtins[] = {{"sha256", mf_lua__go_sha256},
                    {"sleep_ms", mf_lua__go_sleep_ms}};
    for (size_t i = 0; i < MF_ARRAY_SIZE(builtins); i++)
        if (strcmp(builtins[i].name, name) == 0)
            return builtins[i].fn;
    for (size_t i = 0; i < mf_lua__go_count; i++)
        if (strcmp(mf_lua__go_table[i].name, name) == 0)
            return mf_lua__go_table[i].fn;
    return NULL;
}
