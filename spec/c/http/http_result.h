/*
 * http_result.h — what the client tests keep of a finished http task: its
 * state, error, status, redirects and the first bytes of its body, copied
 * in the task's callback (on_done, with the result as the task's user).
 */
#ifndef MF_HTTP_RESULT_H
#define MF_HTTP_RESULT_H

#include <string.h>

#include <moonflow/http_client.h>
#include <moonflow/moonflow.h>

typedef struct result {
    int done; /* callbacks run */
    int state;
    int error;
    int status;
    int redirects;
    char body[4096]; /* NUL-terminated, cut to fit */
    size_t body_len; /* the whole body's length */
    char headers[64];
} result_t;

static inline void on_done(mf_task_t *task)
{
    result_t *r = task->user;
    size_t len;
    const char *body = mf_task_http_body(task, &len);
    r->done++;
    r->state = mf_task_state(task);
    r->error = mf_task_error(task);
    r->status = mf_task_http_status(task);
    r->redirects = mf_task_http_redirects(task);
    r->body_len = len;
    if (len >= sizeof r->body)
        len = sizeof r->body - 1;
    memcpy(r->body, body ? body : "", len);
    r->body[len] = 0;
}

#endif /* MF_HTTP_RESULT_H */
