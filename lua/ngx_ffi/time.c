/*
 * lua/ngx_ffi/time.c — resty.core.time: ngx.now (epoch seconds with
 * milliseconds), ngx.time, ngx.today / localtime / utctime, ngx.http_time,
 * ngx.cookie_time, ngx.parse_http_time, and resty.core.time's
 * monotonic_msec. nginx caches the time once per event loop turn
 * (ngx.update_time refreshes it); these read the clock at each call, so
 * update_time has nothing to do.
 */
#include "ngx_ffi.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const ngx__week[] = {"Sun", "Mon", "Tue", "Wed",
                                        "Thu", "Fri", "Sat"};
static const char *const ngx__months[] = {"Jan", "Feb", "Mar", "Apr",
                                          "May", "Jun", "Jul", "Aug",
                                          "Sep", "Oct", "Nov", "Dec"};

double ngx_http_lua_ffi_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)(ts.tv_nsec / 1000000) / 1000.0;
}

long ngx_http_lua_ffi_time(void)
{
    return (long)time(NULL);
}

long ngx_http_lua_ffi_monotonic_msec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ngx_http_lua_ffi_update_time(void)
{
}

/* strftime of now into buf (len bytes, no NUL: the Lua side reads len). */
static void ngx__format_now(u_char *buf, size_t len, const char *format,
                            bool utc)
{
    char text[32];
    time_t now = time(NULL);
    struct tm tm;
    if (utc)
        gmtime_r(&now, &tm);
    else
        localtime_r(&now, &tm);
    strftime(text, sizeof text, format, &tm);
    memcpy(buf, text, len);
}

void ngx_http_lua_ffi_today(u_char *buf)
{
    ngx__format_now(buf, 10, "%Y-%m-%d", false);
}

void ngx_http_lua_ffi_localtime(u_char *buf)
{
    ngx__format_now(buf, 19, "%Y-%m-%d %H:%M:%S", false);
}

void ngx_http_lua_ffi_utctime(u_char *buf)
{
    ngx__format_now(buf, 19, "%Y-%m-%d %H:%M:%S", true);
}

/* "Thu, 18 Nov 2010 11:27:35 GMT" (29 bytes). */
void ngx_http_lua_ffi_http_time(u_char *buf, long t)
{
    char text[64];
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    snprintf(text, sizeof text, "%s, %02d %s %4d %02d:%02d:%02d GMT",
             ngx__week[tm.tm_wday], tm.tm_mday, ngx__months[tm.tm_mon],
             tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
    memcpy(buf, text, 29);
}

/* "Thu, 18-Nov-10 11:27:35 GMT": a two-digit year up to 2037, the whole
 * year after (as nginx writes cookies' expires). Returns the length. */
int ngx_http_lua_ffi_cookie_time(u_char *buf, long t)
{
    char text[64];
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    int year = tm.tm_year + 1900;
    int n = snprintf(text, sizeof text, "%s, %02d-%s-%02d %02d:%02d:%02d GMT",
                     ngx__week[tm.tm_wday], tm.tm_mday, ngx__months[tm.tm_mon],
                     year > 2037 ? year : year % 100, tm.tm_hour, tm.tm_min,
                     tm.tm_sec);
    if (n < 0 || n > 29) /* a year past 9999: not a cookie's */
        n = 0;
    memcpy(buf, text, (size_t)n);
    return n;
}

/* The three forms of HTTP dates (RFC 9110 §5.6.7): IMF-fixdate, RFC 850's
 * and asctime's; *out gets the epoch seconds, or -1 (FFI_ERROR). */
void ngx_http_lua_ffi_parse_http_time(const u_char *str, size_t len, long *out)
{
    static const char *const forms[] = {"%a, %d %b %Y %H:%M:%S GMT",
                                        "%A, %d-%b-%y %H:%M:%S GMT",
                                        "%a %b %e %H:%M:%S %Y"};
    char text[64];
    *out = NGX_FFI_ERROR;
    if (len >= sizeof text)
        return;
    memcpy(text, str, len);
    text[len] = '\0';
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        const char *end = strptime(text, forms[i], &tm);
        if (end && *end == '\0') {
            *out = (long)timegm(&tm);
            return;
        }
    }
}
