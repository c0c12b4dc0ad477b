/*
 * A forked child's limiters keep working (issue 20, item 2): fork while
 * other threads check, then, in the child, coarse-clock limiters made
 * before and after the fork must see time pass, and acquire must return.
 * (A child whose coarse clock stood still denied forever after its burst
 * and never returned from acquire.)
 *
 * The threads check keys already in the table: a fork while a thread holds
 * a shard's insert latch is the subject of another test. The second test
 * forks while threads hold per-key latches (bucketed window, sliding log).
 */
#define _POSIX_C_SOURCE 200809L

#include "ratecell.h"
#include "requests.h"

#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SECOND 1000000000ull

static atomic_bool stop;
static ratecell_limiter *before; /* one state, coarse clock */
static ratecell_limiter *keyed;  /* a table, coarse clock */

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* 100 per second, one at a time: the next request is 10 ms away. */
static ratecell_limiter *spaced(uint64_t capacity) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_GCRA, 100, SECOND);
    cfg.burst = 1;
    cfg.capacity = capacity;
    cfg.clock = RATECELL_CLOCK_COARSE;
    ratecell_limiter *l = NULL;
    if (ratecell_limiter_new(&cfg, &l) != RATECELL_OK) {
        return NULL;
    }
    return l;
}

static void *checker(void *arg) {
    uint64_t key = (uint64_t)(uintptr_t)arg;
    ratecell_decision d;
    while (!atomic_load(&stop)) {
        rq_check(before, 0, 0, RATECELL_NOW, &d);
        rq_check(keyed, key, 0, RATECELL_NOW, &d);
    }
    return NULL;
}

/* In the child: the number of failures. */
static int child(void) {
    int failures = 0;
    ratecell_limiter *after = spaced(0);
    if (after == NULL) {
        fprintf(stderr, "child: cannot make a limiter\n");
        return 1;
    }
    /* The child's refresher must move the time on: 10 ms of it within 2 s
     * (a frozen clock never does; a busy machine may take a while to
     * schedule the restarted refresher, so the wait is generous). */
    uint64_t t0 = ratecell_now_ns(before);
    int waited_ms = 0;
    while (ratecell_now_ns(before) <= t0 + 10000000ull && waited_ms < 2000) {
        sleep_ms(10);
        waited_ms += 10;
    }
    if (ratecell_now_ns(before) <= t0 + 10000000ull) {
        fprintf(stderr, "child: the coarse time stood still at %llu\n", (unsigned long long)t0);
        failures++;
    }
    ratecell_limiter *limiters[] = {before, after, keyed};
    for (int i = 0; i < 3; i++) {
        ratecell_decision d;
        rq_check(limiters[i], 1, 1, RATECELL_NOW, &d);
        ratecell_status s = rq_acquire(limiters[i], 1, 0, 1, 2 * SECOND, &d);
        if (s != RATECELL_OK) {
            fprintf(stderr, "child: acquire on limiter %d: %s\n", i, ratecell_status_str(s));
            failures++;
        }
    }
    ratecell_limiter_free(after);
    return failures;
}

static void test_coarse_limiters_keep_time_in_forked_children(void) {
    before = spaced(0);
    keyed = spaced(64);
    CHECK(before != NULL && keyed != NULL);
    if (before == NULL || keyed == NULL) {
        return;
    }
    ratecell_decision d;
    for (uint64_t key = 0; key < 8; key++) {
        rq_check(keyed, key, 1, RATECELL_NOW, &d);
    }
    atomic_store(&stop, false);
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        CHECK(pthread_create(&threads[i], NULL, checker, (void *)(uintptr_t)i) == 0);
    }
    sleep_ms(10);
    for (int round = 0; round < 8; round++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            _exit(child() == 0 ? 0 : 1);
        }
        /* At most 20 s per child: a hung one is killed and counted. */
        int status = 0;
        bool done = false;
        for (int waited = 0; waited < 2000 && !done; waited++) {
            done = waitpid(pid, &status, WNOHANG) == pid;
            if (!done) {
                sleep_ms(10);
            }
        }
        if (!done) {
            fprintf(stderr, "child %d hung: killed\n", round);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        CHECK(done && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++) {
        pthread_join(threads[i], NULL);
    }
    ratecell_limiter_free(before);
    ratecell_limiter_free(keyed);
}

/*
 * A fork while other threads hold the latch of a bucketed-window or
 * sliding-log key (keyed and direct): those latches record no holder, and
 * a child that inherited one held spun on it forever. Every check is at
 * one explicit time, so each key admits at most BLOCK_LIMIT in all; the
 * threads count what they are admitted (after each check returns), and a
 * child may admit at most what those counts, copied at the fork, left.
 */
#define BLOCK_LIMIT 20u
#define BLOCK_KEYS 16u
#define BLOCK_LIMITERS 4
#define T0 1700000000000000000ull

static ratecell_limiter *blocks[BLOCK_LIMITERS];
static atomic_ullong counted[BLOCK_LIMITERS][BLOCK_KEYS];

static ratecell_limiter *block_limiter(ratecell_algorithm alg, uint64_t capacity) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, alg, BLOCK_LIMIT, 3600 * SECOND);
    cfg.sub_windows = 6;
    cfg.capacity = capacity;
    ratecell_limiter *l = NULL;
    if (ratecell_limiter_new(&cfg, &l) != RATECELL_OK) {
        return NULL;
    }
    return l;
}

static void *block_checker(void *arg) {
    uint64_t i = (uint64_t)(uintptr_t)arg;
    uint64_t fresh = (i + 1) << 40;
    ratecell_decision d;
    while (!atomic_load(&stop)) {
        i = i * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t key = (i >> 33) % BLOCK_KEYS;
        for (int n = 0; n < BLOCK_LIMITERS; n++) {
            if (rq_check(blocks[n], key, 1, T0, &d) == RATECELL_OK && d.allowed) {
                atomic_fetch_add(&counted[n][key], 1);
            }
        }
        /* New keys: a full table latches other keys' places to evict. */
        rq_check(blocks[0], ++fresh, 1, T0, &d);
    }
    return NULL;
}

static int block_child(void) {
    int failures = 0;
    for (int n = 0; n < BLOCK_LIMITERS; n++) {
        for (uint64_t key = 0; key < BLOCK_KEYS; key++) {
            unsigned long long before_fork = atomic_load(&counted[n][key]);
            unsigned long long admitted = 0;
            for (unsigned j = 0; j < BLOCK_LIMIT + 5; j++) {
                ratecell_decision d;
                if (rq_check(blocks[n], key, 1, T0, &d) == RATECELL_OK && d.allowed) {
                    admitted++;
                }
            }
            if (before_fork + admitted > BLOCK_LIMIT) {
                fprintf(stderr, "child: limiter %d key %llu: %llu counted, %llu more\n", n,
                        (unsigned long long)key, before_fork, admitted);
                failures++;
            }
        }
    }
    return failures;
}

static void test_forks_while_block_latches_are_held(void) {
    blocks[0] = block_limiter(RATECELL_ALGORITHM_SLIDING_LOG, 64);
    blocks[1] = block_limiter(RATECELL_ALGORITHM_BUCKETED_WINDOW, 64);
    blocks[2] = block_limiter(RATECELL_ALGORITHM_SLIDING_LOG, 0);
    blocks[3] = block_limiter(RATECELL_ALGORITHM_BUCKETED_WINDOW, 0);
    for (int n = 0; n < BLOCK_LIMITERS; n++) {
        CHECK(blocks[n] != NULL);
        if (blocks[n] == NULL) {
            return;
        }
    }
    atomic_store(&stop, false);
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        CHECK(pthread_create(&threads[i], NULL, block_checker, (void *)(uintptr_t)i) == 0);
    }
    int hung = 0, failed = 0;
    for (int round = 0; round < 30; round++) {
        sleep_ms(2);
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            alarm(10); /* a hang ends the child (SIGALRM), not the run */
            _exit(block_child() == 0 ? 0 : 1);
        }
        int status = 0;
        bool done = false;
        for (int waited = 0; waited < 500 && !done; waited++) {
            done = waitpid(pid, &status, WNOHANG) == pid;
            if (!done) {
                sleep_ms(10);
            }
        }
        if (!done) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        if (!done || WIFSIGNALED(status)) {
            hung++;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            failed++;
        }
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++) {
        pthread_join(threads[i], NULL);
    }
    if (hung != 0 || failed != 0) {
        fprintf(stderr, "of 30 children, %d hung on a copied key latch, %d over-admitted\n", hung,
                failed);
    }
    CHECK(hung == 0);
    CHECK(failed == 0);
    for (int n = 0; n < BLOCK_LIMITERS; n++) {
        ratecell_limiter_free(blocks[n]);
    }
}

int main(void) {
    RUN(test_coarse_limiters_keep_time_in_forked_children);
    RUN(test_forks_while_block_latches_are_held);
    return harness_finish();
}
