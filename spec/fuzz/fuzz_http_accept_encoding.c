/*
 * fuzz_http_accept_encoding.c — libFuzzer target for the Accept-Encoding
 * chooser (mf_http_accept_encoding, RFC 9110 §12.5.3).
 *
 * Each input, from an exact-size copy, is a header value; the chooser
 * runs with every mask of offered codings. Checked: the answer is
 * identity or an offered coding; a coding is chosen only when the value
 * names it (gzip or x-gzip for gzip) or "*", without case; nothing offered
 * answers identity; the same input answers the same.
 */
#include <moonflow/http_compress.h>
#include <strings.h>

#include "fuzz_check.h"

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
    free(s);
    return 0;
}
