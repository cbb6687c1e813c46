/*
 * mysql_quote.c — mf_mysql_quote: a string as a quoted SQL literal for the
 * client's charset (multi-byte characters are never split by an escape),
 * with backslash escapes, or doubled quotes once a connection of the
 * client reported NO_BACKSLASH_ESCAPES.
 *
 * libmariadb exports its escaping only as mysql_real_escape_string, which
 * reads the charset and the server status of a handle: the client keeps
 * one handle that never connects (client->quoter) with its charset, and
 * sets the status bit when a connection reports the mode.
 *
 * May call: the connector's escaping. No I/O.
 */
#include "mysql_int.h"

void mf__mysql_quoter_init(mf_mysql_client_t *client)
{
    MYSQL *q = mysql_init(&client->quoter);
    if (q)
        q->charset = client->charset_info;
    client->quoter_ready = q != NULL;
}

void mf__mysql_quoter_close(mf_mysql_client_t *client)
{
    if (client->quoter_ready)
        mysql_close(&client->quoter);
    client->quoter_ready = false;
}

void mf__mysql_client_learn_status(mf_mysql_client_t *client, unsigned status)
{
    if (!(status & SERVER_STATUS_NO_BACKSLASH_ESCAPES) ||
        client->no_backslash_escapes)
        return;
    client->no_backslash_escapes = true;
    client->quoter.server_status |= SERVER_STATUS_NO_BACKSLASH_ESCAPES;
}

size_t mf_mysql_quote(const mf_mysql_client_t *client, char *out, const char *s,
                      size_t len)
{
    /* The connector only reads the handle. */
    MYSQL *q = (MYSQL *)(uintptr_t)&client->quoter;
    out[0] = '\'';
    unsigned long n = mysql_real_escape_string(q, out + 1, s, len);
    if (n == (unsigned long)-1)
        n = 0; /* never with room for 2 * len: the contract */
    out[n + 1] = '\'';
    out[n + 2] = '\0';
    return n + 2;
}
