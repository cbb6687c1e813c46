/*
 * bench/malloc_count.c — an LD_PRELOAD library that counts every malloc,
 * calloc and realloc of a process (all threads, libc and OpenSSL included)
 * and writes the count to stderr on SIGUSR2, so a benchmark can read the
 * allocations per request of a real server between two signals. Linked
 * into bench_engine, which reads it with malloc_count_read.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static atomic_ulong mallocs;

void *malloc(size_t n);
void *calloc(size_t n, size_t size);
void *realloc(void *p, size_t n);
void free(void *p);
unsigned long malloc_count_read(void);

unsigned long malloc_count_read(void)
{
    return atomic_load(&mallocs);
}

void *malloc(size_t n)
{
    atomic_fetch_add_explicit(&mallocs, 1, memory_order_relaxed);
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    atomic_fetch_add_explicit(&mallocs, 1, memory_order_relaxed);
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    atomic_fetch_add_explicit(&mallocs, 1, memory_order_relaxed);
    return __libc_realloc(p, n);
}

void free(void *p)
{
    __libc_free(p);
}

/* Async-signal-safe: formats the number by hand and write()s it. */
static void report(int sig)
{
    char buf[40];
    char *p = buf + sizeof buf;
    unsigned long v = atomic_load(&mallocs);
    (void)sig;
    *--p = '\n';
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    static const char tag[] = "mallocs ";
    p -= sizeof tag - 1;
    for (size_t i = 0; i < sizeof tag - 1; i++)
        p[i] = tag[i];
    (void)!write(2, p, (size_t)(buf + sizeof buf - p));
}

/* sigaction, not signal(): under -std=c11 signal() is one-shot. */
__attribute__((constructor)) static void install(void)
{
    struct sigaction sa;
    sa.sa_handler = report;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
}
