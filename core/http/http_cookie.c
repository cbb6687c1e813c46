/*
 * core/http/http_cookie.c — cookies as RFC 6265 §4.2 and §5.4 write them:
 * the pairs of a Cookie header ("a=1; b=\"2\"") and the checks a
 * Set-Cookie's name and value must pass (moonflow/http_parser.h).
 *
 * Owns nothing: pointers into the caller's header. May call: libc, the
 * parser's character classes.
 */
#include <stdbool.h>
#include <string.h>

#include <moonflow/http_parser.h>

/* RFC 6265 §4.1.1 cookie-octet: visible ASCII but DQUOTE, comma,
 * semicolon and backslash. */
static bool mf__cookie_octet(unsigned char c)
{
    return c >= 0x21 && c <= 0x7e && c != '"' && c != ',' && c != ';' &&
           c != '\\';
}

bool mf_http_cookie_value_valid(const char *v, size_t n)
{
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v++;
        n -= 2;
    }
    for (size_t i = 0; i < n; i++)
        if (!mf__cookie_octet((unsigned char)v[i]))
            return false;
    return true;
}

static const char *mf__skip_space(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static const char *mf__trim_end(const char *start, const char *p)
{
    while (p > start && (p[-1] == ' ' || p[-1] == '\t'))
        p--;
    return p;
}

bool mf_http_cookie_next(const char **pos, const char *end,
                         mf_http_cookie_t *cookie)
{
    const char *p = *pos;
    while (p && p < end) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *stop = semi ? semi : end;
        const char *start = mf__skip_space(p, stop);
        p = semi ? semi + 1 : end;
        const char *eq = memchr(start, '=', (size_t)(stop - start));
        const char *name_end = eq ? mf__trim_end(start, eq) : NULL;
        if (!eq || name_end == start ||
            !mf_http_field_name_valid(start, (size_t)(name_end - start)))
            continue; /* no name=value: RFC 6265 §5.2 ignores it */
        const char *v = mf__skip_space(eq + 1, stop);
        const char *v_end = mf__trim_end(v, stop);
        if (v_end - v >= 2 && *v == '"' && v_end[-1] == '"') {
            v++;
            v_end--;
        }
        cookie->name = start;
        cookie->name_len = (size_t)(name_end - start);
        cookie->value = v;
        cookie->value_len = (size_t)(v_end - v);
        *pos = p;
        return true;
    }
    *pos = end;
    return false;
}
