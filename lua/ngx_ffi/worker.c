/*
 * lua/ngx_ffi/worker.c — resty.core.worker's ngx.worker.*: the numbers of
 * the worker whose Lua state calls (the host made on this thread: a
 * `moonflow serve` worker is a thread with its own state; `moonflow run`
 * is worker 0 of 1). Workers are threads of one process: pid() is the
 * process's and pids() lists it once. exiting() is false: a stopping
 * worker finishes its requests as usual.
 */
#include "ngx_ffi.h"

#include <unistd.h>

#include "host/mf_lua_int.h"

int ngx_http_lua_ffi_worker_id(void)
{
    mf_lua_host_t *host = mf_lua_host_on_thread();
    return host ? (int)host->worker_id : -1;
}

int ngx_http_lua_ffi_worker_count(void)
{
    mf_lua_host_t *host = mf_lua_host_on_thread();
    return host ? (int)host->worker_count : 1;
}

int ngx_http_lua_ffi_worker_pid(void)
{
    return (int)getpid();
}

/* pids has room for 1024 (resty.core's NGX_MAX_PROCESSES). */
int ngx_http_lua_ffi_worker_pids(int *pids, size_t *pids_len)
{
    pids[0] = (int)getpid();
    *pids_len = 1;
    return NGX_FFI_OK;
}

int ngx_http_lua_ffi_worker_exiting(void)
{
    return 0;
}
