/* Cookie headers (mf_http_cookie_next) and Set-Cookie values
 * (mf_http_cookie_value_valid) as RFC 6265 writes them. */
#include <moonflow/http_parser.h>

#include "test.h"

/* The cookies of s rendered "name=value|..." for comparison. */
static void render(const char *s, char *out, size_t cap)
{
    const char *pos = s;
    mf_http_cookie_t c;
    out[0] = '\0';
    while (mf_http_cookie_next(&pos, s + strlen(s), &c)) {
        mf_test_append(out, cap, c.name, c.name_len);
        mf_test_append(out, cap, "=", 1);
        mf_test_append(out, cap, c.value, c.value_len);
        mf_test_append(out, cap, "|", 1);
    }
    ASSERT(pos == s + strlen(s));
}

TEST(pairs_spaces_and_quotes)
{
    char out[256];
    render("a=1; b=2", out, sizeof out);
    ASSERT_STR_EQ(out, "a=1|b=2|");
    render("  a = 1 ;b=\"two\";c=", out, sizeof out);
    ASSERT_STR_EQ(out, "a=1|b=two|c=|");
    render("x=a=b", out, sizeof out); /* the value keeps later '=' */
    ASSERT_STR_EQ(out, "x=a=b|");
    render("\"\"=1; q=\"", out, sizeof out); /* a lone quote stays */
    ASSERT_STR_EQ(out, "q=\"|");
}

TEST(junk_is_passed_over)
{
    char out[256];
    render("junk; =1; bad name=2; ok=3;;", out, sizeof out);
    ASSERT_STR_EQ(out, "ok=3|");
    render("", out, sizeof out);
    ASSERT_STR_EQ(out, "");
    render(";;;", out, sizeof out);
    ASSERT_STR_EQ(out, "");
    const char *pos = NULL;
    mf_http_cookie_t c;
    ASSERT(!mf_http_cookie_next(&pos, NULL, &c));
}

TEST(set_cookie_values)
{
    ASSERT(mf_http_cookie_value_valid("abc-123_~!#$%&'()*+./:<=>?@[]^`{|}", 34));
    ASSERT(mf_http_cookie_value_valid("\"quoted\"", 8));
    ASSERT(mf_http_cookie_value_valid("", 0));
    const char *bad[] = {"a b", "a,b", "a;b", "a\"b", "a\\b", "a\tb", "\x7f",
                         "\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ASSERT(!mf_http_cookie_value_valid(bad[i], strlen(bad[i])));
}
