/*
 * fuzz_h2c.c — libFuzzer target for Upgrade: h2c (RFC 7540 §3.2): the
 * HTTP/2 server of fuzz_http2.c reached from HTTP/1. Its harness, with the
 * input sent as it is: an HTTP/1.1 request that asks for h2c (its
 * HTTP2-Settings, its fields, a body or none), then the client's preface
 * and frames (the seeds in corpus/h2c are such). Checked as there: the
 * server ends the connection within bounds, leaves none open, and
 * ASan/UBSan see no fault.
 */
#define MF_FUZZ_LEAD ""
#include "fuzz_http2.c"
