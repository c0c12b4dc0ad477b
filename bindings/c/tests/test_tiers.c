/*
 * C11 tests of a quota per tier through the C ABI
 * (ratecell_limiter_build with n_tiers, ratecell_request.tier): each key held to
 * the tier its check names, a key moving tiers keeping what it spent,
 * tier 0 for the calls that name none, batches and acquires naming tiers,
 * snapshots that keep the tiers, periodic saving of a tiered limiter
 * (RATECELL_STATES_PERSISTED with n_tiers), and the statuses of bad input.
 *
 * Built and run by scripts/c-tests.sh, once normally and once under
 * -fsanitize=address,undefined. Prints "N passed, M failed" last.
 */
#define _POSIX_C_SOURCE 200809L

#include "ratecell.h"
#include "requests.h"

#include "harness.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SECOND UINT64_C(1000000000)
#define T0 (UINT64_C(480000) * 3600 * SECOND)

/* Free 3 per minute, paid 1000 per minute, internal 100000 (fixed window). */
static void three_tiers(ratecell_config cfgs[3]) {
    const uint64_t limits[3] = {3, 1000, 100000};
    for (int i = 0; i < 3; i++) {
        ratecell_config_init(&cfgs[i], RATECELL_ALGORITHM_FIXED_WINDOW,
                             limits[i], 60 * SECOND);
        cfgs[i].capacity = 1000;
    }
}

static uint64_t admitted(ratecell_limiter *l, uint64_t key, uint32_t tier,
                         int tries) {
    uint64_t n = 0;
    for (int i = 0; i < tries; i++) {
        ratecell_decision d;
        CHECK(rq_check_tier(l, key, tier, 1, T0, &d) == RATECELL_OK);
        n += d.allowed ? 1 : 0;
    }
    return n;
}

static void test_each_key_gets_its_tiers_quota(void) {
    ratecell_config cfgs[3];
    three_tiers(cfgs);
    ratecell_limiter *l = NULL;
    CHECK(rq_build(cfgs, 1, 3, &l) == RATECELL_OK);
    if (l == NULL) {
        return;
    }
    CHECK_EQ_U64(ratecell_limiter_tiers(l), 3);
    CHECK_EQ_U64(admitted(l, 1, 0, 10), 3);
    CHECK_EQ_U64(admitted(l, 2, 1, 1500), 1000);
    CHECK_EQ_U64(admitted(l, 3, 2, 1500), 1500);

    ratecell_decision d;
    CHECK(rq_check_tier(l, 3, 2, 0, T0, &d) == RATECELL_OK);
    CHECK_EQ_U64(d.limit, 100000);
    CHECK_EQ_U64(d.remaining, 100000 - 1500);

    /* Byte keys, and the limiter's own clock. */
    CHECK(rq_check_bytes_tier(l, (const uint8_t *)"alice", 5, 1, 7,
                                       T0, &d) == RATECELL_OK);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 993);
    CHECK(rq_check_bytes_tier(l, (const uint8_t *)"bob", 3, 0, 1, RATECELL_NOW, &d) ==
          RATECELL_OK);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 2);
    CHECK(rq_check_tier(l, 4, 1, 1, RATECELL_NOW, &d) == RATECELL_OK);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 999);

    /* The calls that name no tier are tier 0's. */
    CHECK(rq_check(l, 5, 1, T0, &d) == RATECELL_OK);
    CHECK_EQ_U64(d.limit, 3);
    CHECK_EQ_U64(d.remaining, 2);
    ratecell_limiter_free(l);
}

static void test_a_key_moving_tiers_keeps_what_it_spent(void) {
    ratecell_config cfgs[3];
    three_tiers(cfgs);
    ratecell_limiter *l = NULL;
    CHECK(rq_build(cfgs, 1, 3, &l) == RATECELL_OK);
    if (l == NULL) {
        return;
    }
    /* 10 spent as paid: nothing left as free, 990 back on paid. */
    CHECK_EQ_U64(admitted(l, 9, 1, 10), 10);
    CHECK_EQ_U64(admitted(l, 9, 0, 5), 0);
    ratecell_decision d;
    CHECK(rq_check_tier(l, 9, 1, 0, T0, &d) == RATECELL_OK);
    CHECK_EQ_U64(d.remaining, 990);
    /* The next window starts from nothing under any tier. */
    CHECK(rq_check_tier(l, 9, 0, 1, T0 + 60 * SECOND, &d) ==
          RATECELL_OK);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 2);
    ratecell_limiter_free(l);
}

static void test_tiers_of_several_limits(void) {
    /* Per tier: a GCRA rate and a fixed-window daily cap. */
    ratecell_config cfgs[4];
    ratecell_config_init(&cfgs[0], RATECELL_ALGORITHM_GCRA, 2, SECOND);
    ratecell_config_init(&cfgs[1], RATECELL_ALGORITHM_FIXED_WINDOW, 5,
                         86400 * SECOND);
    ratecell_config_init(&cfgs[2], RATECELL_ALGORITHM_GCRA, 50, SECOND);
    ratecell_config_init(&cfgs[3], RATECELL_ALGORITHM_FIXED_WINDOW, 30,
                         86400 * SECOND);
    for (int i = 0; i < 4; i++) {
        cfgs[i].capacity = 100;
    }
    ratecell_limiter *l = NULL;
    CHECK(rq_build(cfgs, 2, 2, &l) == RATECELL_OK);
    if (l == NULL) {
        return;
    }
    CHECK_EQ_U64(admitted(l, 1, 0, 10), 2);
    CHECK_EQ_U64(admitted(l, 2, 1, 100), 30);
    ratecell_multi_decision m;
    CHECK(rq_each_tier(l, 2, 1, 1, T0, &m) == RATECELL_OK);
    CHECK(!m.decision.allowed);
    CHECK_EQ_U64(m.count, 2);
    CHECK_EQ_U64(m.denied_by, 1);
    CHECK_EQ_U64(m.limits[1].limit, 30);
    CHECK(m.limits[0].allowed);
    ratecell_limiter_free(l);
}

static void test_bad_input_gets_named_statuses(void) {
    ratecell_config cfgs[3];
    three_tiers(cfgs);
    ratecell_limiter *l = (ratecell_limiter *)&cfgs; /* must stay untouched */
    ratecell_limiter *const sentinel = l;
    CHECK(rq_build(cfgs, 1, RATECELL_MAX_TIERS + 1, &l) ==
          RATECELL_INVALID_LENGTH);
    CHECK(rq_build(NULL, 1, 3, &l) == RATECELL_NULL_ARGUMENT);
    CHECK(rq_build(cfgs, 1, 3, NULL) == RATECELL_NULL_ARGUMENT);
    CHECK(rq_build(cfgs, 0, 3, &l) == RATECELL_INVALID_LENGTH);
    CHECK(rq_build(cfgs, RATECELL_MAX_LIMITS + 1, 1, &l) == RATECELL_INVALID_LENGTH);
    /* Tiers of a shared region are refused. */
    struct ratecell_options o;
    ratecell_options_init(&o);
    o.configs = cfgs;
    o.n_tiers = 3;
    o.states = RATECELL_STATES_SHARED;
    o.shared_path = "/nonexistent-ratecell-dir/tiers";
    CHECK(ratecell_limiter_build(&o, &l) != RATECELL_OK);

    ratecell_config bad[3];
    memcpy(bad, cfgs, sizeof bad);
    bad[2].capacity = 999;
    CHECK(rq_build(bad, 1, 3, &l) == RATECELL_INVALID_CAPACITY);
    memcpy(bad, cfgs, sizeof bad);
    bad[1].algorithm = RATECELL_ALGORITHM_GCRA;
    CHECK(rq_build(bad, 1, 3, &l) == RATECELL_INVALID_ALGORITHM);
    memcpy(bad, cfgs, sizeof bad);
    bad[1].period_ns = 30 * SECOND; /* a window's period cannot differ */
    CHECK(rq_build(bad, 1, 3, &l) == RATECELL_INVALID_PERIOD_NS);
    memcpy(bad, cfgs, sizeof bad);
    bad[1].overflow = RATECELL_OVERFLOW_ALLOW;
    CHECK(rq_build(bad, 1, 3, &l) == RATECELL_INVALID_OVERFLOW);
    memcpy(bad, cfgs, sizeof bad);
    bad[2].clock = RATECELL_CLOCK_COARSE;
    CHECK(rq_build(bad, 1, 3, &l) == RATECELL_INVALID_CLOCK);
    memcpy(bad, cfgs, sizeof bad);
    bad[0].capacity = bad[1].capacity = bad[2].capacity = 0;
    CHECK(rq_build(bad, 1, 3, &l) == RATECELL_INVALID_CAPACITY);
    CHECK(l == sentinel);

    l = NULL;
    CHECK(rq_build(cfgs, 1, 3, &l) == RATECELL_OK);
    if (l == NULL) {
        return;
    }
    ratecell_decision d;
    memset(&d, 0xAB, sizeof d);
    ratecell_decision before = d;
    CHECK(rq_check_tier(l, 1, 3, 1, T0, &d) == RATECELL_INVALID_TIER);
    CHECK(rq_check_tier(l, 1, UINT32_MAX, 1, RATECELL_NOW, &d) == RATECELL_INVALID_TIER);
    CHECK(rq_check_bytes_tier(l, (const uint8_t *)"k", 1, 3, 1, T0,
                                       &d) == RATECELL_INVALID_TIER);
    CHECK(memcmp(&d, &before, sizeof d) == 0);
    CHECK(rq_check_tier(l, 1, 0, 1, T0, NULL) == RATECELL_NULL_ARGUMENT);
    CHECK(rq_check_tier(NULL, 1, 0, 1, T0, &d) == RATECELL_NULL_ARGUMENT);
    CHECK(rq_check_bytes_tier(l, NULL, 1, 0, 1, T0, &d) ==
          RATECELL_NULL_ARGUMENT);
    /* Nothing was spent by the refused checks. */
    CHECK(rq_check_tier(l, 1, 0, 0, T0, &d) == RATECELL_OK);
    CHECK_EQ_U64(d.remaining, 3);
    CHECK(strstr(ratecell_status_str(RATECELL_INVALID_TIER), "tier") != NULL);
    /* No live change of tiers: refused by status. */
    CHECK(ratecell_limiter_reconfigure(l, cfgs, 1) ==
          RATECELL_RECONFIGURE_REFUSED);
    ratecell_limiter_free(l);

    /* A limiter made without tiers has tier 0 only; NULL has none. */
    CHECK_EQ_U64(ratecell_limiter_tiers(NULL), 0);
    ratecell_limiter *plain = NULL;
    CHECK(ratecell_limiter_new(&cfgs[0], &plain) == RATECELL_OK);
    if (plain == NULL) {
        return;
    }
    CHECK_EQ_U64(ratecell_limiter_tiers(plain), 1);
    CHECK(rq_check_tier(plain, 1, 0, 1, T0, &d) == RATECELL_OK);
    CHECK(d.allowed);
    CHECK(rq_check_tier(plain, 1, 1, 1, T0, &d) ==
          RATECELL_INVALID_TIER);
    ratecell_limiter_free(plain);
}

static void test_batch_and_acquire_name_the_tier(void) {
    ratecell_config cfgs[3];
    three_tiers(cfgs);
    ratecell_limiter *l = NULL;
    CHECK(rq_build(cfgs, 1, 3, &l) == RATECELL_OK);
    if (l == NULL) {
        return;
    }
    /* Key 1 free (3 a minute), key 2 paid: a tier per request. */
    const uint64_t keys[6] = {1, 1, 1, 1, 2, 2};
    const uint32_t tiers[6] = {0, 0, 0, 0, 1, 1};
    const uint64_t costs[6] = {1, 1, 1, 1, 1, 500};
    uint8_t allowed[6];
    ratecell_decision ds[6];
    CHECK(rq_batch(l, keys, tiers, costs, 6, T0, allowed,
                                       ds) == RATECELL_OK);
    const uint8_t want[6] = {1, 1, 1, 0, 1, 1};
    CHECK(memcmp(allowed, want, sizeof want) == 0);
    CHECK_EQ_U64(ds[5].limit, 1000);
    CHECK_EQ_U64(ds[5].remaining, 499);
    CHECK(rq_batch(l, keys, tiers, NULL, 6, RATECELL_NOW, allowed, NULL) ==
          RATECELL_OK);

    /* A tier out of range anywhere: nothing decided, stored or written. */
    const uint32_t bad[2] = {1, 3};
    const uint64_t fresh[2] = {100, 101};
    memset(allowed, 0xAB, sizeof allowed);
    CHECK(rq_batch(l, fresh, bad, NULL, 2, T0, allowed,
                                       NULL) == RATECELL_INVALID_TIER);
    CHECK(allowed[0] == 0xAB && allowed[1] == 0xAB);
    ratecell_decision d;
    CHECK(rq_check_tier(l, 100, 1, 0, T0, &d) == RATECELL_OK);
    CHECK_EQ_U64(d.remaining, 1000);
    /* No tiers: tier 0 each. */
    CHECK(rq_batch(l, fresh, NULL, NULL, 2, T0, allowed, NULL) == RATECELL_OK);
    CHECK(allowed[0] == 1 && allowed[1] == 1);
    CHECK(rq_batch(l, NULL, NULL, NULL, 0, T0, NULL,
                                       NULL) == RATECELL_OK);

    /* Acquire under the named tier: free key 7 gets 3, then times out. */
    for (int i = 0; i < 3; i++) {
        CHECK(rq_acquire(l, 7, 0, 1, 0, &d) == RATECELL_OK);
        CHECK(d.allowed);
    }
    CHECK(rq_acquire(l, 7, 0, 1, 0, &d) == RATECELL_TIMED_OUT);
    CHECK(rq_acquire(l, 7, 1, 1, 0, &d) == RATECELL_OK);
    CHECK_EQ_U64(d.limit, 1000);
    CHECK(rq_acquire_bytes(l, (const uint8_t *)"bob", 3, 1, 2000, 0,
                                      &d) == RATECELL_COST_EXCEEDS_LIMIT);
    memset(&d, 0xAB, sizeof d);
    ratecell_decision before = d;
    CHECK(rq_acquire(l, 7, 3, 1, 0, &d) == RATECELL_INVALID_TIER);
    CHECK(rq_acquire_bytes(l, (const uint8_t *)"bob", 3, 9, 1, 0,
                                      &d) == RATECELL_INVALID_TIER);
    CHECK(memcmp(&d, &before, sizeof d) == 0);
    CHECK(rq_acquire(l, 7, 0, 1, 0, NULL) == RATECELL_NULL_ARGUMENT);
    ratecell_limiter_free(l);

    /* Without tiers: tier 0 only. */
    ratecell_limiter *plain = NULL;
    cfgs[0].capacity = 0;
    CHECK(ratecell_limiter_new(&cfgs[0], &plain) == RATECELL_OK);
    if (plain == NULL) {
        return;
    }
    const uint32_t zeros[2] = {0, 0};
    CHECK(rq_batch(plain, fresh, zeros, NULL, 2, T0,
                                       allowed, NULL) == RATECELL_OK);
    CHECK(allowed[0] == 1 && allowed[1] == 1);
    CHECK(rq_batch(plain, fresh, bad, NULL, 2, T0, allowed,
                                       NULL) == RATECELL_INVALID_TIER);
    CHECK(rq_acquire(plain, 7, 0, 1, 0, &d) == RATECELL_OK);
    CHECK(rq_acquire(plain, 7, 1, 1, 0, &d) == RATECELL_INVALID_TIER);
    ratecell_limiter_free(plain);
}

static void test_snapshots_keep_the_tiers(void) {
    ratecell_config cfgs[3];
    three_tiers(cfgs);
    ratecell_limiter *l = NULL;
    CHECK(rq_build(cfgs, 1, 3, &l) == RATECELL_OK);
    if (l == NULL) {
        return;
    }
    CHECK_EQ_U64(admitted(l, 1, 1, 10), 10);
    char path[64];
    snprintf(path, sizeof path, "/tmp/ratecell-test-tiers-%ld.snap", (long)getpid());
    CHECK(ratecell_snapshot_save_at(l, path, T0) == RATECELL_OK);
    ratecell_limiter_free(l);

    /* Restored with the caller's tiers, or the file's: key 1 spent 10. */
    ratecell_decision d;
    ratecell_limiter *back = NULL;
    CHECK(rq_restore(cfgs, 1, 3, path, &back) == RATECELL_OK);
    if (back != NULL) {
        CHECK_EQ_U64(ratecell_limiter_tiers(back), 3);
        CHECK(rq_check_tier(back, 1, 1, 0, T0, &d) == RATECELL_OK);
        CHECK_EQ_U64(d.remaining, 990);
        CHECK(rq_check_tier(back, 1, 0, 1, T0, &d) == RATECELL_OK);
        CHECK(!d.allowed);
        ratecell_limiter_free(back);
    }
    back = NULL;
    CHECK(rq_restore_saved(path, &back) == RATECELL_OK);
    if (back != NULL) {
        CHECK_EQ_U64(ratecell_limiter_tiers(back), 3);
        CHECK(rq_check_tier(back, 1, 2, 0, T0, &d) == RATECELL_OK);
        CHECK_EQ_U64(d.limit, 100000);
        CHECK_EQ_U64(d.remaining, 100000 - 10);
        ratecell_limiter_free(back);
    }

    /* Other tiers, or no tiers: refused, nothing made. */
    ratecell_limiter *const sentinel = (ratecell_limiter *)&cfgs;
    back = sentinel;
    CHECK(rq_restore(cfgs, 1, 2, path, &back) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    cfgs[2].limit = cfgs[2].burst = 5000;
    CHECK(rq_restore(cfgs, 1, 3, path, &back) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    CHECK(rq_restore(&cfgs[0], 1, 0, path, &back) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    CHECK(rq_restore(cfgs, 1, RATECELL_MAX_TIERS + 1, path, &back) ==
          RATECELL_INVALID_LENGTH);
    CHECK(rq_restore(NULL, 1, 3, path, &back) ==
          RATECELL_NULL_ARGUMENT);
    CHECK(rq_restore(cfgs, 1, 3, NULL, &back) ==
          RATECELL_NULL_ARGUMENT);
    CHECK(back == sentinel);
    remove(path);
}

/* Three tiers of two limits each: GCRA and a token bucket per hour. */
static void two_limit_tiers(ratecell_config cfgs[6]) {
    const uint64_t gcra[3] = {5, 50, 500};
    const uint64_t bucket[3] = {8, 80, 800};
    for (int t = 0; t < 3; t++) {
        ratecell_config_init(&cfgs[2 * t], RATECELL_ALGORITHM_GCRA, gcra[t], 3600 * SECOND);
        ratecell_config_init(&cfgs[2 * t + 1], RATECELL_ALGORITHM_TOKEN_BUCKET, bucket[t],
                             3600 * SECOND);
        cfgs[2 * t].capacity = cfgs[2 * t + 1].capacity = 1000;
    }
}

/* Request `i` of a fixed pseudo-random trace: a key of 6, its tier
 * (mostly its own, one request in four any), a cost of 1 to 4. */
static void trace_request(int i, uint64_t *key, uint32_t *tier, uint64_t *cost) {
    uint64_t x = (uint64_t)i * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    x ^= x >> 29;
    *key = x % 6;
    *tier = (x >> 8) % 4 == 0 ? (uint32_t)((x >> 16) % 3) : (uint32_t)(*key % 3);
    *cost = 1 + (x >> 24) % 4;
}

/* Waits for the file at `path` to appear (a periodic save renaming it
 * into place); false after 30 s. */
static int wait_for(const char *path) {
    const struct timespec ms = {0, 1000000};
    for (int i = 0; i < 30000; i++) {
        if (access(path, F_OK) == 0) {
            return 1;
        }
        nanosleep(&ms, NULL);
    }
    return 0;
}

static int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    if (in == NULL) {
        return 0;
    }
    FILE *out = fopen(to, "wb");
    if (out == NULL) {
        fclose(in);
        return 0;
    }
    char buf[4096];
    size_t n;
    int ok = 1;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
        ok = ok && fwrite(buf, 1, n, out) == n;
    }
    fclose(in);
    return fclose(out) == 0 && ok;
}

static int same_decision(const ratecell_decision *a, const ratecell_decision *b) {
    return a->allowed == b->allowed && a->limit == b->limit && a->remaining == b->remaining &&
           a->retry_after_ns == b->retry_after_ns && a->reset_after_ns == b->reset_after_ns &&
           a->wait_ns == b->wait_ns;
}

/* Half a trace on a tiered limiter saved every millisecond; the file as
 * the saving thread (not the close) left it, as a process killed then
 * would leave it, reopens into a limiter deciding the rest as the
 * original. Then other tiers, or none, are refused by name. */
static void test_a_persisted_tiered_limiter_comes_back(void) {
    ratecell_config cfgs[6];
    two_limit_tiers(cfgs);
    char path[96], copy[96], plain[96];
    snprintf(path, sizeof path, "/tmp/ratecell-test-tiers-persisted-%ld.snap", (long)getpid());
    snprintf(copy, sizeof copy, "/tmp/ratecell-test-tiers-copy-%ld.snap", (long)getpid());
    snprintf(plain, sizeof plain, "/tmp/ratecell-test-tiers-plain-%ld.snap", (long)getpid());
    remove(path);
    remove(copy);
    remove(plain);
    ratecell_limiter *p = NULL;
    CHECK(rq_persisted(cfgs, 2, 3, path, 1000000, &p) == RATECELL_OK);
    if (p == NULL) {
        return;
    }
    const ratecell_limiter *l = p;
    CHECK_EQ_U64(ratecell_limiter_tiers(l), 3);
    /* The first half before the limiter's clock (the saver judges which
     * states are live by it), the rest after every save. */
    uint64_t start = ratecell_now_ns(l) - 10 * SECOND;
    ratecell_multi_decision want, got;
    for (int i = 0; i < 100; i++) {
        uint64_t key, cost;
        uint32_t tier;
        trace_request(i, &key, &tier, &cost);
        CHECK(rq_each_tier(l, key, tier, cost, start + (uint64_t)i * 50000000,
                                          &want) == RATECELL_OK);
    }
    /* A save may have been under way during the checks; the one after the
     * save that renames first began after them (one save at a time). */
    remove(path);
    CHECK(wait_for(path));
    CHECK(remove(path) == 0);
    CHECK(wait_for(path));
    CHECK(copy_file(path, copy));
    ratecell_limiter *back = NULL;
    CHECK(rq_persisted(cfgs, 2, 3, copy, 3600 * SECOND, &back) ==
          RATECELL_OK);
    if (back == NULL) {
        ratecell_limiter_free(p);
        return;
    }
    const ratecell_limiter *bl = back;
    uint64_t rest = ratecell_now_ns(l) + SECOND;
    int alike = 1, denied = 0;
    for (int i = 100; i < 200; i++) {
        uint64_t key, cost;
        uint32_t tier;
        trace_request(i, &key, &tier, &cost);
        uint64_t t = rest + (uint64_t)(i - 100) * 50000000;
        CHECK(rq_each_tier(l, key, tier, cost, t, &want) == RATECELL_OK);
        CHECK(rq_each_tier(bl, key, tier, cost, t, &got) == RATECELL_OK);
        alike = alike && same_decision(&got.decision, &want.decision) &&
                got.denied_by == want.denied_by && got.count == 2 &&
                same_decision(&got.limits[0], &want.limits[0]) &&
                same_decision(&got.limits[1], &want.limits[1]);
        denied += want.decision.allowed ? 0 : 1;
    }
    CHECK(alike);
    CHECK(denied > 0); /* the trace reaches the limits it restores */
    ratecell_limiter_free(back);
    ratecell_limiter_free(p);

    /* Another number of tiers, another tier's limit, no tiers: refused. */
    ratecell_limiter *const sentinel = (ratecell_limiter *)&cfgs;
    back = sentinel;
    CHECK(rq_persisted(cfgs, 2, 2, path, SECOND, &back) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    CHECK(rq_persisted(cfgs, 2, 0, path, SECOND, &back) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    ratecell_config other[6];
    two_limit_tiers(other);
    other[3].limit = 81;
    CHECK(rq_persisted(other, 2, 3, path, SECOND, &back) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    ratecell_limiter *untiered = NULL;
    CHECK(rq_persisted(cfgs, 2, 0, plain, SECOND, &untiered) == RATECELL_OK);
    ratecell_limiter_free(untiered);
    CHECK(rq_persisted(cfgs, 2, 3, plain, SECOND, &back) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    /* Bad arguments, as for ratecell_limiter_build with tiers. */
    CHECK(rq_persisted(cfgs, 2, RATECELL_MAX_TIERS + 1, path, SECOND, &back) ==
          RATECELL_INVALID_LENGTH);
    CHECK(rq_persisted(cfgs, 0, 3, path, SECOND, &back) ==
          RATECELL_INVALID_LENGTH);
    CHECK(rq_persisted(NULL, 2, 3, path, SECOND, &back) ==
          RATECELL_NULL_ARGUMENT);
    CHECK(rq_persisted(cfgs, 2, 3, NULL, SECOND, &back) ==
          RATECELL_NULL_ARGUMENT);
    CHECK(rq_persisted(cfgs, 2, 3, path, SECOND, NULL) ==
          RATECELL_NULL_ARGUMENT);
    CHECK(back == sentinel);
    remove(path);
    remove(copy);
    remove(plain);
}

int main(void) {
    RUN(test_each_key_gets_its_tiers_quota);
    RUN(test_a_key_moving_tiers_keeps_what_it_spent);
    RUN(test_tiers_of_several_limits);
    RUN(test_bad_input_gets_named_statuses);
    RUN(test_batch_and_acquire_name_the_tier);
    RUN(test_snapshots_keep_the_tiers);
    RUN(test_a_persisted_tiered_limiter_comes_back);
    return harness_finish();
}
