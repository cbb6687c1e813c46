/*
 * http_mime.h — the process's table of file types (http_mime.c). Internal.
 * mf_http_static_mime_type (moonflow/http_static.h) looks types up.
 */
#ifndef MF_HTTP_MIME_H
#define MF_HTTP_MIME_H

/* Reads /etc/mime.types into the table, once per process (later calls
 * wait for the first, then return): call before any lookup. */
void mf__http_mime_load(void);

#endif /* MF_HTTP_MIME_H */
