/* Range values (mf__http_range_parse), entity-tag lists, HTTP-dates and
 * If-Range as RFC 9110 writes them (§14.2, §13.1), as cases of data. */
#include <stdio.h>

#include "http/http_range.h"
#include "test.h"

/* The parse rendered "first-last,..." or "ignore" or "416". */
static void render(const char *value, uint64_t size, char *out, size_t cap)
{
    mf_http_range_t r[MF_HTTP_RANGES_MAX];
    int n = mf__http_range_parse(value, strlen(value), size, r);
    out[0] = '\0';
    if (n == MF_HTTP_RANGE_IGNORE) {
        snprintf(out, cap, "ignore");
        return;
    }
    if (n == MF_HTTP_RANGE_UNSATISFIABLE) {
        snprintf(out, cap, "416");
        return;
    }
    for (int i = 0; i < n; i++) {
        char one[64];
        snprintf(one, sizeof one, "%s%llu-%llu", i ? "," : "",
                 (unsigned long long)r[i].first, (unsigned long long)r[i].last);
        mf_test_append(out, cap, one, strlen(one));
    }
}

static const struct {
    const char *value;
    uint64_t size;
    const char *want;
} range_cases[] = {
    {"bytes=0-499", 10000, "0-499"},
    {"bytes=500-999", 10000, "500-999"},
    {"bytes=-500", 10000, "9500-9999"},
    {"bytes=9500-", 10000, "9500-9999"},
    {"bytes=0-0,-1", 10000, "0-0,9999-9999"},
    {"bytes= 0-1 , 3-4 ,", 10, "0-1,3-4"}, /* OWS, empty elements */
    {"BYTES=0-1", 10, "0-1"},              /* the unit in any case */
    {"bytes=0-99999", 10, "0-9"},          /* last past the end: cut */
    {"bytes=-20", 10, "0-9"},              /* suffix longer than size */
    {"bytes=5-2", 10, "ignore"},           /* last < first: invalid */
    {"bytes=10-", 10, "416"},              /* first at the end */
    {"bytes=10-20,30-40", 10, "416"},
    {"bytes=-0", 10, "416"},        /* an empty suffix */
    {"bytes=0-1,10-20", 10, "0-1"}, /* the unsatisfiable dropped */
    {"bytes=0-", 0, "416"},         /* an empty file */
    {"bytes=-5", 0, "416"},
    {"items=0-1", 10, "ignore"}, /* another unit */
    {"bytes 0-1", 10, "ignore"},
    {"bytes=", 10, "ignore"},
    {"bytes=,", 10, "ignore"},
    {"bytes=a-b", 10, "ignore"},
    {"bytes=1", 10, "ignore"},
    {"bytes=1-2;3", 10, "ignore"},
    {"bytes=--1", 10, "ignore"},
    {"bytes=99999999999999999999999-", 10, "416"}, /* saturates */
    {"bytes=0-99999999999999999999999", 10, "0-9"},
    {"bytes=0-0,1-1,2-2,3-3,4-4,5-5,6-6,7-7,8-8,9-9,10-10,11-11,12-12,13-13,"
     "14-14,15-15",
     100,
     "0-0,1-1,2-2,3-3,4-4,5-5,6-6,7-7,8-8,9-9,10-10,11-11,12-12,13-13,"
     "14-14,15-15"},
    {"bytes=0-0,1-1,2-2,3-3,4-4,5-5,6-6,7-7,8-8,9-9,10-10,11-11,12-12,13-13,"
     "14-14,15-15,16-16",
     100, "ignore"}, /* more than MF_HTTP_RANGES_MAX */
};

TEST(range_values_as_rfc_9110_reads_them)
{
    char out[512];
    for (size_t i = 0; i < sizeof range_cases / sizeof *range_cases; i++) {
        render(range_cases[i].value, range_cases[i].size, out, sizeof out);
        if (strcmp(out, range_cases[i].want) != 0)
            fprintf(stderr, "case %zu: %s\n", i, range_cases[i].value);
        ASSERT_STR_EQ(out, range_cases[i].want);
    }
}

/* Every prefix of a value is parsed without reading past it. */
TEST(range_prefixes_stay_inside_the_value)
{
    const char *v = "bytes=0-1, -5 ,7-";
    mf_http_range_t r[MF_HTTP_RANGES_MAX];
    for (size_t n = 0; n <= strlen(v); n++) {
        char *copy = malloc(n ? n : 1);
        memcpy(copy, v, n);
        int rc = mf__http_range_parse(copy, n, 100, r);
        ASSERT(rc >= MF_HTTP_RANGE_UNSATISFIABLE && rc <= MF_HTTP_RANGES_MAX);
        free(copy);
    }
}

TEST(etags_are_made_like_nginx)
{
    char tag[48];
    size_t n = mf__http_etag_format(tag, sizeof tag, 0x5f5e0ff3, 0x4000);
    ASSERT_STR_EQ(tag, "\"5f5e0ff3-4000\"");
    ASSERT_EQ(n, strlen(tag));
}

TEST(if_none_match_lists_compare_weakly)
{
    const char *etag = "\"abc-1\"";
    size_t el = strlen(etag);
    static const struct {
        const char *value;
        bool match;
    } cases[] = {
        {"\"abc-1\"", true},
        {"W/\"abc-1\"", true},
        {"\"x\", \"abc-1\"", true},
        {"  \"x\" ,W/\"abc-1\"  ", true},
        {"*", true},
        {" * ", true},
        {"\"abc-2\"", false},
        {"abc-1", false},           /* not quoted */
        {"\"abc-1", false},         /* unclosed */
        {"\"x\" \"abc-1\"", false}, /* no comma */
        {"", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        ASSERT_EQ(mf__http_etag_list_match(cases[i].value,
                                           strlen(cases[i].value), etag, el),
                  cases[i].match);
}

TEST(http_dates_in_all_three_forms)
{
    time_t t;
    const time_t want = 784111777; /* Sun, 06 Nov 1994 08:49:37 GMT */
    ASSERT(mf__http_date_parse("Sun, 06 Nov 1994 08:49:37 GMT", 29, &t));
    ASSERT_EQ(t, want);
    const char *rfc850 = "Sunday, 06-Nov-94 08:49:37 GMT";
    ASSERT(mf__http_date_parse(rfc850, strlen(rfc850), &t));
    ASSERT_EQ(t, want);
    const char *asc = "Sun Nov  6 08:49:37 1994";
    ASSERT(mf__http_date_parse(asc, strlen(asc), &t));
    ASSERT_EQ(t, want);
    const char *bad[] = {"",
                         "yesterday",
                         "Sun, 06 Nov 1994 08:49:37 UTC",
                         "Sun, 06 Foo 1994 08:49:37 GMT",
                         "Sun, 36 Nov 1994 08:49:37 GMT",
                         "Sun, 06 Nov 1994 28:49:37 GMT",
                         "Sun,",
                         "Sun, 06 Nov 1994 08:49:37 GMTX"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ASSERT(!mf__http_date_parse(bad[i], strlen(bad[i]), &t));
    char out[32];
    ASSERT_EQ(mf__http_date_format(out, sizeof out, want), 29u);
    ASSERT_STR_EQ(out, "Sun, 06 Nov 1994 08:49:37 GMT");
}

TEST(if_range_takes_a_strong_etag_or_the_exact_date)
{
    const char *etag = "\"abc-1\"";
    size_t el = strlen(etag);
    time_t mtime = 784111777;
    ASSERT(mf__http_if_range_match("\"abc-1\"", 7, etag, el, mtime));
    ASSERT(!mf__http_if_range_match("W/\"abc-1\"", 9, etag, el, mtime));
    ASSERT(!mf__http_if_range_match("\"abc-2\"", 7, etag, el, mtime));
    const char *d = "Sun, 06 Nov 1994 08:49:37 GMT";
    ASSERT(mf__http_if_range_match(d, strlen(d), etag, el, mtime));
    ASSERT(!mf__http_if_range_match(d, strlen(d), etag, el, mtime + 1));
    const char *wed = "Wed, 09 Nov 1994 08:49:37 GMT"; /* starts with W */
    ASSERT(
        mf__http_if_range_match(wed, strlen(wed), etag, el, mtime + 3 * 86400));
    ASSERT(!mf__http_if_range_match("junk", 4, etag, el, mtime));
}
