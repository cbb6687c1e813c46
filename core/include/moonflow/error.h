/*
 * moonflow/error.h — error codes and task completion states.
 *
 * Synchronous calls return 0 or a negative MF_E* code. Asynchronous
 * completions carry a (state, error) pair: the state says which kind of
 * failure (mf_state_t), the error says which one (an MF_E* code).
 * One X-macro table generates the enum, mf_strerror and mf_err_name.
 * All strings returned here are static; callers never free them.
 */
#ifndef MOONFLOW_ERROR_H
#define MOONFLOW_ERROR_H

#include <errno.h>

#include "common.h"

/* XX(name, value, message). System errors reuse the negated errno value so a
 * failed syscall maps to a code with no table lookup (libuv's convention). */
#define MF_ERRNO_MAP(XX)                                       \
    XX(EPERM, -EPERM, "operation not permitted")               \
    XX(ENOENT, -ENOENT, "no such file or directory")           \
    XX(EINTR, -EINTR, "interrupted system call")               \
    XX(EIO, -EIO, "i/o error")                                 \
    XX(EBADF, -EBADF, "bad file descriptor")                   \
    XX(EAGAIN, -EAGAIN, "resource temporarily unavailable")    \
    XX(ENOMEM, -ENOMEM, "out of memory")                       \
    XX(EACCES, -EACCES, "permission denied")                   \
    XX(EBUSY, -EBUSY, "resource busy")                         \
    XX(EEXIST, -EEXIST, "already exists")                      \
    XX(EINVAL, -EINVAL, "invalid argument")                    \
    XX(EMFILE, -EMFILE, "too many open files")                 \
    XX(ENOSPC, -ENOSPC, "no space left on device")             \
    XX(EPIPE, -EPIPE, "broken pipe")                           \
    XX(ERANGE, -ERANGE, "result out of range")                 \
    XX(ENOSYS, -ENOSYS, "function not implemented")            \
    XX(ELOOP, -ELOOP, "cycle in a graph")                      \
    XX(EMSGSIZE, -EMSGSIZE, "message too long")                \
    XX(EADDRINUSE, -EADDRINUSE, "address already in use")      \
    XX(EADDRNOTAVAIL, -EADDRNOTAVAIL, "address not available") \
    XX(ENETUNREACH, -ENETUNREACH, "network is unreachable")    \
    XX(ECONNABORTED, -ECONNABORTED, "connection aborted")      \
    XX(ECONNRESET, -ECONNRESET, "connection reset by peer")    \
    XX(ENOTCONN, -ENOTCONN, "socket is not connected")         \
    XX(ETIMEDOUT, -ETIMEDOUT, "timed out")                     \
    XX(ECONNREFUSED, -ECONNREFUSED, "connection refused")      \
    XX(EHOSTUNREACH, -EHOSTUNREACH, "host is unreachable")     \
    XX(EALREADY, -EALREADY, "operation already in progress")   \
    XX(EINPROGRESS, -EINPROGRESS, "operation in progress")     \
    XX(ECANCELED, -ECANCELED, "operation canceled")            \
    XX(EOF, -4095, "end of file")                              \
    XX(ECLOSED, -4094, "closed")                               \
    XX(EPROTO, -4093, "protocol error")                        \
    XX(ENOPOOL, -4092, "no compute pool attached to the loop") \
    XX(ESTOPPED, -4091, "loop is stopping")                    \
    XX(EDNS, -4090, "name resolution failed")                  \
    XX(ETLS, -4089, "tls failure")                             \
    XX(ETOOMANYREDIRECTS, -4088, "too many redirects")         \
    XX(EINSECUREREDIRECT, -4087, "insecure redirect")          \
    XX(ESQL, -4086, "the server refused the statement")        \
    XX(EKAFKA, -4085, "kafka error")                           \
    XX(ENOUPSTREAM, -4084, "no live upstream")

typedef enum mf_errno {
#define MF_ERR_ENUM(name, value, msg) MF_##name = (value),
    MF_ERRNO_MAP(MF_ERR_ENUM)
#undef MF_ERR_ENUM
} mf_errno_t;

/* How an asynchronous operation ended. MF_STATE_SUCCESS is 0 so callbacks can
 * write `if (mf_task_state(t))` for "failed". */
#define MF_STATE_MAP(XX)                    \
    XX(SUCCESS, 0, "success")               \
    XX(SYS_ERROR, 1, "system error")        \
    XX(TLS_ERROR, 2, "tls error")           \
    XX(DNS_ERROR, 3, "dns error")           \
    XX(TIMEOUT, 4, "timeout")               \
    XX(CANCELED, 5, "canceled")             \
    XX(PROTOCOL_ERROR, 6, "protocol error") \
    XX(TASK_ERROR, 7, "task error")

typedef enum mf_state {
#define MF_STATE_ENUM(name, value, msg) MF_STATE_##name = (value),
    MF_STATE_MAP(MF_STATE_ENUM)
#undef MF_STATE_ENUM
} mf_state_t;

MF_EXTERN_C_BEGIN

/* Human message for an MF_E* code ("unknown error" for others). */
MF_API const char *mf_strerror(int err);
/* Symbolic name ("ETIMEDOUT"), or "UNKNOWN". */
MF_API const char *mf_err_name(int err);
/* Stable lowercase name of a state ("timeout"): the strings the Lua layer
 * returns to scripts. */
MF_API const char *mf_state_name(int state);
/* Maps a positive errno value to its MF_E* code. */
static inline int mf_err_from_errno(int errnum)
{
    return -errnum;
}

MF_EXTERN_C_END

#endif /* MOONFLOW_ERROR_H */
