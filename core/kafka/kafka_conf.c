/*
 * kafka_conf.c — properties into librdkafka configurations, librdkafka's
 * errors into moonflow's, and the error head every Kafka task kind embeds
 * (mf__kafka_task_t: mf_task_kafka_error reads it). Owns nothing else: the
 * conf it builds is the caller's (rd_kafka_new takes it over).
 */
#include "kafka/kafka_int.h"

#include <stdio.h>
#include <string.h>

bool mf__kafka_props_have(const mf_kafka_prop_t *props, size_t n,
                          const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (props[i].name && strcmp(props[i].name, name) == 0)
            return true;
    return false;
}

static bool mf__conf_set(rd_kafka_conf_t *conf, const mf_kafka_prop_t *p,
                         char *errbuf, size_t errlen)
{
    if (!p->name || !p->name[0]) {
        snprintf(errbuf, errlen, "a property has no name");
        return false;
    }
    if (!p->value) {
        snprintf(errbuf, errlen, "%s: a value is required", p->name);
        return false;
    }
    /* librdkafka's message names the property ("No such configuration
     * property: \"x\"", "Invalid value \"y\" for configuration property
     * \"x\""). */
    return rd_kafka_conf_set(conf, p->name, p->value, errbuf, errlen) ==
           RD_KAFKA_CONF_OK;
}

rd_kafka_conf_t *mf__kafka_conf_new(const mf_kafka_prop_t *props, size_t n,
                                    const mf_kafka_prop_t *defaults,
                                    size_t ndefaults, char *errbuf,
                                    size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (size_t i = 0; i < ndefaults; i++) {
        if (mf__kafka_props_have(props, n, defaults[i].name))
            continue;
        if (!mf__conf_set(conf, &defaults[i], errbuf, errlen))
            goto fail;
    }
    for (size_t i = 0; i < n; i++)
        if (!mf__conf_set(conf, &props[i], errbuf, errlen))
            goto fail;
    return conf;
fail:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

void mf__kafka_error_map(rd_kafka_resp_err_t err, int *state, int *error)
{
    *state = MF_STATE_TASK_ERROR;
    switch (err) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
        *state = MF_STATE_SUCCESS;
        *error = 0;
        return;
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
        *state = MF_STATE_TIMEOUT;
        *error = MF_ETIMEDOUT;
        return;
    case RD_KAFKA_RESP_ERR__QUEUE_FULL:
        *error = MF_EBUSY;
        return;
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
        *error = MF_ENOENT;
        return;
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
        *error = MF_EMSGSIZE;
        return;
    case RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS:
        *error = MF_EEXIST;
        return;
    case RD_KAFKA_RESP_ERR__DESTROY:
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
        *error = MF_ECLOSED;
        return;
    default:
        *error = MF_EKAFKA;
        return;
    }
}

void mf__kafka_error_text(char *out, size_t len, rd_kafka_resp_err_t err,
                          const char *message)
{
    snprintf(out, len, "%s: %s", rd_kafka_err2name(err),
             message && message[0] ? message : rd_kafka_err2str(err));
}

void mf_kafka_error_text(int err, char *buf, size_t len)
{
    mf__kafka_error_text(buf, len, (rd_kafka_resp_err_t)err, NULL);
}

/* ---- the tasks' error head ------------------------------------------------
 */

void mf__kafka_task_init(mf__kafka_task_t *t)
{
    t->err = 0;
    t->errtext = NULL;
    t->errsize = 0;
}

void mf__kafka_task_fail(mf__kafka_task_t *t, rd_kafka_resp_err_t err,
                         const char *message)
{
    char text[512];
    mf__kafka_error_text(text, sizeof text, err, message);
    mf__kafka_task_release(t);
    t->err = (int)err;
    t->errsize = strlen(text) + 1;
    t->errtext = mf_loop_alloc(t->base._loop, t->errsize);
    memcpy(t->errtext, text, t->errsize);
    int state, error;
    mf__kafka_error_map(err, &state, &error);
    mf_task_complete(&t->base, state, error);
}

void mf__kafka_task_release(mf__kafka_task_t *t)
{
    if (t->errtext)
        mf_loop_free(t->base._loop, t->errtext, t->errsize);
    t->errtext = NULL;
    t->errsize = 0;
}

static const mf__kafka_task_t *mf__kafka_task_of(const mf_task_t *t)
{
    if (!t || strncmp(mf_task_kind(t), "kafka_", 6) != 0)
        return NULL;
    return (const mf__kafka_task_t *)(const void *)t;
}

const char *mf_task_kafka_error(const mf_task_t *t)
{
    const mf__kafka_task_t *kt = mf__kafka_task_of(t);
    return kt ? kt->errtext : NULL;
}

int mf_task_kafka_error_code(const mf_task_t *t)
{
    const mf__kafka_task_t *kt = mf__kafka_task_of(t);
    return kt ? kt->err : 0;
}
