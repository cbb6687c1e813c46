/*
 * mysql_binary.h — a small codec for the part of the MySQL client/server
 * protocol a pipeline speaks on a connection the connector opened:
 * packet framing (3-byte length, sequence id), COM_STMT_EXECUTE for the
 * parameter types of mf_mysql_param_t, OK / ERR / EOF packets, column
 * definitions and binary resultset rows.
 *
 * Pure functions over caller buffers: nothing here allocates except through
 * the allocator a row decode is given, nothing does I/O, nothing knows the
 * connector's structs (only the MYSQL_TYPE_* numbers and flag bits of the
 * protocol). Decoded names and errors point into the packet they came from;
 * text values are copied through the allocator (NUL-terminated).
 */
#ifndef MF_MYSQL_BINARY_H
#define MF_MYSQL_BINARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moonflow/mysql.h"

/* A packet's payload is at most this long; a longer one is split by the
 * protocol, which the pipeline does not join (it fails the connection). */
#define MF_MYSQL_BIN_MAX_PAYLOAD 0xffffffu

/* One framed packet found at the start of a buffer. */
typedef struct mf_mysql_bin_packet {
    const uint8_t *payload;
    size_t len;   /* payload bytes */
    size_t total; /* header + payload: what to consume */
    uint8_t seq;
} mf_mysql_bin_packet_t;

/* 1: a whole packet at buf (in *pk); 0: more bytes needed; -1: a packet
 * of the maximum length (split payloads are not supported). */
int mf__mysql_bin_frame(const uint8_t *buf, size_t len,
                        mf_mysql_bin_packet_t *pk);

/* The counts of an OK packet (or of the EOF-as-OK that ends a result when
 * CLIENT_DEPRECATE_EOF is on). */
typedef struct mf_mysql_bin_ok {
    uint64_t affected_rows;
    uint64_t insert_id;
    uint16_t status;
    uint16_t warnings;
} mf_mysql_bin_ok_t;

/* What an ERR packet says; message points into the packet. */
typedef struct mf_mysql_bin_err {
    unsigned code;
    char sqlstate[6];
    const char *message;
    size_t message_len;
} mf_mysql_bin_err_t;

static inline bool mf__mysql_bin_is_err(const uint8_t *p, size_t n)
{
    return n > 0 && p[0] == 0xff;
}
/* An EOF packet (0xfe and shorter than 9 bytes: a row or a length never
 * is). */
static inline bool mf__mysql_bin_is_eof(const uint8_t *p, size_t n)
{
    return n > 0 && n < 9 && p[0] == 0xfe;
}

/* 0 or -1 (malformed). The header byte (0x00 or 0xfe) is not checked. */
int mf__mysql_bin_ok(const uint8_t *p, size_t n, mf_mysql_bin_ok_t *ok);
/* 0 or -1 (not an ERR packet, or malformed). */
int mf__mysql_bin_err(const uint8_t *p, size_t n, mf_mysql_bin_err_t *err);
/* An EOF packet's warnings and status; 0 or -1. */
int mf__mysql_bin_eof(const uint8_t *p, size_t n, mf_mysql_bin_ok_t *ok);

/* A length-encoded integer at *p (advanced); -1 when it runs past end or
 * is the NULL marker (0xfb). */
int mf__mysql_bin_lenenc(const uint8_t **p, const uint8_t *end, uint64_t *v);

/* One column: its definition packet's fields the values and the task's
 * field list need (names point into the packet, or into the prepared
 * statement's field list). */
typedef struct mf_mysql_bin_col {
    const char *name;
    size_t name_len;
    const char *table;
    size_t table_len;
    unsigned type;
    unsigned flags;
    unsigned decimals;
    unsigned charsetnr;
} mf_mysql_bin_col_t;

/* A column definition packet (protocol 4.1); 0 or -1. */
int mf__mysql_bin_coldef(const uint8_t *p, size_t n, mf_mysql_bin_col_t *col);

/* Memory for text values; NULL when refused. */
typedef void *(*mf_mysql_bin_alloc_fn)(void *ctx, size_t size);

/* A binary resultset row (0x00, NULL bitmap, values) into values[ncols],
 * typed as the text protocol types them (moonflow/mysql.h): integers by
 * their UNSIGNED flag, FLOAT and DOUBLE as doubles (FLOAT through its
 * shortest text), dates and times as the server's text with the column's
 * decimals, everything else as its bytes. 0; -1 malformed; -2 the
 * allocator refused. */
int mf__mysql_bin_row(const uint8_t *p, size_t n, const mf_mysql_bin_col_t *cols,
                      unsigned ncols, mf_mysql_value_t *values,
                      mf_mysql_bin_alloc_fn alloc, void *ctx);

/* Writes one COM_STMT_EXECUTE packet (header with sequence id 0 included)
 * for stmt_id and params into out (cap bytes); with_types: the
 * new-params-bound flag and the type block (needed on a statement's first
 * execute and whenever a type changed). Returns the packet's length; when
 * that is more than cap nothing useful was written: grow and call again. */
size_t mf__mysql_bin_execute(uint8_t *out, size_t cap, uint32_t stmt_id,
                             const mf_mysql_param_t *params, size_t n,
                             bool with_types);

/* The type key of a parameter as the execute packet sends it
 * (MYSQL_TYPE_* | 0x8000 when unsigned). */
uint16_t mf__mysql_bin_param_type(const mf_mysql_param_t *p);

#endif /* MF_MYSQL_BINARY_H */
