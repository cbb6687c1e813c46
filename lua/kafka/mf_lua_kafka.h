/*
 * lua/kafka/mf_lua_kafka.h — internals of the Kafka binding shared by
 * mf_lua_kafka.c (mf.kafka: the producer object, k:produce, k:metadata,
 * k:create_topic, k:consumer, errors), mf_lua_task_kafka_produce.c (the
 * "kafka_produce" task kind) and mf_lua_kafka_consumer.c (the consumer
 * object and its methods).
 *
 * A producer object ("moonflow.kafka" userdata) holds one reference to a
 * process-wide mf_kafka_t and the property list it was opened with (the
 * consumer starts from it). A consumer object ("moonflow.kafka.consumer")
 * owns its mf_kafka_consumer_t, which belongs to the worker's loop.
 */
#ifndef MF_LUA_KAFKA_H
#define MF_LUA_KAFKA_H

#include <stddef.h>

#include <lua.h>

#include <moonflow/kafka.h>

#define MF_LUA_KAFKA "moonflow.kafka"
#define MF_LUA_KAFKA_CONSUMER "moonflow.kafka.consumer"

/* The Lua producer object. props/nprops: the opening properties (names and
 * values owned by the object, freed with it). */
typedef struct mf_lua_kafka {
    mf_kafka_t *k;
    mf_kafka_prop_t *props;
    size_t nprops;
} mf_lua_kafka_t;

/* The producer object at idx; raises on anything else. */
mf_lua_kafka_t *mf_lua_kafka_check(lua_State *L, int idx);

/* k:consumer(opts): opens a consumer from the producer object at kidx and
 * the options table at optsidx, pushes the consumer object. Raises on a bad
 * option or property (librdkafka's message). Defined in
 * mf_lua_kafka_consumer.c. */
int mf_lua_kafka_consumer_new(lua_State *L, int kidx, int optsidx);

/* The message table at idx as an mf_kafka_message_t (strings point into
 * the table's values: keep the table on the stack until the task copied
 * them; headers go into *headers, an array pushed as a userdata on the
 * stack when there are any). Raises on a missing topic, an unknown key or a
 * wrong type, naming it. */
void mf_lua_kafka_check_message(lua_State *L, int idx, mf_kafka_message_t *m);

/* The error string of a failed Kafka task ("kafka NAME: message", or
 * "STATE: error"), written to buf. NULL for a success. */
#define MF_LUA_KAFKA_ERR_MAX 512
const char *mf_lua_kafka_error(const mf_task_t *task, char *buf, size_t len);

/* moonflow.kafka: open (mf_lua_kafka.c). */
int mf_lua_open_kafka(lua_State *L);

#endif /* MF_LUA_KAFKA_H */
