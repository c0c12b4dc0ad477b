/*
 * C11 tests of ratecell's C ABI (include/ratecell.h): the SPEC examples of
 * every algorithm, batches, byte keys, the yes/no check, acquire,
 * statistics, every error status, and four threads racing at one instant.
 *
 * Built and run by scripts/c-tests.sh, once normally and once under
 * -fsanitize=address,undefined. Prints "N passed, M failed" last.
 */
/* pthread barriers and clock_gettime are POSIX, outside strict C11. */
#define _POSIX_C_SOURCE 200809L

#include "ratecell.h"
#include "requests.h"

#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SECOND UINT64_C(1000000000)
#define MINUTE (60 * SECOND)
#define HOUR (60 * MINUTE)
/* An explicit start time: a whole number of hours, far from 0 and 2^62. */
#define T0 (UINT64_C(480000) * HOUR)

static const uint32_t ALGORITHMS[] = {
    RATECELL_ALGORITHM_GCRA,           RATECELL_ALGORITHM_LEAKY_BUCKET,
    RATECELL_ALGORITHM_TOKEN_BUCKET,   RATECELL_ALGORITHM_FIXED_WINDOW,
    RATECELL_ALGORITHM_SLIDING_WINDOW, RATECELL_ALGORITHM_BUCKETED_WINDOW,
    RATECELL_ALGORITHM_SLIDING_LOG,
};
#define N_ALGORITHMS (sizeof ALGORITHMS / sizeof ALGORITHMS[0])

/* A limiter for `cfg`, or NULL (and a failed check) when it is refused. */
static ratecell_limiter *make_cfg(const ratecell_config *cfg) {
    ratecell_limiter *l = NULL;
    ratecell_status s = ratecell_limiter_new(cfg, &l);
    if (s != RATECELL_OK) {
        fprintf(stderr, "ratecell_limiter_new: %s\n", ratecell_status_str(s));
    }
    CHECK(s == RATECELL_OK);
    CHECK(l != NULL);
    return l;
}

static ratecell_limiter *make(ratecell_algorithm algorithm, uint64_t limit,
                              uint64_t period_ns, uint64_t burst,
                              uint64_t capacity) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, algorithm, limit, period_ns);
    if (burst != 0) {
        cfg.burst = burst;
    }
    cfg.capacity = capacity;
    return make_cfg(&cfg);
}

/* One check at an explicit time; the status must be OK. */
static ratecell_decision at(const ratecell_limiter *l, uint64_t key,
                            uint64_t cost, uint64_t now) {
    ratecell_decision d;
    memset(&d, 0xAB, sizeof d);
    CHECK(rq_check(l, key, cost, now, &d) == RATECELL_OK);
    return d;
}

/* One yes/no check at an explicit time; the status must be OK. */
static bool allowed_at(const ratecell_limiter *l, uint64_t key, uint64_t now) {
    ratecell_decision d;
    CHECK(rq_check(l, key, 1, now, &d) == RATECELL_OK);
    return d.allowed;
}

/* ---- version and configuration ------------------------------------- */

static void test_version_matches_the_header_macros(void) {
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", RATECELL_VERSION_MAJOR,
             RATECELL_VERSION_MINOR, RATECELL_VERSION_PATCH);
    CHECK(strcmp(ratecell_version(), expected) == 0);
}

static void test_config_init_fills_spec_defaults(void) {
    ratecell_config cfg;
    memset(&cfg, 0xFF, sizeof cfg);
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_TOKEN_BUCKET, 7, 60 * SECOND);
    CHECK(cfg.algorithm == RATECELL_ALGORITHM_TOKEN_BUCKET);
    CHECK_EQ_U64(cfg.limit, 7);
    CHECK_EQ_U64(cfg.period_ns, 60 * SECOND);
    CHECK_EQ_U64(cfg.burst, 7);
    CHECK_EQ_U64(cfg.sub_windows, 10);
    CHECK_EQ_U64(cfg.capacity, 0);
    CHECK_EQ_U64(cfg.overflow, RATECELL_OVERFLOW_DENY);
    CHECK_EQ_U64(cfg.clock, RATECELL_CLOCK_TSC);
    /* 10 does not divide the period: one sub-window. */
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_BUCKETED_WINDOW, 7, 1000003);
    CHECK_EQ_U64(cfg.sub_windows, 1);
    ratecell_config_init(NULL, RATECELL_ALGORITHM_GCRA, 1, SECOND); /* no-op */
}

static void test_limiter_config_round_trips(void) {
    ratecell_config cfg, back;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_BUCKETED_WINDOW, 500, HOUR);
    cfg.sub_windows = 60;
    cfg.capacity = 100;
    cfg.overflow = RATECELL_OVERFLOW_ALLOW;
    cfg.clock = RATECELL_CLOCK_COARSE;
    ratecell_limiter *l = make_cfg(&cfg);
    CHECK(ratecell_limiter_config(l, &back) == RATECELL_OK);
    CHECK_EQ_U64(back.algorithm, RATECELL_ALGORITHM_BUCKETED_WINDOW);
    CHECK_EQ_U64(back.limit, 500);
    CHECK_EQ_U64(back.period_ns, HOUR);
    CHECK_EQ_U64(back.burst, 500);
    CHECK_EQ_U64(back.sub_windows, 60);
    CHECK_EQ_U64(back.capacity, 100);
    CHECK_EQ_U64(back.overflow, RATECELL_OVERFLOW_ALLOW);
    CHECK_EQ_U64(back.clock, RATECELL_CLOCK_COARSE);
    ratecell_limiter_free(l);
}

static void test_algorithm_names_round_trip(void) {
    for (size_t i = 0; i < N_ALGORITHMS; i++) {
        const char *name = ratecell_algorithm_name(ALGORITHMS[i]);
        CHECK(name != NULL);
        if (name == NULL) {
            continue;
        }
        ratecell_algorithm back = 0;
        CHECK(ratecell_algorithm_from_name((const uint8_t *)name, strlen(name),
                                           &back) == RATECELL_OK);
        CHECK_EQ_U64(back, ALGORITHMS[i]);
    }
    CHECK(strcmp(ratecell_algorithm_name(RATECELL_ALGORITHM_SLIDING_LOG),
                 "sliding_log") == 0);
    CHECK(ratecell_algorithm_name(0) == NULL);
    CHECK(ratecell_algorithm_name(8) == NULL);
    ratecell_algorithm a = 0;
    CHECK(ratecell_algorithm_from_name((const uint8_t *)"token-bucket", 12, &a) ==
          RATECELL_OK);
    CHECK_EQ_U64(a, RATECELL_ALGORITHM_TOKEN_BUCKET);
}

/* ---- the SPEC examples, one algorithm each --------------------------- */

/* 100/s with the seed's "burst of 5" = burst 6: six at once, then one per
 * 10 ms. */
static void test_gcra_seed_burst_then_spacing(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_GCRA, 100, SECOND, 6, 0);
    for (uint64_t i = 0; i < 6; i++) {
        ratecell_decision d = at(l, 0, 1, T0);
        CHECK(d.allowed);
        CHECK_EQ_U64(d.limit, 6);
        CHECK_EQ_U64(d.remaining, 5 - i);
        CHECK_EQ_U64(d.retry_after_ns, 0);
        CHECK_EQ_U64(d.wait_ns, 0);
    }
    ratecell_decision d = at(l, 0, 1, T0);
    CHECK(!d.allowed);
    CHECK_EQ_U64(d.remaining, 0);
    CHECK_EQ_U64(d.retry_after_ns, 10000000);
    CHECK_EQ_U64(d.reset_after_ns, 60000000);
    CHECK(!at(l, 0, 1, T0 + 10000000 - 1).allowed);
    CHECK(at(l, 0, 1, T0 + 10000000).allowed);
    /* A cost above the burst is never admitted. */
    d = at(l, 0, 7, T0 + HOUR);
    CHECK(!d.allowed);
    CHECK_EQ_U64(d.retry_after_ns, UINT64_MAX);
    ratecell_limiter_free(l);
}

/* 10/s, queue of 3: admitted requests get their turn 100 ms apart. */
static void test_leaky_bucket_queue_positions(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_LEAKY_BUCKET, 10, SECOND, 3, 0);
    for (uint64_t i = 0; i < 3; i++) {
        ratecell_decision d = at(l, 0, 1, T0);
        CHECK(d.allowed);
        CHECK_EQ_U64(d.wait_ns, i * 100000000);
    }
    ratecell_decision d = at(l, 0, 1, T0);
    CHECK(!d.allowed);
    CHECK_EQ_U64(d.wait_ns, 0);
    CHECK_EQ_U64(d.retry_after_ns, 100000000);
    ratecell_limiter_free(l);
}

/* 3 tokens, 3 more each minute: a fourth take in the same minute waits for
 * the refill, a minute after the first take. */
static void test_token_bucket_seed_three_per_minute(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_TOKEN_BUCKET, 3, MINUTE, 0, 0);
    uint64_t t0 = T0 + 2 * MINUTE;
    for (uint64_t left = 3; left-- > 0;) {
        ratecell_decision d = at(l, 0, 1, t0 + SECOND);
        CHECK(d.allowed);
        CHECK_EQ_U64(d.remaining, left);
    }
    ratecell_decision d = at(l, 0, 1, t0 + 30 * SECOND);
    CHECK(!d.allowed);
    CHECK_EQ_U64(d.retry_after_ns, 31 * SECOND);
    d = at(l, 0, 1, t0 + 61 * SECOND);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 2);
    ratecell_limiter_free(l);
}

/* 2 per minute: 00:24 and 00:36 pass, 00:49 is denied, 01:12 passes. */
static void test_fixed_window_seed_two_per_minute(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_FIXED_WINDOW, 2, MINUTE, 0, 0);
    CHECK(at(l, 0, 1, T0 + 24 * SECOND).allowed);
    CHECK(at(l, 0, 1, T0 + 36 * SECOND).allowed);
    ratecell_decision d = at(l, 0, 1, T0 + 49 * SECOND);
    CHECK(!d.allowed);
    CHECK_EQ_U64(d.retry_after_ns, 11 * SECOND);
    CHECK(at(l, 0, 1, T0 + 72 * SECOND).allowed);
    d = at(l, 0, 1, T0 + 80 * SECOND);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 0);
    d = at(l, 0, 1, T0 + 90 * SECOND);
    CHECK(!d.allowed);
    CHECK_EQ_U64(d.retry_after_ns, 30 * SECOND);
    CHECK_EQ_U64(d.reset_after_ns, 30 * SECOND);
    ratecell_limiter_free(l);
}

/* SPEC: 100/min, prev 88, cur 12, 15 s in: 88*45/60 + 12 + 1 = 79 <= 100. */
static void test_sliding_window_seed_admits_at_79(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_SLIDING_WINDOW, 100, MINUTE, 0, 0);
    CHECK(at(l, 0, 88, T0 + 30 * SECOND).allowed);      /* previous window */
    CHECK(at(l, 0, 12, T0 + MINUTE).allowed);           /* 88 + 12 = 100 */
    ratecell_decision d = at(l, 0, 1, T0 + MINUTE + 15 * SECOND);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 21); /* 100 - 66 - 13 */
    ratecell_limiter_free(l);
}

/* SPEC: 10/min, prev 9, cur 5, 25 % in: 9*0.75 + 5 + 1 = 12.75 > 10. The 5
 * are placed late in the window, then the clock is read back to 15 s in. */
static void test_sliding_window_seed_denies_at_12_75(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_SLIDING_WINDOW, 10, MINUTE, 0, 0);
    CHECK(at(l, 0, 9, T0 + 10 * SECOND).allowed);
    CHECK(at(l, 0, 5, T0 + MINUTE + 59 * SECOND).allowed); /* 0.15 + 5 */
    ratecell_decision d = at(l, 0, 1, T0 + MINUTE + 15 * SECOND);
    CHECK(!d.allowed);
    /* Admitted once 9*(60 - e)/60 <= 4: e >= 33.33.. s. */
    uint64_t e_min = MINUTE - 4 * MINUTE / 9;
    CHECK_EQ_U64(d.retry_after_ns, e_min - 15 * SECOND);
    ratecell_limiter_free(l);
}

/* SPEC: 500 per hour, one counter per minute. 100 in each of the first five
 * minutes; the 501st waits until the first minute's counter leaves. */
static void test_bucketed_window_seed_500_per_hour(void) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_BUCKETED_WINDOW, 500, HOUR);
    cfg.sub_windows = 60;
    ratecell_limiter *l = make_cfg(&cfg);
    for (uint64_t m = 0; m < 5; m++) {
        for (int i = 0; i < 100; i++) {
            CHECK(at(l, 0, 1, T0 + m * MINUTE).allowed);
        }
    }
    uint64_t now = T0 + 30 * MINUTE;
    ratecell_decision d = at(l, 0, 1, now);
    CHECK(!d.allowed);
    CHECK_EQ_U64(d.remaining, 0);
    CHECK_EQ_U64(d.retry_after_ns, T0 + HOUR - now);
    CHECK_EQ_U64(d.reset_after_ns, T0 + 4 * MINUTE + HOUR - now);
    CHECK(at(l, 0, 100, T0 + HOUR).allowed);
    ratecell_limiter_free(l);
}

/* 2 per minute, exact: 01:00 and 01:20 pass, 01:45 is denied (and not
 * recorded), 02:25 passes because 01:00 has left the window. */
static void test_sliding_log_seed_two_per_minute(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_SLIDING_LOG, 2, MINUTE, 0, 0);
    CHECK(at(l, 0, 1, T0 + MINUTE).allowed);
    CHECK(at(l, 0, 1, T0 + MINUTE + 20 * SECOND).allowed);
    ratecell_decision d = at(l, 0, 1, T0 + MINUTE + 45 * SECOND);
    CHECK(!d.allowed);
    CHECK_EQ_U64(d.retry_after_ns, 15 * SECOND);
    CHECK_EQ_U64(d.reset_after_ns, 35 * SECOND);
    d = at(l, 0, 1, T0 + 2 * MINUTE + 25 * SECOND);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 1);
    ratecell_limiter_free(l);
}

/* A peek (cost 0) stores nothing, for every algorithm. */
static void test_peeks_store_nothing(void) {
    for (size_t i = 0; i < N_ALGORITHMS; i++) {
        ratecell_limiter *l = make(ALGORITHMS[i], 2, SECOND, 0, 0);
        for (int k = 0; k < 5; k++) {
            ratecell_decision d = at(l, 0, 0, T0);
            CHECK(d.allowed);
            CHECK_EQ_U64(d.remaining, 2);
        }
        CHECK(at(l, 0, 2, T0).allowed);
        CHECK(!at(l, 0, 0, T0).allowed);
        ratecell_limiter_free(l);
    }
}

/* ---- keys, batches, reset ------------------------------------------ */

/* A batch decides exactly what the same checks one by one decide. */
static void test_batch_equals_one_by_one(void) {
    enum { N = 300 };
    uint64_t keys[N], costs[N];
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        keys[i] = (x >> 16) % 13; /* repeats, so keys run out */
        costs[i] = (x >> 8) % 3;  /* peeks included */
    }
    for (size_t a = 0; a < N_ALGORITHMS; a++) {
        for (int keyed = 0; keyed < 2; keyed++) {
            for (int with_costs = 0; with_costs < 2; with_costs++) {
                uint64_t cap = keyed ? 64 : 0;
                ratecell_limiter *batch = make(ALGORITHMS[a], 5, SECOND, 0, cap);
                ratecell_limiter *single = make(ALGORITHMS[a], 5, SECOND, 0, cap);
                uint8_t allowed[N];
                ratecell_decision decisions[N];
                for (int round = 0; round < 3; round++) {
                    uint64_t now = T0 + (uint64_t)round * 300000000;
                    const uint64_t *c = with_costs ? costs : NULL;
                    CHECK(rq_batch(batch, keys, NULL, c, N, now, allowed,
                                                  decisions) == RATECELL_OK);
                    for (int i = 0; i < N; i++) {
                        ratecell_decision d = at(single, keys[i], c ? c[i] : 1, now);
                        CHECK(allowed[i] == (d.allowed ? 1 : 0));
                        CHECK(memcmp(&decisions[i].limit, &d.limit,
                                     sizeof d - offsetof(ratecell_decision, limit)) == 0);
                        CHECK(decisions[i].allowed == d.allowed);
                    }
                }
                /* The clock-reading form, with only the allowed bytes. */
                CHECK(rq_batch(batch, keys, NULL, NULL, N, RATECELL_NOW, allowed, NULL) ==
                      RATECELL_OK);
                ratecell_limiter_free(batch);
                ratecell_limiter_free(single);
            }
        }
    }
}

static void test_empty_batch_accepts_null_buffers(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_GCRA, 5, SECOND, 0, 16);
    CHECK(rq_batch(l, NULL, NULL, NULL, 0, RATECELL_NOW, NULL, NULL) == RATECELL_OK);
    CHECK(rq_batch(l, NULL, NULL, NULL, 0, T0, NULL, NULL) == RATECELL_OK);
    struct ratecell_stats st;
    CHECK(ratecell_stats(l, &st) == RATECELL_OK);
    CHECK_EQ_U64(st.checks, 0);
    ratecell_limiter_free(l);
}

/* Keys are independent; the uint64_t key k is its 8 little-endian bytes. */
static void test_byte_keys(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_FIXED_WINDOW, 3, MINUTE, 0, 1000);
    const uint8_t le42[8] = {42, 0, 0, 0, 0, 0, 0, 0};
    ratecell_decision d;
    for (int i = 0; i < 3; i++) {
        CHECK(at(l, 42, 1, T0).allowed);
    }
    CHECK(rq_check_bytes(l, le42, 8, 1, T0, &d) == RATECELL_OK);
    CHECK(!d.allowed);
    CHECK(at(l, 43, 1, T0).allowed);
    const char *alice = "alice";
    for (int i = 0; i < 3; i++) {
        CHECK(rq_check_bytes(l, (const uint8_t *)alice, 5, 1, T0, &d) ==
              RATECELL_OK);
        CHECK(d.allowed);
        CHECK_EQ_U64(d.remaining, (uint64_t)(2 - i));
    }
    /* The same bytes from another buffer reach the same state. */
    char copy[6];
    memcpy(copy, alice, 6);
    CHECK(rq_check_bytes(l, (const uint8_t *)copy, 5, 1, T0, &d) ==
          RATECELL_OK);
    CHECK(!d.allowed);
    /* "alic" is another key; so is the empty key (non-NULL bytes of
     * length 0: NULL bytes name the number key instead). */
    CHECK(rq_check_bytes(l, (const uint8_t *)alice, 4, 1, T0, &d) ==
          RATECELL_OK);
    CHECK(d.allowed);
    CHECK(rq_check_bytes(l, "", 0, 1, T0, &d) == RATECELL_OK);
    CHECK(d.allowed);
    CHECK(rq_check_bytes(l, "", 0, 1, T0, &d) == RATECELL_OK);
    CHECK(d.allowed);
    CHECK(rq_check_bytes(l, "", 0, 1, T0, &d) == RATECELL_OK);
    CHECK(d.allowed);
    CHECK(rq_check_bytes(l, "", 0, 1, T0, &d) == RATECELL_OK);
    CHECK(!d.allowed); /* four of the empty key: not key 0's state */
    CHECK(at(l, 0, 1, T0).allowed);
    CHECK(rq_check_bytes(l, (const uint8_t *)alice, 5, 0, RATECELL_NOW, &d) == RATECELL_OK);
    /* Resetting a byte key frees it; its u64 twin shares the reset. */
    CHECK(rq_reset_bytes(l, (const uint8_t *)alice, 5) == RATECELL_OK);
    CHECK(rq_check_bytes(l, (const uint8_t *)alice, 5, 1, T0, &d) ==
          RATECELL_OK);
    CHECK(d.allowed);
    CHECK(rq_reset_bytes(l, le42, 8) == RATECELL_OK);
    CHECK(at(l, 42, 1, T0).allowed);
    ratecell_limiter_free(l);
}

static void test_reset_key_makes_the_key_fresh(void) {
    for (int keyed = 0; keyed < 2; keyed++) {
        ratecell_limiter *l = make(RATECELL_ALGORITHM_SLIDING_LOG, 2, MINUTE, 0,
                                   keyed ? 10 : 0);
        CHECK(at(l, 7, 2, T0).allowed);
        CHECK(!at(l, 7, 1, T0).allowed);
        CHECK(rq_reset(l, 7) == RATECELL_OK);
        ratecell_decision d = at(l, 7, 0, T0);
        CHECK(d.allowed);
        CHECK_EQ_U64(d.remaining, 2);
        CHECK_EQ_U64(d.reset_after_ns, 0);
        ratecell_limiter_free(l);
    }
}

/* The direct limiter (capacity 0) ignores keys: one shared state. */
static void test_capacity_zero_shares_one_state(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_TOKEN_BUCKET, 2, MINUTE, 0, 0);
    CHECK(at(l, 1, 1, T0).allowed);
    CHECK(at(l, 2, 1, T0).allowed);
    CHECK(!at(l, 3, 1, T0).allowed);
    ratecell_decision d;
    CHECK(rq_check_bytes(l, (const uint8_t *)"x", 1, 1, T0, &d) ==
          RATECELL_OK);
    CHECK(!d.allowed);
    ratecell_limiter_free(l);
}

/* ---- the yes/no check ---------------------------------------------- */

/* 3 per hour: three admitted, then denied until the window has room. The
 * direct limiter ignores the key; the keyed one keeps one state per key.
 * Both count their answers in the statistics. */
static void test_allow_three_then_denied(void) {
    for (int keyed = 0; keyed < 2; keyed++) {
        ratecell_limiter *l = make(RATECELL_ALGORITHM_FIXED_WINDOW, 3, HOUR, 0,
                                   keyed ? 16 : 0);
        CHECK(allowed_at(l, 1, T0));
        CHECK(allowed_at(l, 1, T0 + SECOND));
        CHECK(allowed_at(l, 1, T0 + MINUTE));
        CHECK(!allowed_at(l, 1, T0 + MINUTE));
        /* Key 2 is fresh only when keys are kept apart. */
        CHECK(allowed_at(l, 2, T0 + 2 * MINUTE) == (keyed != 0));
        CHECK(!allowed_at(l, 1, T0 + HOUR - 1));
        CHECK(allowed_at(l, 1, T0 + HOUR));
        struct ratecell_stats st;
        CHECK(ratecell_stats(l, &st) == RATECELL_OK);
        CHECK_EQ_U64(st.checks, 7);
        CHECK_EQ_U64(st.denied, keyed ? 2 : 3);
        ratecell_limiter_free(l);
    }
}

/* The yes/no of a cost-1 request at an explicit time is exactly what the
 * full decision of a twin limiter says, on the same sequence, for every
 * algorithm, direct and keyed (ratecell_allow itself reads the clock:
 * test_allow_reads_the_limiter_clock). */
static void test_allow_agrees_with_check(void) {
    for (size_t a = 0; a < N_ALGORITHMS; a++) {
        for (int keyed = 0; keyed < 2; keyed++) {
            uint64_t cap = keyed ? 16 : 0;
            ratecell_limiter *yes_no = make(ALGORITHMS[a], 3, MINUTE, 0, cap);
            ratecell_limiter *full = make(ALGORITHMS[a], 3, MINUTE, 0, cap);
            uint64_t now = T0, admitted = 0, disagreed = 0;
            uint32_t x = 777;
            for (int i = 0; i < 200; i++) {
                x = x * 1103515245u + 12345u;
                uint64_t key = (x >> 16) % 3;
                now += (x >> 8) % 4 * 3 * SECOND; /* about 13 per minute */
                bool got = allowed_at(yes_no, key, now);
                admitted += got;
                disagreed += got != at(full, key, 1, now).allowed;
            }
            if (disagreed != 0) {
                fprintf(stderr, "%s keyed=%d\n", ratecell_algorithm_name(ALGORITHMS[a]),
                        keyed);
            }
            CHECK_EQ_U64(disagreed, 0);
            /* Both answers were given (so the agreement means something). */
            CHECK(admitted > 0 && admitted < 200);
            ratecell_limiter_free(yes_no);
            ratecell_limiter_free(full);
        }
    }
}

/* The clock-reading form: on GCRA (no window edge to cross), three at once
 * and the fourth denied. */
/* ratecell_allow's answer, CHECKing that it is one (admitted or denied). */
static bool allow(const ratecell_limiter *l, uint64_t key) {
    ratecell_status s = ratecell_allow(l, key);
    CHECK(s == RATECELL_OK || s == RATECELL_DENIED);
    return s == RATECELL_OK;
}

static void test_allow_reads_the_limiter_clock(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_GCRA, 3, HOUR, 0, 0);
    for (int i = 0; i < 3; i++) {
        CHECK(allow(l, (uint64_t)i));
    }
    CHECK(!allow(l, 0));
    ratecell_limiter_free(l);
}

/* OK admits, DENIED does not, and an error is neither: `== RATECELL_OK`
 * admits nothing the limiter did not. */
static void test_allow_answers_with_a_status(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_GCRA, 3, HOUR, 0, 0);
    for (int i = 0; i < 3; i++) {
        CHECK(ratecell_allow(l, 9) == RATECELL_OK);
    }
    CHECK(ratecell_allow(l, 9) == RATECELL_DENIED);
    CHECK(ratecell_allow(NULL, 9) == RATECELL_NULL_ARGUMENT);
    CHECK(strcmp(ratecell_status_str(RATECELL_DENIED), "denied: the request is over the limit") == 0);
    struct ratecell_stats st;
    CHECK(ratecell_stats(l, &st) == RATECELL_OK);
    CHECK_EQ_U64(st.allowed, 3);
    CHECK_EQ_U64(st.denied, 1);
    ratecell_limiter_free(l);
}

/* ---- time, acquire, statistics ------------------------------------ */

static void test_now_is_unix_time(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_GCRA, 5, SECOND, 0, 0);
    uint64_t wall = (uint64_t)time(NULL) * SECOND;
    uint64_t now = ratecell_now_ns(l);
    CHECK(now + 5 * SECOND > wall && now < wall + 5 * SECOND);
    CHECK(ratecell_now_ns(l) >= now);
    ratecell_decision d;
    CHECK(rq_check(l, 0, 1, RATECELL_NOW, &d) == RATECELL_OK);
    CHECK(d.allowed);
    ratecell_limiter_free(l);
}

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SECOND + (uint64_t)ts.tv_nsec;
}

/* 1 per 200 ms with no burst: the second acquire times out when given 1 ms
 * and succeeds (after sleeping) when given 2 s. */
static void test_acquire_with_a_time_out(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_GCRA, 5, SECOND, 1, 16);
    ratecell_decision d;
    CHECK(rq_acquire(l, 9, 0, 1, 0, &d) == RATECELL_OK);
    CHECK(d.allowed);
    memset(&d, 0, sizeof d);
    d.allowed = true;
    CHECK(rq_acquire(l, 9, 0, 1, 1000000, &d) == RATECELL_TIMED_OUT);
    CHECK(!d.allowed);
    CHECK(d.retry_after_ns > 1000000 && d.retry_after_ns <= 200000000);
    /* RATECELL_OK: admitted before its time-out, which bounds the wait
     * (how long the call took beyond that is the scheduler's). */
    uint64_t start = monotonic_ns();
    CHECK(rq_acquire(l, 9, 0, 1, 2 * SECOND, &d) == RATECELL_OK);
    uint64_t waited = monotonic_ns() - start;
    CHECK(d.allowed);
    CHECK(waited >= 100000000); /* it really slept for its turn */
    /* Another key is not held up. */
    CHECK(rq_acquire(l, 10, 0, 1, 0, &d) == RATECELL_OK);
    /* A cost above the burst can never be admitted: no wait at all. A call
     * that waited would wait out its hour-long time-out; half of it tells
     * the two apart however busy the machine. */
    start = monotonic_ns();
    CHECK(rq_acquire(l, 11, 0, 2, 3600 * SECOND, &d) == RATECELL_COST_EXCEEDS_LIMIT);
    CHECK(monotonic_ns() - start < 1800 * SECOND);
    CHECK(!d.allowed);
    CHECK_EQ_U64(d.retry_after_ns, UINT64_MAX);
    /* Byte keys: the u64 key 9 is its LE bytes, whose turn is taken. */
    const uint8_t le9[8] = {9, 0, 0, 0, 0, 0, 0, 0};
    CHECK(rq_acquire_bytes(l, le9, 8, 0, 1, 0, &d) == RATECELL_TIMED_OUT);
    ratecell_limiter_free(l);
}

/* The leaky bucket's acquire waits out the queue position too. */
static void test_acquire_leaky_bucket_waits_its_turn(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_LEAKY_BUCKET, 20, SECOND, 2, 0);
    ratecell_decision d;
    CHECK(rq_acquire(l, 0, 0, 1, 0, &d) == RATECELL_OK);
    CHECK_EQ_U64(d.wait_ns, 0);
    uint64_t start = monotonic_ns();
    CHECK(rq_acquire(l, 0, 0, 1, SECOND, &d) == RATECELL_OK);
    CHECK(d.allowed);
    CHECK(d.wait_ns > 0);
    CHECK(monotonic_ns() - start >= d.wait_ns);
    ratecell_limiter_free(l);
}

static void test_statistics(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_FIXED_WINDOW, 2, MINUTE, 0, 100);
    for (uint64_t key = 0; key < 3; key++) {
        for (int i = 0; i < 3; i++) {
            at(l, key, 1, T0); /* 2 admitted and 1 denied per key */
        }
    }
    struct ratecell_stats st;
    memset(&st, 0xFF, sizeof st);
    CHECK(ratecell_stats(l, &st) == RATECELL_OK);
    CHECK_EQ_U64(st.checks, 9);
    CHECK_EQ_U64(st.allowed, 6);
    CHECK_EQ_U64(st.denied, 3);
    CHECK_EQ_U64(st.keys_tracked, 3);
    CHECK_EQ_U64(st.capacity, 100);
    CHECK_EQ_U64(st.overflows, 0);
    CHECK(st.bytes_allocated > 0);
    ratecell_limiter_free(l);

    l = make(RATECELL_ALGORITHM_GCRA, 2, SECOND, 0, 0);
    at(l, 0, 1, T0);
    at(l, 0, 5, T0);
    CHECK(ratecell_stats(l, &st) == RATECELL_OK);
    CHECK_EQ_U64(st.checks, 2);
    CHECK_EQ_U64(st.allowed, 1);
    CHECK_EQ_U64(st.denied, 1);
    CHECK_EQ_U64(st.keys_tracked, 0);
    CHECK_EQ_U64(st.capacity, 0);
    CHECK(st.bytes_allocated > 0);
    ratecell_limiter_free(l);
}

/* A full table denies a new key (overflow deny) and counts the event; with
 * overflow allow it admits it. */
static void test_overflow_policy(void) {
    for (uint32_t policy = 0; policy < 2; policy++) {
        ratecell_config cfg;
        ratecell_config_init(&cfg, RATECELL_ALGORITHM_FIXED_WINDOW, 5, MINUTE);
        cfg.capacity = 1;
        cfg.overflow = policy;
        ratecell_limiter *l = make_cfg(&cfg);
        uint64_t denied_new = 0;
        for (uint64_t key = 0; key < 200; key++) {
            if (!at(l, key, 1, T0).allowed) {
                denied_new++;
            }
        }
        struct ratecell_stats st;
        CHECK(ratecell_stats(l, &st) == RATECELL_OK);
        CHECK(st.overflows > 0);
        CHECK(st.keys_tracked < 200);
        if (policy == RATECELL_OVERFLOW_DENY) {
            CHECK_EQ_U64(denied_new, st.overflows);
        } else {
            CHECK_EQ_U64(denied_new, 0);
        }
        ratecell_limiter_free(l);
    }
}

/* ---- errors -------------------------------------------------------- */

static ratecell_status new_status(const ratecell_config *cfg) {
    ratecell_limiter *sentinel = (ratecell_limiter *)&sentinel;
    ratecell_limiter *l = sentinel;
    ratecell_status s = ratecell_limiter_new(cfg, &l);
    if (s == RATECELL_OK) {
        ratecell_limiter_free(l);
    } else {
        CHECK(l == sentinel); /* out-parameter untouched on failure */
    }
    return s;
}

static void test_each_invalid_field_has_its_status(void) {
    ratecell_config c;
#define EXPECT_FIELD(alg, field, value, status)                            \
    do {                                                                   \
        ratecell_config_init(&c, alg, 10, SECOND);                         \
        c.field = value;                                                   \
        CHECK(new_status(&c) == status);                                   \
    } while (0)
    EXPECT_FIELD(RATECELL_ALGORITHM_GCRA, algorithm, 0, RATECELL_INVALID_ALGORITHM);
    EXPECT_FIELD(RATECELL_ALGORITHM_GCRA, algorithm, 8, RATECELL_INVALID_ALGORITHM);
    EXPECT_FIELD(RATECELL_ALGORITHM_GCRA, algorithm, 0xFFFFFFFFu,
                 RATECELL_INVALID_ALGORITHM);
    EXPECT_FIELD(RATECELL_ALGORITHM_GCRA, limit, 0, RATECELL_INVALID_LIMIT);
    EXPECT_FIELD(RATECELL_ALGORITHM_TOKEN_BUCKET, limit, UINT64_C(1) << 32,
                 RATECELL_INVALID_LIMIT);
    EXPECT_FIELD(RATECELL_ALGORITHM_GCRA, limit, SECOND + 1, RATECELL_INVALID_LIMIT);
    EXPECT_FIELD(RATECELL_ALGORITHM_GCRA, period_ns, 999, RATECELL_INVALID_PERIOD_NS);
    EXPECT_FIELD(RATECELL_ALGORITHM_SLIDING_LOG, period_ns, 367 * 24 * HOUR,
                 RATECELL_INVALID_PERIOD_NS);
    EXPECT_FIELD(RATECELL_ALGORITHM_TOKEN_BUCKET, burst, UINT64_C(1) << 32,
                 RATECELL_INVALID_BURST);
    EXPECT_FIELD(RATECELL_ALGORITHM_FIXED_WINDOW, burst, 11, RATECELL_INVALID_BURST);
    EXPECT_FIELD(RATECELL_ALGORITHM_BUCKETED_WINDOW, sub_windows, 0,
                 RATECELL_INVALID_SUB_WINDOWS);
    EXPECT_FIELD(RATECELL_ALGORITHM_BUCKETED_WINDOW, sub_windows, 65,
                 RATECELL_INVALID_SUB_WINDOWS);
    EXPECT_FIELD(RATECELL_ALGORITHM_BUCKETED_WINDOW, sub_windows, 7,
                 RATECELL_INVALID_SUB_WINDOWS);
    EXPECT_FIELD(RATECELL_ALGORITHM_GCRA, overflow, 3, RATECELL_INVALID_OVERFLOW);
    EXPECT_FIELD(RATECELL_ALGORITHM_GCRA, clock, 2, RATECELL_INVALID_CLOCK);
#undef EXPECT_FIELD
    /* More keys than memory can address. */
    ratecell_config_init(&c, RATECELL_ALGORITHM_GCRA, 10, SECOND);
    c.capacity = UINT64_MAX;
    ratecell_status s = new_status(&c);
    CHECK(s == RATECELL_INVALID_CAPACITY || s == RATECELL_OUT_OF_MEMORY);
    /* sub_windows is ignored by the other algorithms. */
    ratecell_config_init(&c, RATECELL_ALGORITHM_GCRA, 10, SECOND);
    c.sub_windows = 0;
    CHECK(new_status(&c) == RATECELL_OK);
}

static void test_unknown_algorithm_name(void) {
    ratecell_algorithm a = RATECELL_ALGORITHM_GCRA;
    CHECK(ratecell_algorithm_from_name((const uint8_t *)"token_buckets", 13, &a) ==
          RATECELL_UNKNOWN_ALGORITHM);
    CHECK(ratecell_algorithm_from_name((const uint8_t *)"", 0, &a) ==
          RATECELL_UNKNOWN_ALGORITHM);
    CHECK(ratecell_algorithm_from_name((const uint8_t *)"\xff\xfe", 2, &a) ==
          RATECELL_UNKNOWN_ALGORITHM);
    CHECK_EQ_U64(a, RATECELL_ALGORITHM_GCRA); /* untouched */
}

static void test_null_arguments(void) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_GCRA, 10, SECOND);
    cfg.capacity = 8;
    ratecell_limiter *l = make_cfg(&cfg);
    ratecell_limiter *out = NULL;
    ratecell_decision d;
    struct ratecell_stats st;
    uint64_t keys[2] = {1, 2};
    uint8_t allowed[2];
    const ratecell_status NUL = RATECELL_NULL_ARGUMENT;

    CHECK(ratecell_limiter_new(NULL, &out) == NUL);
    CHECK(ratecell_limiter_new(&cfg, NULL) == NUL);
    CHECK(out == NULL);
    CHECK(ratecell_limiter_config(NULL, &cfg) == NUL);
    CHECK(ratecell_limiter_config(l, NULL) == NUL);
    CHECK(rq_check(NULL, 1, 1, RATECELL_NOW, &d) == NUL);
    CHECK(rq_check(l, 1, 1, RATECELL_NOW, NULL) == NUL);
    CHECK(rq_check(NULL, 1, 1, T0, &d) == NUL);
    CHECK(rq_check(l, 1, 1, T0, NULL) == NUL);
    CHECK(ratecell_allow(NULL, 1) == NUL);
    ratecell_multi_decision m;
    struct ratecell_request req;
    ratecell_request_init(&req);
    CHECK(ratecell_check(l, NULL, &d) == NUL);
    CHECK(ratecell_check_each(l, NULL, &m) == NUL);
    CHECK(ratecell_check_each(NULL, &req, &m) == NUL);
    CHECK(ratecell_check_each(l, &req, NULL) == NUL);
    CHECK(ratecell_check_batch(l, NULL, allowed, NULL) == NUL);
    CHECK(ratecell_acquire(l, NULL, 0, &d) == NUL);
    CHECK(ratecell_reset(l, NULL) == NUL);
    CHECK(ratecell_reset(NULL, &req) == NUL);
    struct ratecell_options opt;
    ratecell_options_init(&opt);
    CHECK(ratecell_limiter_build(&opt, &out) == NUL); /* configs NULL */
    opt.configs = &cfg;
    CHECK(ratecell_limiter_build(NULL, &out) == NUL);
    CHECK(ratecell_limiter_build(&opt, NULL) == NUL);
    CHECK(out == NULL);
    ratecell_request_init(NULL); /* no-ops */
    ratecell_batch_init(NULL);
    ratecell_options_init(NULL);
    CHECK(rq_check_bytes(NULL, (const uint8_t *)"k", 1, 1, RATECELL_NOW, &d) == NUL);
    CHECK(rq_check_bytes(l, NULL, 1, 1, RATECELL_NOW, &d) == NUL);
    CHECK(rq_check_bytes(l, (const uint8_t *)"k", 1, 1, RATECELL_NOW, NULL) == NUL);
    CHECK(rq_check_bytes(NULL, (const uint8_t *)"k", 1, 1, T0, &d) == NUL);
    CHECK(rq_check_bytes(l, NULL, 5, 1, T0, &d) == NUL);
    CHECK(rq_check_bytes(l, (const uint8_t *)"k", 1, 1, T0, NULL) == NUL);
    CHECK(rq_batch(NULL, keys, NULL, NULL, 2, RATECELL_NOW, allowed, NULL) == NUL);
    CHECK(rq_batch(l, NULL, NULL, NULL, 2, RATECELL_NOW, allowed, NULL) == NUL);
    CHECK(rq_batch(l, keys, NULL, NULL, 2, RATECELL_NOW, NULL, &d) == NUL);
    CHECK(rq_batch(NULL, keys, NULL, NULL, 2, T0, allowed, NULL) == NUL);
    CHECK(rq_batch(l, NULL, NULL, NULL, 2, T0, allowed, NULL) == NUL);
    CHECK(rq_batch(l, keys, NULL, NULL, 2, T0, NULL, NULL) == NUL);
    CHECK(rq_acquire(NULL, 1, 0, 1, 0, &d) == NUL);
    CHECK(rq_acquire(l, 1, 0, 1, 0, NULL) == NUL);
    CHECK(rq_acquire_bytes(NULL, (const uint8_t *)"k", 1, 0, 1, 0, &d) == NUL);
    CHECK(rq_acquire_bytes(l, NULL, 1, 0, 1, 0, &d) == NUL);
    CHECK(rq_acquire_bytes(l, (const uint8_t *)"k", 1, 0, 1, 0, NULL) == NUL);
    CHECK(rq_reset(NULL, 1) == NUL);
    CHECK(rq_reset_bytes(NULL, (const uint8_t *)"k", 1) == NUL);
    CHECK(rq_reset_bytes(l, NULL, 1) == NUL);
    CHECK(ratecell_stats(NULL, &st) == NUL);
    CHECK(ratecell_stats(l, NULL) == NUL);
    CHECK(ratecell_algorithm_from_name(NULL, 4, &cfg.algorithm) == NUL);
    CHECK(ratecell_algorithm_from_name((const uint8_t *)"gcra", 4, NULL) == NUL);
    CHECK_EQ_U64(ratecell_now_ns(NULL), 0);
    ratecell_limiter_free(NULL); /* a no-op */

    /* None of those calls counted a check. */
    CHECK(ratecell_stats(l, &st) == RATECELL_OK);
    CHECK_EQ_U64(st.checks, 0);
    ratecell_limiter_free(l);
}

/* The one request shape: its defaults, and every struct's size checked
 * before anything else is read. */
static void test_request_batch_and_options_shapes(void) {
    struct ratecell_request r;
    memset(&r, 0xAB, sizeof r);
    ratecell_request_init(&r);
    CHECK_EQ_U64(r.size, sizeof r);
    CHECK_EQ_U64(r.tier, 0);
    CHECK_EQ_U64(r.key_id, 0);
    CHECK(r.key_bytes == NULL);
    CHECK_EQ_U64(r.key_len, 0);
    CHECK_EQ_U64(r.cost, 1);
    CHECK_EQ_U64(r.at_ns, RATECELL_NOW);
    struct ratecell_batch b;
    memset(&b, 0xAB, sizeof b);
    ratecell_batch_init(&b);
    CHECK_EQ_U64(b.size, sizeof b);
    CHECK_EQ_U64(b.n, 0);
    CHECK(b.keys == NULL && b.costs == NULL && b.tiers == NULL);
    CHECK_EQ_U64(b.at_ns, RATECELL_NOW);
    struct ratecell_options o;
    memset(&o, 0xAB, sizeof o);
    ratecell_options_init(&o);
    CHECK_EQ_U64(o.size, sizeof o);
    CHECK_EQ_U64(o.n_limits, 1);
    CHECK_EQ_U64(o.n_tiers, 0);
    CHECK(o.configs == NULL && o.path == NULL && o.shared_path == NULL);
    CHECK_EQ_U64(o.states, RATECELL_STATES_FRESH);
    CHECK_EQ_U64(o.save_every_ns, 0);
    CHECK_EQ_U64(o.shared_mode, 0);

    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_FIXED_WINDOW, 2, MINUTE);
    cfg.capacity = 8;
    o.configs = &cfg;
    ratecell_limiter *l = NULL;
    o.size = 0;
    CHECK(ratecell_limiter_build(&o, &l) == RATECELL_INVALID_LENGTH);
    o.size = (uint32_t)sizeof o + 8;
    CHECK(ratecell_limiter_build(&o, &l) == RATECELL_INVALID_LENGTH);
    CHECK(l == NULL);
    o.size = (uint32_t)sizeof o;
    CHECK(ratecell_limiter_build(&o, &l) == RATECELL_OK);
    CHECK_EQ_U64(ratecell_limiter_tiers(l), 1);

    /* The defaults: key 0, cost 1, now. */
    ratecell_decision d;
    memset(&d, 0xAB, sizeof d);
    CHECK(ratecell_check(l, &r, &d) == RATECELL_OK);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 1);
    r.at_ns = T0;
    r.key_id = 7;
    r.cost = 2;
    CHECK(ratecell_check(l, &r, &d) == RATECELL_OK);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 0);
    r.key_id = 0;

    /* A size this library does not know: nothing checked, out untouched. */
    ratecell_decision untouched;
    memset(&d, 0xAB, sizeof d);
    memset(&untouched, 0xAB, sizeof untouched);
    ratecell_multi_decision m;
    uint8_t allowed = 0xAA;
    r.size = (uint32_t)sizeof r - 8;
    CHECK(ratecell_check(l, &r, &d) == RATECELL_INVALID_LENGTH);
    /* Its description names the size field first, the likeliest cause. */
    CHECK(strstr(ratecell_status_str(RATECELL_INVALID_LENGTH), "size field") != NULL);
    CHECK(ratecell_check_each(l, &r, &m) == RATECELL_INVALID_LENGTH);
    CHECK(ratecell_acquire(l, &r, 0, &d) == RATECELL_INVALID_LENGTH);
    CHECK(ratecell_reset(l, &r) == RATECELL_INVALID_LENGTH);
    r.size = 0;
    CHECK(ratecell_check(l, &r, &d) == RATECELL_INVALID_LENGTH);
    CHECK(memcmp(&d, &untouched, sizeof d) == 0);
    r.size = (uint32_t)sizeof r;
    uint64_t key = 5;
    b.n = 1;
    b.keys = &key;
    b.size = (uint32_t)sizeof b + 8;
    CHECK(ratecell_check_batch(l, &b, &allowed, NULL) == RATECELL_INVALID_LENGTH);
    CHECK(allowed == 0xAA);
    b.size = (uint32_t)sizeof b;
    b.at_ns = T0;
    CHECK(ratecell_check_batch(l, &b, &allowed, &d) == RATECELL_OK);
    CHECK(allowed == 1 && d.allowed);

    /* Byte keys: NULL bytes with a length are refused; the number key k
     * is its 8 little-endian bytes. */
    r.key_len = 3;
    CHECK(ratecell_check(l, &r, &d) == RATECELL_NULL_ARGUMENT);
    const uint8_t le5[8] = {5, 0, 0, 0, 0, 0, 0, 0};
    r.key_bytes = le5;
    r.key_len = 8;
    r.cost = 1;
    CHECK(ratecell_check(l, &r, &d) == RATECELL_OK);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 0); /* the batch took key 5's first unit */
    CHECK(ratecell_reset(l, &r) == RATECELL_OK);
    r.key_bytes = NULL;
    r.key_len = 0;
    r.key_id = 5;
    r.cost = 0;
    CHECK(ratecell_check(l, &r, &d) == RATECELL_OK);
    CHECK_EQ_U64(d.remaining, 2);

    /* A tier this limiter does not have. */
    r.tier = 1;
    CHECK(ratecell_check(l, &r, &d) == RATECELL_INVALID_TIER);
    CHECK(ratecell_check_each(l, &r, &m) == RATECELL_INVALID_TIER);
    CHECK(ratecell_acquire(l, &r, 0, &d) == RATECELL_INVALID_TIER);
    ratecell_limiter_free(l);
}

static void test_impossible_lengths(void) {
    ratecell_limiter *l = make(RATECELL_ALGORITHM_GCRA, 10, SECOND, 0, 8);
    ratecell_decision d;
    uint64_t key = 1;
    uint8_t allowed = 0xAA;
    /* Refused before any byte is read. */
    CHECK(rq_check_bytes(l, (const uint8_t *)"k", SIZE_MAX, 1, RATECELL_NOW, &d) ==
          RATECELL_INVALID_LENGTH);
    CHECK(rq_reset_bytes(l, (const uint8_t *)"k", SIZE_MAX) ==
          RATECELL_INVALID_LENGTH);
    CHECK(rq_batch(l, &key, NULL, NULL, SIZE_MAX, RATECELL_NOW, &allowed, NULL) ==
          RATECELL_INVALID_LENGTH);
    CHECK(rq_batch(l, &key, NULL, NULL, SIZE_MAX / 8, T0, &allowed, NULL) ==
          RATECELL_INVALID_LENGTH);
    CHECK(allowed == 0xAA);
    ratecell_limiter_free(l);
}

/* The last status of the header: a new one goes here, or this test fails
 * on its description as "unknown status". */
#define LAST_STATUS RATECELL_DENIED

static void test_every_status_has_a_distinct_description(void) {
    const char *seen[LAST_STATUS + 1];
    for (uint32_t s = RATECELL_OK; s <= LAST_STATUS; s++) {
        seen[s] = ratecell_status_str(s);
        CHECK(seen[s] != NULL && strlen(seen[s]) > 0);
        for (uint32_t t = 0; t < s; t++) {
            CHECK(strcmp(seen[s], seen[t]) != 0);
        }
    }
    CHECK(strcmp(ratecell_status_str(RATECELL_OK), "ok") == 0);
    CHECK(strcmp(ratecell_status_str(LAST_STATUS + 1), "unknown status") == 0);
    CHECK(strcmp(ratecell_status_str(0xFFFFFFFFu), "unknown status") == 0);
}

/* ---- threads ------------------------------------------------------- */

enum { THREADS = 4, LIMIT = 1000, ATTEMPTS = 600 };

struct race {
    const ratecell_limiter *limiter;
    pthread_barrier_t *start;
    uint64_t admitted;
};

static void *race_thread(void *arg) {
    struct race *r = arg;
    pthread_barrier_wait(r->start);
    for (int i = 0; i < ATTEMPTS; i++) {
        ratecell_decision d;
        if (rq_check(r->limiter, 77, 1, T0, &d) == RATECELL_OK && d.allowed) {
            r->admitted++;
        }
    }
    return NULL;
}

/* Four threads at one instant, 2400 attempts on one key: exactly the limit
 * is admitted, for every algorithm, shared and keyed. */
static void test_four_threads_admit_exactly_the_limit(void) {
    for (size_t a = 0; a < N_ALGORITHMS; a++) {
        for (int keyed = 0; keyed < 2; keyed++) {
            ratecell_limiter *l = make(ALGORITHMS[a], LIMIT, SECOND, 0,
                                       keyed ? 1024 : 0);
            pthread_barrier_t start;
            pthread_barrier_init(&start, NULL, THREADS);
            pthread_t threads[THREADS];
            struct race races[THREADS];
            for (int t = 0; t < THREADS; t++) {
                races[t] = (struct race){l, &start, 0};
                CHECK(pthread_create(&threads[t], NULL, race_thread, &races[t]) == 0);
            }
            uint64_t total = 0;
            for (int t = 0; t < THREADS; t++) {
                pthread_join(threads[t], NULL);
                total += races[t].admitted;
            }
            pthread_barrier_destroy(&start);
            if (total != LIMIT) {
                fprintf(stderr, "%s keyed=%d\n", ratecell_algorithm_name(ALGORITHMS[a]),
                        keyed);
            }
            CHECK_EQ_U64(total, LIMIT);
            struct ratecell_stats st;
            CHECK(ratecell_stats(l, &st) == RATECELL_OK);
            CHECK_EQ_U64(st.allowed, LIMIT);
            CHECK_EQ_U64(st.checks, THREADS * ATTEMPTS);
            ratecell_limiter_free(l);
        }
    }
}

int main(void) {
    RUN(test_version_matches_the_header_macros);
    RUN(test_config_init_fills_spec_defaults);
    RUN(test_limiter_config_round_trips);
    RUN(test_algorithm_names_round_trip);
    RUN(test_gcra_seed_burst_then_spacing);
    RUN(test_leaky_bucket_queue_positions);
    RUN(test_token_bucket_seed_three_per_minute);
    RUN(test_fixed_window_seed_two_per_minute);
    RUN(test_sliding_window_seed_admits_at_79);
    RUN(test_sliding_window_seed_denies_at_12_75);
    RUN(test_bucketed_window_seed_500_per_hour);
    RUN(test_sliding_log_seed_two_per_minute);
    RUN(test_peeks_store_nothing);
    RUN(test_batch_equals_one_by_one);
    RUN(test_empty_batch_accepts_null_buffers);
    RUN(test_byte_keys);
    RUN(test_reset_key_makes_the_key_fresh);
    RUN(test_capacity_zero_shares_one_state);
    RUN(test_allow_three_then_denied);
    RUN(test_allow_agrees_with_check);
    RUN(test_allow_reads_the_limiter_clock);
    RUN(test_allow_answers_with_a_status);
    RUN(test_now_is_unix_time);
    RUN(test_acquire_with_a_time_out);
    RUN(test_acquire_leaky_bucket_waits_its_turn);
    RUN(test_statistics);
    RUN(test_overflow_policy);
    RUN(test_each_invalid_field_has_its_status);
    RUN(test_unknown_algorithm_name);
    RUN(test_null_arguments);
    RUN(test_request_batch_and_options_shapes);
    RUN(test_impossible_lengths);
    RUN(test_every_status_has_a_distinct_description);
    RUN(test_four_threads_admit_exactly_the_limit);
    return harness_finish();
}
