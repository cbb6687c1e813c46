/*
 * lua/ngx_ffi/uri.c — resty.core.uri's ngx.escape_uri / ngx.unescape_uri.
 *
 * The escape types are nginx's (NGX_ESCAPE_*): 0 a URI (spaces, '#', '%',
 * '?'), 1 query arguments (also '&', '+', ';'), 2 a URI component (all
 * but RFC 3986's unreserved letters, digits and "-._~": ngx.escape_uri's
 * default, as mf.uri.escape), 3 HTML (space, '"', '#', '%', '\''),
 * 4 a refresh header (space, '"', '\''), 5 a memcached key (space, '%',
 * control bytes only) and 6 mail auth (space, '#', '%', '+', '?'). Every
 * type but 5 also escapes control bytes, DEL and the bytes past 0x7f.
 * Unescaping decodes each valid %XX, turns '+' into a space, and keeps
 * any other byte (an invalid escape too) as it is.
 */
#include "ngx_ffi.h"

#include <stdbool.h>
#include <string.h>

enum {
    NGX_ESCAPE_URI,
    NGX_ESCAPE_ARGS,
    NGX_ESCAPE_URI_COMPONENT,
    NGX_ESCAPE_HTML,
    NGX_ESCAPE_REFRESH,
    NGX_ESCAPE_MEMCACHED,
    NGX_ESCAPE_MAIL_AUTH
};

/* The printable bytes each type escapes (besides controls and high ones). */
static const char *const ngx__escaped_printable[] = {
    [NGX_ESCAPE_URI] = " #%?",         [NGX_ESCAPE_ARGS] = " #%&+;?",
    [NGX_ESCAPE_URI_COMPONENT] = NULL, /* all but the unreserved */
    [NGX_ESCAPE_HTML] = " \"#%'",      [NGX_ESCAPE_REFRESH] = " \"'",
    [NGX_ESCAPE_MEMCACHED] = " %",     [NGX_ESCAPE_MAIL_AUTH] = " #%+?",
};

static bool ngx__unreserved(u_char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~';
}

static bool ngx__escapes(int type, u_char c)
{
    if (type < NGX_ESCAPE_URI || type > NGX_ESCAPE_MAIL_AUTH)
        type = NGX_ESCAPE_URI_COMPONENT; /* resty.core checks the range */
    if (c < 0x20)
        return true;
    if (c >= 0x7f)
        return type != NGX_ESCAPE_MEMCACHED;
    const char *set = ngx__escaped_printable[type];
    if (!set)
        return !ngx__unreserved(c);
    return strchr(set, c) != NULL;
}

size_t ngx_http_lua_ffi_uri_escaped_length(const u_char *src, size_t len,
                                           int type)
{
    size_t n = len;
    for (size_t i = 0; i < len; i++)
        n += ngx__escapes(type, src[i]) ? 2 : 0;
    return n;
}

void ngx_http_lua_ffi_escape_uri(const u_char *src, size_t len, u_char *dst,
                                 int type)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        u_char c = src[i];
        if (!ngx__escapes(type, c)) {
            *dst++ = c;
            continue;
        }
        *dst++ = '%';
        *dst++ = (u_char)hex[c >> 4];
        *dst++ = (u_char)hex[c & 15];
    }
}

static int ngx__hex_value(u_char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20; /* lowercase */
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

size_t ngx_http_lua_ffi_unescape_uri(const u_char *src, size_t len, u_char *dst)
{
    u_char *d = dst;
    for (size_t i = 0; i < len; i++) {
        int hi, lo;
        if (src[i] == '+') {
            *d++ = ' ';
        } else if (src[i] == '%' && i + 2 < len &&
                   (hi = ngx__hex_value(src[i + 1])) >= 0 &&
                   (lo = ngx__hex_value(src[i + 2])) >= 0) {
            *d++ = (u_char)(hi << 4 | lo);
            i += 2;
        } else {
            *d++ = src[i];
        }
    }
    return (size_t)(d - dst);
}
