/*
 * lua/serve/websocket_deflate.h — permessage-deflate (RFC 7692) for the
 * WebSockets of one worker (websocket.c): one deflater and one inflater
 * per worker's Lua state, reset for each message. The server always asks
 * both sides for no context takeover, so every message is compressed on
 * its own and a socket holds no zlib state between messages: idle
 * compressed sockets cost what plain ones do.
 *
 * Ownership: the state's registry owns the mf_ws_zlib_t (a userdata
 * whose __gc ends the zlib streams); callers borrow it for the state's
 * life. Threads: the worker's loop only.
 */
#ifndef MF_SERVE_WEBSOCKET_DEFLATE_H
#define MF_SERVE_WEBSOCKET_DEFLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

typedef struct mf_ws_zlib mf_ws_zlib_t;

/* The worker's compressor (made on first use). */
mf_ws_zlib_t *mf_ws_zlib_get(lua_State *L);

/* Inflates a whole compressed message in[0..n) (its frames' payloads
 * joined, without the tail the sender stripped) and pushes it: 0, or
 * -1009 when it inflates past max (0: no limit), -1007 when it is not
 * deflate data or, for text, not UTF-8 (nothing pushed then). */
int mf_ws_zlib_inflate(lua_State *L, mf_ws_zlib_t *z, const uint8_t *in,
                       size_t n, uint64_t max, bool text);

/* Compresses p[0..n) as one message with a window of 2^bits (9-15): 0
 * with *out (valid until the next call) and *out_len, the tail stripped
 * (§7.2.1); < 0 when zlib fails (send the message uncompressed). */
int mf_ws_zlib_deflate(mf_ws_zlib_t *z, unsigned bits, const void *p, size_t n,
                       const uint8_t **out, size_t *out_len);

#endif /* MF_SERVE_WEBSOCKET_DEFLATE_H */
