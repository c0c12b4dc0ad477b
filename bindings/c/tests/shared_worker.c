/* A worker process for the cross-language shared-region test
 * (bindings/python/tests/test_shared.py): opens the shared limiter at PATH,
 * prints "@ready", waits for a line on stdin, then THREADS threads check
 * keys 0..KEYS-1 at the instant T (LIMIT + 4 tries per key each), and it
 * prints "@<admitted>". A failed open prints "@status <n>" and exits 0, so
 * the caller can check named errors from C too.
 *
 * Usage: shared_worker PATH ALGORITHM LIMIT PERIOD_NS CAPACITY T KEYS THREADS
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ratecell.h"
#include "requests.h"

static ratecell_limiter *limiter;
static uint64_t limit, instant, keys;

static void *run(void *arg) {
    uint64_t *admitted = arg;
    for (uint64_t key = 0; key < keys; key++) {
        for (uint64_t i = 0; i < limit + 4; i++) {
            ratecell_decision d;
            if (rq_check(limiter, key, 1, instant, &d) != RATECELL_OK) {
                fprintf(stderr, "shared_worker: check failed\n");
                exit(2);
            }
            *admitted += d.allowed ? 1u : 0u;
        }
    }
    return NULL;
}

static uint64_t number(const char *text) { return strtoull(text, NULL, 10); }

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr,
                "usage: shared_worker PATH ALGORITHM LIMIT PERIOD_NS CAPACITY T KEYS THREADS\n");
        return 2;
    }
    ratecell_algorithm algorithm;
    if (ratecell_algorithm_from_name((const uint8_t *)argv[2], strlen(argv[2]), &algorithm) != RATECELL_OK) {
        fprintf(stderr, "shared_worker: unknown algorithm %s\n", argv[2]);
        return 2;
    }
    limit = number(argv[3]);
    ratecell_config cfg;
    ratecell_config_init(&cfg, algorithm, limit, number(argv[4]));
    cfg.capacity = number(argv[5]);
    instant = number(argv[6]);
    keys = number(argv[7]);
    size_t threads = (size_t)number(argv[8]);
    if (threads == 0 || threads > 64) {
        fprintf(stderr, "shared_worker: THREADS must be 1..64\n");
        return 2;
    }
    ratecell_status status = rq_open_shared(argv[1], &cfg, 0, &limiter);
    if (status != RATECELL_OK) {
        printf("@status %u\n", (unsigned)status);
        return 0;
    }
    printf("@ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) {
        return 2;
    }
    pthread_t tid[64];
    uint64_t admitted[64] = {0};
    for (size_t i = 0; i < threads; i++) {
        if (pthread_create(&tid[i], NULL, run, &admitted[i]) != 0) {
            return 2;
        }
    }
    uint64_t total = 0;
    for (size_t i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        total += admitted[i];
    }
    printf("@%llu\n", (unsigned long long)total);
    ratecell_limiter_free(limiter);
    return 0;
}
