/*
 * lua/ngx_ffi/base64.c — base64 as resty.core.base64 (ngx.encode_base64,
 * ngx.decode_base64) and ngx.base64 (encode_base64url, decode_base64url)
 * call it, on moonflow/codec.h. Decoding takes padding or none, as nginx
 * does; a byte outside the alphabet or a length that cannot be fails.
 */
#include "ngx_ffi.h"

#include <moonflow/codec.h>

size_t ngx_http_lua_ffi_encode_base64(const u_char *src, size_t len,
                                      u_char *dst, int no_padding)
{
    return mf_base64_encode((char *)dst, src, len,
                            no_padding ? MF_BASE64_NOPAD : 0);
}

/* 1 with *dlen the bytes written, 0 for input that is no base64. */
int ngx_http_lua_ffi_decode_base64(const u_char *src, size_t len, u_char *dst,
                                   size_t *dlen)
{
    size_t bad;
    ssize_t n = mf_base64_decode(dst, (const char *)src, len, 0, &bad);
    if (n < 0)
        return 0;
    *dlen = (size_t)n;
    return 1;
}

/* dst->data has room for the padded length; dst->len gets the unpadded. */
void ngx_encode_base64url(ngx_ffi_str_t *dst, ngx_ffi_str_t *src)
{
    dst->len = mf_base64_encode((char *)dst->data, src->data, src->len,
                                MF_BASE64_URL | MF_BASE64_NOPAD);
}

intptr_t ngx_decode_base64url(ngx_ffi_str_t *dst, ngx_ffi_str_t *src)
{
    size_t bad;
    ssize_t n = mf_base64_decode(dst->data, (const char *)src->data, src->len,
                                 MF_BASE64_URL, &bad);
    if (n < 0)
        return NGX_FFI_ERROR;
    dst->len = (size_t)n;
    return NGX_FFI_OK;
}
