/*
 * mysql_pipeline.h — pipelined prepared statements: the tasks of a client
 * with opts.pipeline = N > 1 share its connections, and up to N
 * COM_STMT_EXECUTE packets are written on one before their replies are
 * read; replies come back in order and complete the tasks in order.
 *
 * A pipeline (mf_mysql_pipe_t) holds one pooled connection while it has
 * work, taken from the client's endpoint pool like a task takes one, and
 * gives it back when its last reply came. Its statements are prepared
 * through the connector on that connection (only while nothing is in
 * flight: the connector must own the socket for it) and cached in the
 * connection's statement cache (mysql_stmt.c), then executed with our own
 * codec (mysql_binary.c) on the connection's socket.
 *
 * Ownership: a client owns its pipelines (client->pipes), kept for reuse
 * and freed with the client (mf__mysql_pipes_free, also when the loop is
 * destroyed with work in flight); a pipeline owns its buffers and its
 * ring of in-flight slots; the tasks stay their series'. A written task
 * that ends early leaves its slot empty: its reply is read and dropped.
 */
#ifndef MF_MYSQL_PIPELINE_H
#define MF_MYSQL_PIPELINE_H

#include "mysql_binary.h"
#include "mysql_stmt.h"

/* One statement written and not answered yet. */
typedef struct mf_mysql_pipe_slot {
    mf_mysql_task_t *task; /* NULL: it ended early, its reply is dropped */
    mf_mysql_stmt_t *stmt;
} mf_mysql_pipe_slot_t;

typedef enum mf_mysql_pipe_read {
    MF_PR_FIRST, /* OK, ERR, or a result's column count */
    MF_PR_COLS,  /* column definitions */
    MF_PR_COLS_EOF,
    MF_PR_ROWS
} mf_mysql_pipe_read_t;

typedef struct mf_mysql_pipe {
    mf_list_t link; /* client->pipes */
    mf_mysql_client_t *client;
    mf_mysql_conn_t *conn; /* NULL: none held */
    mf_mysql_waiter_t waiter;
    bool acquiring; /* waiter is in the pool */
    bool preparing; /* the connector runs a prepare or close */
    mf_list_t queue; /* tasks not written yet, oldest first */
    unsigned nqueued;
    mf_mysql_pipe_slot_t *ring; /* depth slots: written, oldest at head */
    unsigned depth, head, nsent;
    mf_mysql_stmt_t *fresh;  /* being prepared */
    mf_mysql_stmt_t *victim; /* being closed */
    /* Bytes to write, and bytes read but not consumed. The statements of
     * one loop iteration go out in one send: the flush is deferred. */
    mf_post_t flush_post;
    bool flush_queued; /* flush_post is in the loop's deferred queue */
    uint8_t *out;
    size_t out_len, out_off, out_cap;
    uint8_t *in;
    size_t in_len, in_cap;
    /* The reply being read (for the slot at head). */
    mf_mysql_pipe_read_t rstate;
    unsigned ncols, col;
    mf_mysql_bin_col_t *cols;
    unsigned cols_cap;
    mf_mysql_set_t *set;
    mf_mysql_value_t **rows;
    size_t rows_cap;
    bool overflow; /* the head's results passed max_result */
    bool failed;   /* the head's task already has its error */
    int fail_error;
} mf_mysql_pipe_t;

#endif /* MF_MYSQL_PIPELINE_H */
