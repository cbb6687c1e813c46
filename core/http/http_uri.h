/*
 * http_uri.h — what the URI functions (http_uri.c) offer the parser beside
 * their public API (moonflow/http_parser.h). Internal.
 */
#ifndef MF_HTTP_URI_H
#define MF_HTTP_URI_H

#include <stdbool.h>
#include <stddef.h>

/* mf_http_parse_authority(s, n) == 0, out of line. */
bool mf__http_authority_valid(const char *s, size_t n);

#endif /* MF_HTTP_URI_H */
