/*
 * fuzz_http_multipart.c — libFuzzer target for req:form()'s multipart
 * parser: mf_http_multipart_boundary over the input as a Content-Type, and
 * mf_http_multipart_next over the input as a body with boundary "XyZ".
 *
 * From exact-size copies. Checked: a boundary lies inside the type and
 * has 1 to 70 bytes; every part's name, file name, type and data lie
 * inside the body, parts come in order without overlapping, each part's
 * data is followed by "\r\n--XyZ", a name is always there, the walk ends
 * (0 or -1) within as many steps as the body has bytes, and after 0 it
 * stays 0.
 */
#include "fuzz_check.h"

static void check_boundary(const char *s, size_t n)
{
    const char *b;
    size_t len;
    if (mf_http_multipart_boundary(s, n, &b, &len) == 0)
        FUZZ_CHECK(len >= 1 && len <= 70 && fuzz_inside(s, n, b, len));
}

static void check_part(const char *body, size_t n, const mf_http_part_t *p,
                       const char **last)
{
    FUZZ_CHECK(p->name && fuzz_inside(body, n, p->name, p->name_len));
    FUZZ_CHECK(!p->filename ||
               fuzz_inside(body, n, p->filename, p->filename_len));
    FUZZ_CHECK(!p->type || fuzz_inside(body, n, p->type, p->type_len));
    FUZZ_CHECK(fuzz_inside(body, n, p->data, p->data_len));
    FUZZ_CHECK(p->name >= *last && p->data >= p->name);
    const char *end = p->data + p->data_len;
    FUZZ_CHECK((size_t)(body + n - end) >= 7 && !memcmp(end, "\r\n--XyZ", 7));
    *last = end;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *s = fuzz_copy(data, size);
    check_boundary(s, size);
    mf_http_multipart_t mp;
    mf_http_part_t part;
    mf_http_multipart_init(&mp, s, size, "XyZ", 3);
    const char *last = s;
    int rc;
    size_t steps = 0;
    while ((rc = mf_http_multipart_next(&mp, &part)) == 1) {
        check_part(s, size, &part, &last);
        FUZZ_CHECK(++steps <= size);
    }
    if (rc == 0)
        FUZZ_CHECK(mf_http_multipart_next(&mp, &part) == 0);
    free(s);
    return 0;
}
