/*
 * lua/kafka_mock/kafka_mock_main.h — the kafka-mock application's one
 * entry, for the binary's command dispatch (lua/main): everything else in
 * lua/kafka_mock is its own.
 */
#ifndef MF_KAFKA_MOCK_MAIN_H
#define MF_KAFKA_MOCK_MAIN_H

/* kafka_mock.c: `moonflow kafka-mock ARGS`; runs until SIGTERM or SIGINT.
 * The exit code: 0 (stopped by a signal), 1 (the cluster or a port could
 * not be had), 2 (bad arguments). */
int mf_kafka_mock_main(int argc, char **argv);

#endif /* MF_KAFKA_MOCK_MAIN_H */
