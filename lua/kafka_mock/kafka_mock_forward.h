/*
 * lua/kafka_mock/kafka_mock_forward.h — fixed loopback ports forwarded to
 * the mock cluster's brokers, whose own ports librdkafka picks anew at
 * every start.
 */
#ifndef MF_KAFKA_MOCK_FORWARD_H
#define MF_KAFKA_MOCK_FORWARD_H

#include <stddef.h>

#define MF_KMOCK_MAX_BROKERS 64

typedef struct mf_kmock_forward mf_kmock_forward_t;

/* Listens on 127.0.0.1:first_port .. first_port+n-1 (nothing is accepted
 * yet). NULL with the reason, naming the port, in why. */
mf_kmock_forward_t *mf_kmock_forward_listen(int first_port, int n, char *why,
                                            size_t len);

/* Starts forwarding: a connection to the i-th port is relayed to the i-th
 * address of targets ("HOST:PORT,HOST:PORT,..."). -1 with why. */
int mf_kmock_forward_start(mf_kmock_forward_t *f, const char *targets,
                           char *why, size_t len);

/* Stops accepting and closes the listeners. Relays under way end when
 * either side closes (the cluster's, when it is destroyed). */
void mf_kmock_forward_stop(mf_kmock_forward_t *f);

#endif /* MF_KAFKA_MOCK_FORWARD_H */
