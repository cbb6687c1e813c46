/*
 * moonflow/moonflow.h — the whole public C API of the engine.
 */
#ifndef MOONFLOW_H
#define MOONFLOW_H

#include "common.h"
#include "dns.h"
#include "error.h"
#include "fswatch.h"
#include "list.h"
#include "loop.h"
#include "pool.h"
#include "series.h"
#include "task.h"
#include "tasks.h"
#include "workers.h"

#define MOONFLOW_VERSION "0.1.0"

#endif /* MOONFLOW_H */
