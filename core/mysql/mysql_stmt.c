/*
 * mysql_stmt.c — the prepared-statement query phase (parameters bound
 * with mf_task_mysql_bind) and the per-connection statement cache.
 *
 * Not built yet: a task with bound parameters fails with MF_ENOSYS.
 */
#include "mysql_int.h"

static void mf__stmt_run(mf_mysql_task_t *t)
{
    mf__mysql_task_finish(t, MF_STATE_TASK_ERROR, MF_ENOSYS);
}

const mf_mysql_phase_t mf__mysql_stmt_phase = {"stmt", mf__stmt_run, NULL,
                                               NULL};
