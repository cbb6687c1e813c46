/*
 * lua/serve/serve_main.h — the serve application's one entry, for the
 * binary's command dispatch (lua/main): everything else in lua/serve is
 * its own.
 */
#ifndef MF_SERVE_MAIN_H
#define MF_SERVE_MAIN_H

/* serve.c: `moonflow serve ARGS`; owns the process until it returns the
 * exit code. */
int mf_serve_main(int argc, char **argv);

#endif /* MF_SERVE_MAIN_H */
