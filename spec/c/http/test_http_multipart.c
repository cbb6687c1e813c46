/* multipart/form-data (mf_http_multipart_*): boundaries from Content-Type,
 * fields and files with their names, types and bytes (CRLFs and boundary
 * look-alikes inside data kept), preamble and epilogue, and each malformed
 * body refused. */
#include <moonflow/http_parser.h>

#include "test.h"

#define BODY(...) __VA_ARGS__, sizeof(__VA_ARGS__) - 1

static int parse(const char *body, size_t n, mf_http_part_t *parts, int cap)
{
    mf_http_multipart_t mp;
    mf_http_multipart_init(&mp, body, n, "XyZ", 3);
    int count = 0, rc;
    while (count < cap && (rc = mf_http_multipart_next(&mp, &parts[count])) == 1)
        count++;
    return count < cap && rc < 0 ? -1 : count;
}

static int eq(const char *s, size_t n, const char *want)
{
    return s && n == strlen(want) && memcmp(s, want, n) == 0;
}

TEST(boundary)
{
    const char *b;
    size_t n;
    ASSERT_EQ(mf_http_multipart_boundary(BODY("multipart/form-data; boundary=abc"),
                                         &b, &n), 0);
    ASSERT(eq(b, n, "abc"));
    ASSERT_EQ(mf_http_multipart_boundary(
                  BODY("Multipart/Form-Data;charset=x; boundary=\"a b;c\""), &b, &n),
              0);
    ASSERT(eq(b, n, "a b;c"));
    ASSERT_EQ(mf_http_multipart_boundary(BODY("multipart/form-data"), &b, &n), -1);
    ASSERT_EQ(mf_http_multipart_boundary(BODY("text/plain; boundary=a"), &b, &n), -1);
    ASSERT_EQ(mf_http_multipart_boundary(BODY("multipart/form-data; boundary="), &b, &n), -1);
    ASSERT_EQ(mf_http_multipart_boundary(BODY("multipart/form-data; boundary=\"a"), &b, &n), -1);
}

TEST(fields_and_files)
{
    mf_http_part_t p[4];
    int n = parse(BODY("preamble\r\n--XyZ\r\n"
                       "Content-Disposition: form-data; name=\"a\"\r\n\r\n"
                       "one\r\n--XyZ\r\n"
                       "content-disposition: form-data; name=\"f\"; filename=\"x.txt\"\r\n"
                       "Content-Type: text/plain\r\n\r\n"
                       "line\r\n--XyZnot a boundary\r\nend\r\n--XyZ--\r\nepilogue"),
                  p, 4);
    ASSERT_EQ(n, 2);
    ASSERT(eq(p[0].name, p[0].name_len, "a") && p[0].filename == NULL);
    ASSERT(eq(p[0].data, p[0].data_len, "one"));
    ASSERT(eq(p[1].name, p[1].name_len, "f"));
    ASSERT(eq(p[1].filename, p[1].filename_len, "x.txt"));
    ASSERT(eq(p[1].type, p[1].type_len, "text/plain"));
    ASSERT(eq(p[1].data, p[1].data_len, "line\r\n--XyZnot a boundary\r\nend"));
}

TEST(empty_form_and_empty_values)
{
    mf_http_part_t p[2];
    ASSERT_EQ(parse(BODY("--XyZ--\r\n"), p, 2), 0);
    ASSERT_EQ(parse(BODY("--XyZ\r\nContent-Disposition: form-data; name=e\r\n\r\n"
                         "\r\n--XyZ--"),
                    p, 2),
              1);
    ASSERT(eq(p[0].name, p[0].name_len, "e") && p[0].data_len == 0);
}

TEST(malformed_bodies)
{
    mf_http_part_t p[2];
    ASSERT_EQ(parse(BODY(""), p, 2), -1);                    /* no delimiter */
    ASSERT_EQ(parse(BODY("--Other\r\n\r\nx\r\n--Other--"), p, 2), -1);
    ASSERT_EQ(parse(BODY("--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\n"
                         "cut before the end"),
                    p, 2),
              -1);                                           /* never ends */
    ASSERT_EQ(parse(BODY("--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--"),
                    p, 2),
              -1);                                           /* no name */
    ASSERT_EQ(parse(BODY("--XyZ\r\nContent-Disposition: attachment; name=a\r\n\r\n"
                         "x\r\n--XyZ--"),
                    p, 2),
              -1);                                           /* not form-data */
    ASSERT_EQ(parse(BODY("--XyZ\r\nno colon here\r\n\r\nx\r\n--XyZ--"), p, 2), -1);
    ASSERT_EQ(parse(BODY("--XyZ\r\nContent-Disposition: form-data; name=a"), p, 2),
              -1);                                           /* headers never end */
}
