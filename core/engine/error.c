/*
 * error.c — strings for error codes and states, generated from the tables in
 * moonflow/error.h.
 */
#include "moonflow/error.h"

const char *mf_strerror(int err)
{
    switch (err) {
#define MF_ERR_MSG(name, value, msg) \
    case MF_##name:                  \
        return msg;
        MF_ERRNO_MAP(MF_ERR_MSG)
#undef MF_ERR_MSG
    case 0:
        return "success";
    default:
        return "unknown error";
    }
}

const char *mf_err_name(int err)
{
    switch (err) {
#define MF_ERR_NAME(name, value, msg) \
    case MF_##name:                   \
        return #name;
        MF_ERRNO_MAP(MF_ERR_NAME)
#undef MF_ERR_NAME
    case 0:
        return "OK";
    default:
        return "UNKNOWN";
    }
}

const char *mf_state_name(int state)
{
    switch (state) {
#define MF_STATE_STR(name, value, msg) \
    case MF_STATE_##name:              \
        return msg;
        MF_STATE_MAP(MF_STATE_STR)
#undef MF_STATE_STR
    default:
        return "unknown";
    }
}
