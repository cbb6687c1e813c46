/*
 * moonflow/moonflow.h — the whole public C API of the engine: the loop and
 * the flow primitives, the basic and go tasks, the compute pool and the
 * workers, DNS, the file watcher, TLS settings, the HTTP and Redis
 * clients, the HTTP server and proxying, the dict shared by every thread
 * (shdict.h), client byte streams and their keepalive pool (stream.h),
 * the listening sockets of one process per address, the MySQL and Kafka
 * clients, the metrics registry (metrics.h), and the load generator's
 * latency histogram and HTTP loads (hdr.h, load.h). Each header says what
 * it owns; this one only gathers them, every header of
 * core/include/moonflow (a test checks it).
 */
#ifndef MOONFLOW_H
#define MOONFLOW_H

#include "codec.h"
#include "common.h"
#include "dns.h"
#include "endpoint.h"
#include "upstream.h"
#include "error.h"
#include "fswatch.h"
#include "go.h"
#include "graph.h"
#include "hdr.h"
#include "http_client.h"
#include "http_compress.h"
#include "http_forward.h"
#include "http_parser.h"
#include "http_server.h"
#include "http_static.h"
#include "kafka.h"
#include "list.h"
#include "listen.h"
#include "load.h"
#include "loop.h"
#include "metrics.h"
#include "mysql.h"
#include "parallel.h"
#include "pool.h"
#include "redis.h"
#include "series.h"
#include "shdict.h"
#include "stream.h"
#include "task.h"
#include "tasks.h"
#include "tls.h"
#include "url.h"
#include "websocket.h"
#include "workers.h"

/* The release; CMake reads its project version from this line. */
#define MOONFLOW_VERSION "0.1.0"

#endif /* MOONFLOW_H */
