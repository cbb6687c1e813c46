/*
 * fuzz_http_accept_encoding.c — libFuzzer target for the Accept-Encoding
 * chooser (mf_http_accept_encoding, RFC 9110 §12.5.3).
 *
 * Each input, from an exact-size copy, is a header value; the chooser
 * runs with every mask of offered codings. Checked: the answer is
 * identity or an offered coding; a coding is chosen only when the value
 * names it (gzip or x-gzip for gzip) or "*", without case; nothing offered
 * answers identity; the same input answers the same; cut in two field
 * lines, the request's lines (mf__http_accept_encoding_fields) answer as
 * the two values joined by a comma.
 */
#include <moonflow/http_compress.h>
#include <strings.h>

#include "fuzz_check.h"
#include "http/http_compress.h"

/* value[0..n) contains name, without case. */
static int mentions(const char *value, size_t n, const char *name)
{
    size_t k = strlen(name);
    for (size_t i = 0; i + k <= n; i++)
        if (strncasecmp(value + i, name, k) == 0)
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *s = fuzz_copy(data, size);
    int star = mentions(s, size, "*");
    for (unsigned offered = 0; offered < 8; offered++) {
        mf_http_coding_t c = mf_http_accept_encoding(s, size, offered);
        FUZZ_CHECK(c == MF_HTTP_CODING_IDENTITY || (offered & (1u << c)));
        FUZZ_CHECK(c != MF_HTTP_CODING_GZIP || star ||
                   mentions(s, size, "gzip"));
        FUZZ_CHECK(c != MF_HTTP_CODING_BR || star || mentions(s, size, "br"));
        FUZZ_CHECK(c == mf_http_accept_encoding(s, size, offered));
    }
    FUZZ_CHECK(mf_http_accept_encoding(s, size, 0) == MF_HTTP_CODING_IDENTITY);
    /* Cut in two field lines at a byte the input picks, the request's
     * lines answer as their values joined by a comma. */
    size_t cut = size ? data[0] % (size + 1) : 0;
    char *joined = malloc(size + 1);
    FUZZ_CHECK(joined != NULL);
    memcpy(joined, s, cut);
    joined[cut] = ',';
    memcpy(joined + cut + 1, s + cut, size - cut);
    mf_http_header_t lines[2] = {
        {"Accept-Encoding", 15, s, cut},
        {"accept-encoding", 15, s + cut, size - cut},
    };
    for (unsigned offered = 0; offered < 8; offered++)
        FUZZ_CHECK(mf__http_accept_encoding_fields(lines, 2, offered) ==
                   mf_http_accept_encoding(joined, size + 1, offered));
    free(joined);
    free(s);
    return 0;
}
