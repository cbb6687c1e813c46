/*
 * C11 threads through pthread, for the ThreadSanitizer programs only.
 *
 * librdkafka starts its threads and takes its locks with C11's thrd_create,
 * mtx_lock, cnd_wait ... glibc (2.34 and later) implements them by calling
 * its pthread functions internally, past the interceptors of TSan (GCC 12's
 * and clang 14's have none for the C11 names). TSan then knows neither
 * librdkafka's threads (it crashes in their first intercepted call: no
 * thread state) nor the locks that order their work against ours (a
 * delivery report read on librdkafka's thread after our thread wrote it
 * would be reported as a race). Defined in the program, these names take
 * the place of glibc's for librdkafka too, and call the pthread functions
 * TSan intercepts.
 *
 * librdkafka hands its objects between its threads with atomics TSan
 * cannot see (it is not instrumented), so a lock it creates on one thread
 * and takes on another would look like a race on the lock's memory: the
 * writes of init and destroy are not recorded (the lock itself still
 * orders what runs under it). Only librdkafka calls these functions; our
 * code uses pthread.
 *
 * glibc's thrd_t is a pthread_t and its mtx_t, cnd_t and once_flag have
 * the layout of pthread_mutex_t, pthread_cond_t and pthread_once_t, so the
 * objects librdkafka allocates serve both.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

/* TSan's runtime: the writes between Begin and End are not recorded. */
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);

_Static_assert(sizeof(thrd_t) == sizeof(pthread_t), "thrd_t is pthread_t");
_Static_assert(sizeof(mtx_t) == sizeof(pthread_mutex_t), "mtx_t layout");
_Static_assert(sizeof(cnd_t) == sizeof(pthread_cond_t), "cnd_t layout");
_Static_assert(sizeof(once_flag) == sizeof(pthread_once_t), "once_flag layout");

typedef struct thrd_start_arg {
    thrd_start_t fn;
    void *arg;
} thrd_start_arg_t;

static void *thrd_start(void *p)
{
    thrd_start_arg_t start = *(thrd_start_arg_t *)p;
    free(p);
    return (void *)(intptr_t)start.fn(start.arg);
}

static int thrd_status(int err)
{
    switch (err) {
    case 0:
        return thrd_success;
    case ENOMEM:
        return thrd_nomem;
    case ETIMEDOUT:
        return thrd_timedout;
    case EBUSY:
        return thrd_busy;
    default:
        return thrd_error;
    }
}

int thrd_create(thrd_t *thr, thrd_start_t fn, void *arg)
{
    thrd_start_arg_t *start = malloc(sizeof *start);
    if (!start)
        return thrd_nomem;
    start->fn = fn;
    start->arg = arg;
    int err = pthread_create((pthread_t *)thr, NULL, thrd_start, start);
    if (err)
        free(start);
    return thrd_status(err);
}

int thrd_join(thrd_t thr, int *res)
{
    void *ret;
    int err = pthread_join((pthread_t)thr, &ret);
    if (!err && res)
        *res = (int)(intptr_t)ret;
    return thrd_status(err);
}

int thrd_detach(thrd_t thr)
{
    return thrd_status(pthread_detach((pthread_t)thr));
}

int mtx_init(mtx_t *m, int type)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    if (type & mtx_recursive)
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
    int err = pthread_mutex_init((pthread_mutex_t *)m, &attr);
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    pthread_mutexattr_destroy(&attr);
    return thrd_status(err);
}

int mtx_lock(mtx_t *m)
{
    return thrd_status(pthread_mutex_lock((pthread_mutex_t *)m));
}

int mtx_trylock(mtx_t *m)
{
    return thrd_status(pthread_mutex_trylock((pthread_mutex_t *)m));
}

int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict until)
{
    return thrd_status(pthread_mutex_timedlock((pthread_mutex_t *)m, until));
}

int mtx_unlock(mtx_t *m)
{
    return thrd_status(pthread_mutex_unlock((pthread_mutex_t *)m));
}

void mtx_destroy(mtx_t *m)
{
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
    pthread_mutex_destroy((pthread_mutex_t *)m);
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
}

int cnd_init(cnd_t *c)
{
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
    int err = pthread_cond_init((pthread_cond_t *)c, NULL);
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    return thrd_status(err);
}

int cnd_signal(cnd_t *c)
{
    return thrd_status(pthread_cond_signal((pthread_cond_t *)c));
}

int cnd_broadcast(cnd_t *c)
{
    return thrd_status(pthread_cond_broadcast((pthread_cond_t *)c));
}

int cnd_wait(cnd_t *c, mtx_t *m)
{
    return thrd_status(
        pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}

/* C11 measures `until` on CLOCK_REALTIME, as pthread_cond_timedwait does
 * with a condition initialized without attributes (cnd_init above). */
int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m,
                  const struct timespec *restrict until)
{
    return thrd_status(pthread_cond_timedwait((pthread_cond_t *)c,
                                              (pthread_mutex_t *)m, until));
}

void cnd_destroy(cnd_t *c)
{
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
    pthread_cond_destroy((pthread_cond_t *)c);
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
}

void call_once(once_flag *flag, void (*fn)(void))
{
    pthread_once((pthread_once_t *)flag, fn);
}
