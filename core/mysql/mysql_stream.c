/*
 * mysql_stream.c — the streaming query phase: rows in batches of
 * t->batch_rows, the socket not read while a batch is consumed.
 *
 * Not built yet: a streaming task fails with MF_ENOSYS.
 */
#include "mysql_int.h"

static void mf__stream_run(mf_mysql_task_t *t)
{
    mf__mysql_task_finish(t, MF_STATE_TASK_ERROR, MF_ENOSYS);
}

const mf_mysql_phase_t mf__mysql_stream_phase = {"stream", mf__stream_run, NULL,
                                                 NULL};

void mf_task_mysql_next_batch(mf_task_t *task)
{
    (void)task;
}
