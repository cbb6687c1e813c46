/*
 * lua/host/mf_lua_instrument.h — loop checks written into Lua source text
 * (mf_lua_instrument.c): a lexer-level rewriter, plain C (no Lua state),
 * so that its unit test and its fuzz target take it alone. mf_lua_load.c
 * loads what it writes.
 *
 * Why: LuaJIT's compiled traces never check hooks, so the watchdog's hook
 * cannot stop a compiled loop. A check written into the source at the
 * start of every loop body, before every goto and at the start of every
 * function body is compiled into the trace like any other code: one load
 * of the host's stop word and one branch per iteration.
 *
 * The text written, for a chunk BODY:
 *
 *   local __mf_w,__mf_s,__mf_h=... return function(...) BODY end
 *
 * with CHECK = " if __mf_w[0]~=0 then __mf_h() end __mf_s[0]=0 " after
 * every `do` of a while/for, after every `repeat`, after every function's
 * parameter list, and before every `goto`. Loading it and calling the
 * result once with (stop word, scratch word, halt function) gives the
 * chunk's function (a closure of the three: no global is read, so an
 * environment set on the chunk changes nothing of the checks). __mf_w and __mf_s are int32_t pointers (FFI cdata): the store
 * to the scratch word, which LuaJIT's alias analysis cannot tell apart
 * from the stop word, keeps the load of the stop word inside the compiled
 * loop (the FFI ignores `volatile`: without the store the load would be
 * hoisted out of the loop and read once).
 *
 * No newline is added inside the text: every line of the chunk keeps its
 * number (errors and tracebacks name the same lines). The closing words
 * go on the last line, or on a line of their own when the last line ends
 * in a comment (newline_added).
 */
#ifndef MF_LUA_INSTRUMENT_H
#define MF_LUA_INSTRUMENT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct mf_lua_instrumented {
    char *text; /* malloc'd; the caller frees it */
    size_t len;
    bool newline_added; /* the closing words needed a line of their own */
    unsigned checks;    /* checks written (tests) */
} mf_lua_instrumented_t;

/* Writes the checked text of src[0..len) into *out: 0; or -1 (blocks
 * nested deeper than Lua's parser allows, or no memory), out untouched.
 * Text that is not valid Lua is rewritten all the same: it fails to load
 * either way. Not for bytecode (it starts with "\033LJ"). */
int mf_lua_instrument(const char *src, size_t len, mf_lua_instrumented_t *out);

#endif /* MF_LUA_INSTRUMENT_H */
