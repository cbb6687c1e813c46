/*
 * lua/ngx_ffi/shdict.c — lua-nginx-module's shared dict entry points
 * (resty.core.shdict's ngx_http_lua_ffi_shdict_*) on moonflow's dicts
 * (moonflow/shdict.h, whose semantics are OpenResty's): a zone is an
 * mf_shdict_t *, which ngx_http_lua_ffi_shdict_udata_to_zone finds in a
 * dict object of mf.shared / ngx.shared (its userdata holds the pointer).
 *
 * Values cross with Lua's type numbers (nil 0, boolean 1, number 3, string
 * 4); TTLs in milliseconds; error words are the dict's (mf_shdict_strerror,
 * OpenResty's: "exists", "not found", "no memory", "not a number", "value
 * is a list"), static strings as resty.core expects.
 */
#include "ngx_ffi.h"

#include <stdbool.h>
#include <string.h>

#include <moonflow/shdict.h>

enum { LUA_T_NIL = 0, LUA_T_BOOLEAN = 1, LUA_T_NUMBER = 3, LUA_T_STRING = 4 };

/* A string read (copied by the dict into got, from malloc) to the caller:
 * into its buffer when it fits (*len bytes), else got's own memory is
 * handed over, which resty.core frees (C.free). */
static void ngx__hand_out_string(const mf_shdict_value_t *v,
                                 mf_shdict_buf_t *got, u_char **buf,
                                 size_t *len)
{
    if (v->len > *len) {
        *buf = (u_char *)got->data;
        got->data = NULL;
    } else if (v->len) {
        memcpy(*buf, v->str, v->len);
    }
    *len = v->len;
}

int ngx_http_lua_ffi_shdict_get(void *zone, const u_char *key, size_t key_len,
                                int *value_type, u_char **str_value_buf,
                                size_t *str_value_len, double *num_value,
                                int *user_flags, int get_stale, int *is_stale,
                                char **errmsg)
{
    mf_shdict_value_t v;
    mf_shdict_buf_t got = {NULL, 0};
    uint32_t flags = 0;
    bool stale = false;
    *errmsg = NULL;
    *is_stale = 0;
    int rc = mf_shdict_get(zone, (const char *)key, key_len, get_stale != 0, &v,
                           &flags, &stale, &got);
    if (rc == 0 && v.type == MF_SHDICT_STRING)
        ngx__hand_out_string(&v, &got, str_value_buf, str_value_len);
    mf_shdict_buf_free(&got);
    if (rc == MF_SHDICT_NOT_FOUND) {
        *value_type = LUA_T_NIL;
        return NGX_FFI_OK;
    }
    if (rc != 0) {
        *errmsg = (char *)mf_shdict_strerror(rc);
        return NGX_FFI_ERROR;
    }
    *user_flags = (int)flags;
    *is_stale = stale;
    switch (v.type) {
    case MF_SHDICT_STRING: /* handed out above */
        *value_type = LUA_T_STRING;
        return NGX_FFI_OK;
    case MF_SHDICT_NUMBER:
        *value_type = LUA_T_NUMBER;
        *num_value = v.number;
        return NGX_FFI_OK;
    case MF_SHDICT_BOOLEAN: /* the byte resty.core reads */
        *value_type = LUA_T_BOOLEAN;
        (*str_value_buf)[0] = v.boolean;
        *str_value_len = 1;
        return NGX_FFI_OK;
    default:
        *errmsg = (char *)mf_shdict_strerror(MF_SHDICT_IS_A_LIST);
        return NGX_FFI_ERROR;
    }
}

/* A TTL in ms from nginx's long (resty.core passes seconds * 1000, which
 * may have a fraction LuaJIT drops, and never a negative one). */
static uint64_t ngx__ttl(long ms)
{
    return ms > 0 ? (uint64_t)ms : 0;
}

int ngx_http_lua_ffi_shdict_store(void *zone, int op, const u_char *key,
                                  size_t key_len, int value_type,
                                  const u_char *str_value_buf,
                                  size_t str_value_len, double num_value,
                                  long exptime, int user_flags, char **errmsg,
                                  int *forcible)
{
    mf_shdict_value_t v = {.type = MF_SHDICT_NIL};
    bool evicted = false;
    switch (value_type) {
    case LUA_T_STRING:
        v.type = MF_SHDICT_STRING;
        v.str = (const char *)str_value_buf;
        v.len = str_value_len;
        break;
    case LUA_T_NUMBER:
        v.type = MF_SHDICT_NUMBER;
        v.number = num_value;
        break;
    case LUA_T_BOOLEAN:
        v.type = MF_SHDICT_BOOLEAN;
        v.boolean = num_value != 0;
        break;
    default: /* nil: delete */
        break;
    }
    int rc =
        mf_shdict_store(zone, (const char *)key, key_len, &v, ngx__ttl(exptime),
                        (uint32_t)user_flags, (unsigned)op, &evicted);
    *forcible = evicted;
    if (rc == 0)
        return NGX_FFI_OK;
    *errmsg = (char *)mf_shdict_strerror(rc);
    return rc == MF_SHDICT_EXISTS || rc == MF_SHDICT_NOT_FOUND
               ? NGX_FFI_DECLINED
               : NGX_FFI_ERROR;
}

int ngx_http_lua_ffi_shdict_incr(void *zone, const u_char *key, size_t key_len,
                                 double *value, char **err, int has_init,
                                 double init, long init_ttl, int *forcible)
{
    bool evicted = false;
    double out;
    int rc = mf_shdict_incr(zone, (const char *)key, key_len, *value,
                            has_init ? &init : NULL, ngx__ttl(init_ttl), &out,
                            &evicted);
    *forcible = evicted;
    if (rc != 0) {
        *err = (char *)mf_shdict_strerror(rc);
        return NGX_FFI_ERROR;
    }
    *value = out;
    return NGX_FFI_OK;
}

int ngx_http_lua_ffi_shdict_flush_all(void *zone)
{
    mf_shdict_flush_all(zone);
    return NGX_FFI_OK;
}

/* The time left in ms, 0 for no expiry, NGX_DECLINED for no key. */
long ngx_http_lua_ffi_shdict_get_ttl(void *zone, const u_char *key,
                                     size_t key_len)
{
    uint64_t ttl = 0;
    if (mf_shdict_ttl(zone, (const char *)key, key_len, &ttl) != 0)
        return NGX_FFI_DECLINED;
    return (long)ttl;
}

int ngx_http_lua_ffi_shdict_set_expire(void *zone, const u_char *key,
                                       size_t key_len, long exptime)
{
    if (mf_shdict_expire(zone, (const char *)key, key_len, ngx__ttl(exptime)) !=
        0)
        return NGX_FFI_DECLINED;
    return NGX_FFI_OK;
}

size_t ngx_http_lua_ffi_shdict_capacity(void *zone)
{
    return mf_shdict_capacity(zone);
}

size_t ngx_http_lua_ffi_shdict_free_space(void *zone)
{
    return mf_shdict_free_space(zone);
}

/* A dict object's userdata (LuaJIT passes its block for a void *) holds
 * its dict's pointer. */
void *ngx_http_lua_ffi_shdict_udata_to_zone(void *zone_udata)
{
    return zone_udata ? *(mf_shdict_t **)zone_udata : NULL;
}
