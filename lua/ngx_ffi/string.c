/*
 * lua/ngx_ffi/string.c — nginx's string helpers that lua-nginx-string
 * (nginx.string: to_hex, atoi) and lua-resty-core (resty.core.utils) call
 * through the FFI.
 */
#include "ngx_ffi.h"

#include <moonflow/codec.h>

/* Lowercase hex of src to dst (2 * len bytes); returns the byte after. */
u_char *ngx_hex_dump(u_char *dst, const u_char *src, size_t len)
{
    mf_hex_encode((char *)dst, src, len);
    return dst + 2 * len;
}

/* The decimal number line[0..n) is made of (digits only), or -1 for an
 * empty line, another byte or a number past INTPTR_MAX (nginx's
 * NGX_ERROR). */
intptr_t ngx_atoi(const u_char *line, size_t n)
{
    const intptr_t cutoff = INTPTR_MAX / 10, cutlim = INTPTR_MAX % 10;
    intptr_t value = 0;
    if (n == 0)
        return NGX_FFI_ERROR;
    for (size_t i = 0; i < n; i++) {
        if (line[i] < '0' || line[i] > '9')
            return NGX_FFI_ERROR;
        intptr_t digit = line[i] - '0';
        if (value > cutoff || (value == cutoff && digit > cutlim))
            return NGX_FFI_ERROR;
        value = value * 10 + digit;
    }
    return value;
}

void ngx_http_lua_ffi_str_replace_char(u_char *buf, size_t len,
                                       const u_char find, const u_char replace)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] == find)
            buf[i] = replace;
}
