/*
 * http_trailer.c — which fields an answer may send as trailers
 * (mf_http_trailer_fault, moonflow/http_server.h). Pure code, no state.
 *
 * A trailer arrives after the body, when the recipient has already framed,
 * routed, authorised and decoded the message; RFC 9110 §6.5.1 forbids the
 * fields those steps need. Refusing them here, before they are stored, is
 * what lets the protocols copy trailer lines out without looking at them.
 */
#include <string.h>
#include <strings.h>

#include "moonflow/common.h"
#include "moonflow/http_parser.h"
#include "moonflow/http_server.h"

/* The fields of RFC 9110 §6.5.1 (framing, routing, request modifiers,
 * authentication, response control, content processing) and those of one
 * HTTP/1 connection (RFC 9110 §7.6.1), which no trailer may carry. */
static const char *const mf__trailer_forbidden[] = {"age",
                                                    "authorization",
                                                    "cache-control",
                                                    "connection",
                                                    "content-encoding",
                                                    "content-length",
                                                    "content-range",
                                                    "content-type",
                                                    "date",
                                                    "expect",
                                                    "expires",
                                                    "host",
                                                    "if-match",
                                                    "if-modified-since",
                                                    "if-none-match",
                                                    "if-range",
                                                    "if-unmodified-since",
                                                    "keep-alive",
                                                    "location",
                                                    "max-forwards",
                                                    "pragma",
                                                    "proxy-authenticate",
                                                    "proxy-authorization",
                                                    "proxy-connection",
                                                    "range",
                                                    "retry-after",
                                                    "set-cookie",
                                                    "te",
                                                    "trailer",
                                                    "transfer-encoding",
                                                    "upgrade",
                                                    "vary",
                                                    "www-authenticate"};

static bool mf__trailer_is_forbidden(const char *name, size_t len)
{
    for (size_t i = 0; i < MF_ARRAY_SIZE(mf__trailer_forbidden); i++) {
        const char *f = mf__trailer_forbidden[i];
        if (strlen(f) == len && strncasecmp(f, name, len) == 0)
            return true;
    }
    return false;
}

const char *mf_http_trailer_fault(const char *name, size_t name_len,
                                  const char *value, size_t value_len)
{
    if (!mf_http_field_name_valid(name, name_len))
        return "is not a valid field name";
    if (!mf_http_field_value_valid(value, value_len))
        return "has a control byte in its value";
    if (mf__trailer_is_forbidden(name, name_len))
        return "may not be sent as a trailer (RFC 9110 section 6.5.1)";
    return NULL;
}
