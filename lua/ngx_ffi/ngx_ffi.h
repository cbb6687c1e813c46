/*
 * lua/ngx_ffi/ngx_ffi.h — the C functions of nginx and lua-nginx-module
 * that lua-resty-core and lua-nginx-string call through LuaJIT's FFI, with
 * their names and their ABI (the ffi.cdef lines of those Lua files are the
 * reference), exported by the moonflow binary so ffi.C finds them. Each is
 * backed by moonflow's own code: shared dicts (moonflow/shdict.h), base64
 * (moonflow/codec.h), OpenSSL's digests, PCRE2, the host's worker numbers.
 *
 * Only these names leave the binary (NGX_FFI_API); the files of this
 * folder are compiled with hidden visibility otherwise. A request pointer
 * (ngx_http_request_t *) never reaches them: moonflow runs no nginx
 * request, and the modules of lua-resty-core that need one are served by
 * moonflow.ngx (lua/moonflow/resty_core.lua).
 */
#ifndef MF_NGX_FFI_H
#define MF_NGX_FFI_H

#include <stddef.h>
#include <stdint.h>

#define NGX_FFI_API __attribute__((visibility("default")))

/* nginx's return codes, as lua-resty-core's base.lua reads them. */
#define NGX_FFI_OK 0
#define NGX_FFI_ERROR (-1)
#define NGX_FFI_DECLINED (-5)

typedef unsigned char u_char;

typedef struct {
    size_t len;
    u_char *data;
} ngx_ffi_str_t; /* nginx's ngx_str_t */

/* string.c */
NGX_FFI_API u_char *ngx_hex_dump(u_char *dst, const u_char *src, size_t len);
NGX_FFI_API intptr_t ngx_atoi(const u_char *line, size_t n);
NGX_FFI_API void ngx_http_lua_ffi_str_replace_char(u_char *buf, size_t len,
                                                   const u_char find,
                                                   const u_char replace);

/* base64.c */
NGX_FFI_API size_t ngx_http_lua_ffi_encode_base64(const u_char *src, size_t len,
                                                  u_char *dst, int no_padding);
NGX_FFI_API int ngx_http_lua_ffi_decode_base64(const u_char *src, size_t len,
                                               u_char *dst, size_t *dlen);
NGX_FFI_API void ngx_encode_base64url(ngx_ffi_str_t *dst, ngx_ffi_str_t *src);
NGX_FFI_API intptr_t ngx_decode_base64url(ngx_ffi_str_t *dst,
                                          ngx_ffi_str_t *src);

/* uri.c */
NGX_FFI_API size_t ngx_http_lua_ffi_uri_escaped_length(const u_char *src,
                                                       size_t len, int type);
NGX_FFI_API void ngx_http_lua_ffi_escape_uri(const u_char *src, size_t len,
                                             u_char *dst, int type);
NGX_FFI_API size_t ngx_http_lua_ffi_unescape_uri(const u_char *src, size_t len,
                                                 u_char *dst);

/* hash.c */
NGX_FFI_API void ngx_http_lua_ffi_md5_bin(const u_char *src, size_t len,
                                          u_char *dst);
NGX_FFI_API void ngx_http_lua_ffi_md5(const u_char *src, size_t len,
                                      u_char *dst);
NGX_FFI_API int ngx_http_lua_ffi_sha1_bin(const u_char *src, size_t len,
                                          u_char *dst);
NGX_FFI_API unsigned int ngx_http_lua_ffi_crc32_long(const u_char *src,
                                                     size_t len);
NGX_FFI_API unsigned int ngx_http_lua_ffi_crc32_short(const u_char *src,
                                                      size_t len);

/* time.c */
NGX_FFI_API double ngx_http_lua_ffi_now(void);
NGX_FFI_API long ngx_http_lua_ffi_time(void);
NGX_FFI_API long ngx_http_lua_ffi_monotonic_msec(void);
NGX_FFI_API void ngx_http_lua_ffi_today(u_char *buf);
NGX_FFI_API void ngx_http_lua_ffi_localtime(u_char *buf);
NGX_FFI_API void ngx_http_lua_ffi_utctime(u_char *buf);
NGX_FFI_API void ngx_http_lua_ffi_update_time(void);
NGX_FFI_API int ngx_http_lua_ffi_cookie_time(u_char *buf, long t);
NGX_FFI_API void ngx_http_lua_ffi_http_time(u_char *buf, long t);
NGX_FFI_API void ngx_http_lua_ffi_parse_http_time(const u_char *str, size_t len,
                                                  long *out);

/* worker.c */
NGX_FFI_API int ngx_http_lua_ffi_worker_id(void);
NGX_FFI_API int ngx_http_lua_ffi_worker_pid(void);
NGX_FFI_API int ngx_http_lua_ffi_worker_pids(int *pids, size_t *pids_len);
NGX_FFI_API int ngx_http_lua_ffi_worker_count(void);
NGX_FFI_API int ngx_http_lua_ffi_worker_exiting(void);

/* shdict.c: zone is a moonflow dict (mf_shdict_t *). */
NGX_FFI_API int ngx_http_lua_ffi_shdict_get(
    void *zone, const u_char *key, size_t key_len, int *value_type,
    u_char **str_value_buf, size_t *str_value_len, double *num_value,
    int *user_flags, int get_stale, int *is_stale, char **errmsg);
NGX_FFI_API int ngx_http_lua_ffi_shdict_incr(void *zone, const u_char *key,
                                             size_t key_len, double *value,
                                             char **err, int has_init,
                                             double init, long init_ttl,
                                             int *forcible);
NGX_FFI_API int ngx_http_lua_ffi_shdict_store(
    void *zone, int op, const u_char *key, size_t key_len, int value_type,
    const u_char *str_value_buf, size_t str_value_len, double num_value,
    long exptime, int user_flags, char **errmsg, int *forcible);
NGX_FFI_API int ngx_http_lua_ffi_shdict_flush_all(void *zone);
NGX_FFI_API long ngx_http_lua_ffi_shdict_get_ttl(void *zone, const u_char *key,
                                                 size_t key_len);
NGX_FFI_API int ngx_http_lua_ffi_shdict_set_expire(void *zone,
                                                   const u_char *key,
                                                   size_t key_len,
                                                   long exptime);
NGX_FFI_API size_t ngx_http_lua_ffi_shdict_capacity(void *zone);
NGX_FFI_API size_t ngx_http_lua_ffi_shdict_free_space(void *zone);
NGX_FFI_API void *ngx_http_lua_ffi_shdict_udata_to_zone(void *zone_udata);

#endif /* MF_NGX_FFI_H */
