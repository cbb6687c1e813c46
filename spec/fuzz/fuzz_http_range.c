/*
 * fuzz_http_range.c — libFuzzer target for the fields a file answer reads
 * (http_range.c): Range values, If-None-Match lists, HTTP-dates, If-Range.
 *
 * The first byte picks the representation's size (0, 1, 100, 2^40 or the
 * largest), the rest, from an exact-size copy, is the field value.
 * Checked: the Range answer is a count within MF_HTTP_RANGES_MAX,
 * "ignore" or "unsatisfiable"; every range lies inside the representation
 * with first <= last; a date read back through the formatter parses to
 * the same time; the matchers terminate without reading past the value.
 */
#include "fuzz_check.h"

#include "http/http_range.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static const uint64_t sizes[] = {0, 1, 100, (uint64_t)1 << 40, UINT64_MAX};
    if (size == 0)
        return 0;
    uint64_t rep = sizes[data[0] % 5];
    char *s = fuzz_copy(data + 1, size - 1);
    size_t n = size - 1;
    mf_http_range_t r[MF_HTTP_RANGES_MAX];
    int rc = mf__http_range_parse(s, n, rep, r);
    FUZZ_CHECK(rc >= MF_HTTP_RANGE_UNSATISFIABLE && rc <= MF_HTTP_RANGES_MAX);
    for (int i = 0; i < rc; i++)
        FUZZ_CHECK(r[i].first <= r[i].last && r[i].last < rep);
    (void)mf__http_etag_list_match(s, n, "\"a-1\"", 5);
    (void)mf__http_if_range_match(s, n, "\"a-1\"", 5, 0);
    time_t t;
    if (mf__http_date_parse(s, n, &t) && t >= 0 && t < 253402300800) {
        char out[32], back[32];
        size_t len = mf__http_date_format(out, sizeof out, t);
        memcpy(back, out, len);
        time_t again;
        FUZZ_CHECK(mf__http_date_parse(back, len, &again) && again == t);
    }
    free(s);
    return 0;
}
