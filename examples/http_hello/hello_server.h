/*
 * hello_server.h — everything the C hello server needs apart from its
 * routes: the common command-line options, the body of "/", and one
 * mf_http_server per worker (SO_REUSEPORT) until SIGINT or SIGTERM, then a
 * graceful stop. examples/http_hello/main.c adds /fanout; the integration
 * tests' server (spec/fixture/http_fixture.c) adds the routes and limits
 * the tests need, on the same frame.
 *
 * Calls only the public API (moonflow/http_server.h, moonflow/workers.h).
 * Threads: every function here runs on main's thread, except
 * hello_server_answer, which a handler calls on its worker's loop.
 */
#ifndef HELLO_SERVER_H
#define HELLO_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <moonflow/http_server.h>

typedef struct hello_options {
    mf_http_server_config_t config; /* the strings stay in argv */
    unsigned workers;               /* default 1 */
    size_t body_size;               /* bytes "/" answers; default 16 */
} hello_options_t;

/* A flag the common options do not know: 0 when taken, -1 when unknown or
 * its value is bad (the callee says which, on stderr). */
typedef int (*hello_option_fn)(void *ctx, const char *flag, char *value);

/*
 * Reads argv as "--flag value" pairs into o, after setting the defaults:
 * --listen ADDR, --workers N, --body-size N, --tls-cert FILE, --tls-key
 * FILE, --max-connections N; any other flag goes to extra (may be NULL).
 * Returns 0, or -1 after a message naming the flag on stderr.
 */
int hello_server_options(hello_options_t *o, int argc, char **argv,
                         hello_option_fn extra, void *ctx);

/* value as a decimal number from 0 to max into *out; -1 after a message
 * naming the flag when it is not one. */
int hello_server_number(const char *flag, const char *value, uint64_t max,
                        uint64_t *out);

/* Answers with the "/" body: body_size bytes of "0123456789abcdef"
 * repeated, by reference (no copy). Only while hello_server_run runs. */
void hello_server_answer(mf_http_exchange_t *ex);

/*
 * Serves with handler(ex, user) on o->workers workers until SIGINT or
 * SIGTERM, then stops every server gracefully (requests in flight finish)
 * and returns 0; returns 1 when a server cannot start. Prints "listening on
 * ADDR (port P), N workers" once all listen, and "stopped" at the end; name
 * prefixes error messages.
 */
int hello_server_run(const char *name, const hello_options_t *o,
                     mf_http_handler handler, void *user);

#endif /* HELLO_SERVER_H */
