/*
 * moonflow/url.h — what is wrong with a client's URL, in one wording for
 * every client (HTTP, Redis, MySQL): "malformed URL '<url>': <what>".
 *
 * The clients' own parsers only say MF_EINVAL; this reads the URL again
 * when one failed and names the first part at fault: the scheme, the
 * host, the port, an unclosed "[v6". The URL shown has its password
 * masked ("redis://user:***@host") and is cut after 96 bytes. Parts only
 * a client knows (Redis's db number, MySQL's query) fall back to the
 * caller's words.
 *
 * Threads: any. Owns nothing: the text goes into the caller's buffer.
 */
#ifndef MOONFLOW_URL_H
#define MOONFLOW_URL_H

#include <stddef.h>

#include "common.h"

MF_EXTERN_C_BEGIN

/* Writes "malformed URL '<url>': <what>" into buf (NUL-terminated, cut to size)
 * and returns buf. schemes: the ones the client takes, NULL-terminated
 * ({"http", "https", NULL}); otherwise: what to say when scheme, host and
 * port look right ("the user info is not taken"). */
MF_API const char *mf_url_problem(const char *url, const char *const *schemes,
                                  const char *otherwise, char *buf,
                                  size_t size);

MF_EXTERN_C_END

#endif
