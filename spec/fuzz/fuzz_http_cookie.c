/*
 * fuzz_http_cookie.c — libFuzzer target for what a handler's req.cookies
 * goes through: mf_http_cookie_next over a Cookie header's value, and
 * mf_http_cookie_value_valid.
 *
 * Each input, from an exact-size copy, is a header value. Checked: every
 * cookie lies inside the input, in order; its name is a non-empty token
 * with no '=' or ';'; its value has no ';' and, unless it was quoted, does
 * not start or end with a space or tab; the walk ends at
 * the input's end; and the validity check agrees with RFC 6265's
 * cookie-octet rule written here.
 */
#include "fuzz_check.h"

static int octet(unsigned char c)
{
    return c >= 0x21 && c <= 0x7e && c != '"' && c != ',' && c != ';' &&
           c != '\\';
}

static int reference_valid(const char *v, size_t n)
{
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v++;
        n -= 2;
    }
    for (size_t i = 0; i < n; i++)
        if (!octet((unsigned char)v[i]))
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *s = fuzz_copy(data, size);
    const char *pos = s, *last = s;
    mf_http_cookie_t c;
    while (mf_http_cookie_next(&pos, s + size, &c)) {
        FUZZ_CHECK(fuzz_inside(s, size, c.name, c.name_len));
        FUZZ_CHECK(fuzz_inside(s, size, c.value, c.value_len));
        FUZZ_CHECK(c.name >= last && c.value >= c.name + c.name_len);
        FUZZ_CHECK(c.name_len > 0);
        for (size_t i = 0; i < c.name_len; i++)
            FUZZ_CHECK(fuzz_is_tchar(c.name[i]));
        FUZZ_CHECK(!memchr(c.value, ';', c.value_len));
        int quoted = c.value > s && c.value[-1] == '"' &&
                     c.value + c.value_len < s + size &&
                     c.value[c.value_len] == '"';
        if (c.value_len && !quoted) {
            FUZZ_CHECK(c.value[0] != ' ' && c.value[0] != '\t');
            FUZZ_CHECK(c.value[c.value_len - 1] != ' ' &&
                       c.value[c.value_len - 1] != '\t');
        }
        FUZZ_CHECK(pos <= s + size && pos >= c.value + c.value_len);
        last = c.value + c.value_len;
    }
    FUZZ_CHECK(pos == s + size);
    FUZZ_CHECK(mf_http_cookie_value_valid(s, size) == reference_valid(s, size));
    free(s);
    return 0;
}
