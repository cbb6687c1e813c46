/*
 * lua/util/mf_lua_crypto.c — the module moonflow.crypto behind mf.crypto:
 * digests, HMAC and random bytes from OpenSSL (already linked for TLS).
 *
 *   mf.crypto.md5(s) / .sha1(s) / .sha256(s) / .sha512(s)  raw digest
 *   mf.crypto.hmac(alg, key, s)   raw HMAC; alg "md5", "sha1", "sha256",
 *                                 "sha512"
 *   mf.crypto.random(n)           n bytes from OpenSSL's CSPRNG (n up to
 *                                 1 MiB)
 *
 * Raw bytes, as ngx.sha1_bin and ngx.hmac_sha1 give them: mf.hex.encode or
 * mf.base64.encode makes text of them. Misuse (an unknown algorithm, a
 * non-string, n out of range) raises; OpenSSL failing (it should not)
 * raises with its reason.
 *
 * Owns nothing past a call. May call: OpenSSL's EVP, HMAC and RAND.
 */
#include <lauxlib.h>
#include <limits.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <moonflow/lua_arg.h>

#include "host/mf_lua_int.h"
#include "mf_lua_util.h"

#define MF_CRYPTO_RANDOM_MAX (1024 * 1024)

static const EVP_MD *mf__crypto_md(const char *name)
{
    if (!strcmp(name, "md5"))
        return EVP_md5();
    if (!strcmp(name, "sha1"))
        return EVP_sha1();
    if (!strcmp(name, "sha256"))
        return EVP_sha256();
    if (!strcmp(name, "sha512"))
        return EVP_sha512();
    return NULL;
}

static int mf__crypto_fail(lua_State *L, const char *what)
{
    char reason[256];
    ERR_error_string_n(ERR_get_error(), reason, sizeof reason);
    ERR_clear_error();
    return luaL_error(L, "%s: %s", what, reason);
}

static int mf__crypto_digest(lua_State *L)
{
    const EVP_MD *md = lua_touserdata(L, lua_upvalueindex(1));
    size_t n;
    const char *s = mf_lua_check_lstring(L, 1, &n);
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!EVP_Digest(s, n, out, &len, md, NULL))
        return mf__crypto_fail(L, "digest");
    lua_pushlstring(L, (const char *)out, len);
    return 1;
}

static int mf__crypto_hmac(lua_State *L)
{
    const char *alg = mf_lua_check_string(L, 1);
    size_t klen, n;
    const char *key = mf_lua_check_lstring(L, 2, &klen);
    const char *s = mf_lua_check_lstring(L, 3, &n);
    const EVP_MD *md = mf__crypto_md(alg);
    if (!md)
        return mf_lua_arg_error(L, 1,
                                "\"md5\", \"sha1\", \"sha256\" or "
                                "\"sha512\" expected");
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (klen > INT_MAX ||
        !HMAC(md, key, (int)klen, (const unsigned char *)s, n, out, &len))
        return mf__crypto_fail(L, "hmac");
    lua_pushlstring(L, (const char *)out, len);
    return 1;
}

static int mf__crypto_random(lua_State *L)
{
    lua_Integer n = mf_lua_check_integer(L, 1);
    if (n < 0 || n > MF_CRYPTO_RANDOM_MAX)
        return mf_lua_arg_error(L, 1,
                                "a count of bytes from 0 to 1048576 "
                                "expected");
    unsigned char small[256];
    unsigned char *out =
        n <= (lua_Integer)sizeof small ? small : lua_newuserdata(L, (size_t)n);
    if (n > 0 && RAND_bytes(out, (int)n) != 1)
        return mf__crypto_fail(L, "random");
    lua_pushlstring(L, (const char *)out, (size_t)n);
    return 1;
}

int mf_lua_open_crypto(lua_State *L)
{
    static const char *const digests[] = {"md5", "sha1", "sha256", "sha512"};
    static const char *const usages[] = {
        "mf.crypto.md5(s)", "mf.crypto.sha1(s)", "mf.crypto.sha256(s)",
        "mf.crypto.sha512(s)"};
    lua_createtable(L, 0, 6);
    for (size_t i = 0; i < sizeof digests / sizeof *digests; i++) {
        lua_pushlightuserdata(L, (void *)mf__crypto_md(digests[i]));
        lua_pushcclosure(L, mf__crypto_digest, 1);
        mf_lua_name(L, usages[i]);
        lua_setfield(L, -2, digests[i]);
    }
    mf_lua_push_named(L, mf__crypto_hmac, "mf.crypto.hmac(alg, key, s)");
    lua_setfield(L, -2, "hmac");
    mf_lua_push_named(L, mf__crypto_random, "mf.crypto.random(n)");
    lua_setfield(L, -2, "random");
    return 1;
}
