/*
 * C11 tests of several limits checked as one through the C ABI
 * (ratecell_limiter_build with n_limits > 1, ratecell_check_each): the combined decision,
 * each limit's own, the denying index, the ordinary checks and batch on a
 * multi-limit limiter, and the construction errors.
 *
 * Built and run by scripts/c-tests.sh, once normally and once under
 * -fsanitize=address,undefined. Prints "N passed, M failed" last.
 */
#include "ratecell.h"
#include "requests.h"

#include "harness.h"

#include <string.h>

#define SECOND UINT64_C(1000000000)
#define T0 (UINT64_C(480000) * 3600 * SECOND)

/* 10 per second and 3 per minute (the second limit is the tighter). */
static void two_limits(ratecell_config cfgs[2], uint64_t capacity) {
    ratecell_config_init(&cfgs[0], RATECELL_ALGORITHM_GCRA, 10, SECOND);
    ratecell_config_init(&cfgs[1], RATECELL_ALGORITHM_FIXED_WINDOW, 3,
                         60 * SECOND);
    cfgs[0].capacity = cfgs[1].capacity = capacity;
}

static ratecell_limiter *make_multi(const ratecell_config *cfgs, size_t n) {
    ratecell_limiter *l = NULL;
    ratecell_status s = rq_build(cfgs, n, 0, &l);
    if (s != RATECELL_OK) {
        fprintf(stderr, "ratecell_limiter_build: %s\n",
                ratecell_status_str(s));
    }
    CHECK(s == RATECELL_OK);
    return l;
}

static void test_the_tighter_limit_decides_and_reports(void) {
    for (uint64_t capacity = 0; capacity <= 100; capacity += 100) {
        ratecell_config cfgs[2];
        two_limits(cfgs, capacity);
        ratecell_limiter *l = make_multi(cfgs, 2);
        if (l == NULL) {
            return;
        }
        ratecell_multi_decision m;
        for (uint64_t left = 3; left-- > 0;) {
            CHECK(rq_each(l, 5, 1, T0, &m) == RATECELL_OK);
            CHECK(m.decision.allowed);
            CHECK_EQ_U64(m.decision.remaining, left);
            CHECK_EQ_U64(m.decision.limit, 3);
            CHECK_EQ_U64(m.count, 2);
            CHECK_EQ_U64(m.denied_by, RATECELL_NO_LIMIT);
            CHECK_EQ_U64(m.limits[0].remaining, 7 + left);
            CHECK_EQ_U64(m.limits[1].remaining, left);
        }
        CHECK(rq_each(l, 5, 1, T0, &m) == RATECELL_OK);
        CHECK(!m.decision.allowed);
        CHECK_EQ_U64(m.denied_by, 1);
        CHECK(m.limits[0].allowed);
        CHECK_EQ_U64(m.limits[0].remaining, 7); /* nothing spent */
        CHECK(!m.limits[1].allowed);
        CHECK_EQ_U64(m.decision.retry_after_ns, m.limits[1].retry_after_ns);
        CHECK_EQ_U64(m.limits[2].limit, 0); /* past count: zeroed */

        /* The ordinary check returns the same combined decision. */
        ratecell_decision d;
        CHECK(rq_check(l, 5, 1, T0, &d) == RATECELL_OK);
        CHECK(!d.allowed);
        CHECK_EQ_U64(d.retry_after_ns, m.decision.retry_after_ns);

        /* A batch too: two keys, the second fresh when keyed. */
        uint64_t keys[2] = {5, 6};
        uint8_t allowed[2] = {9, 9};
        CHECK(rq_batch(l, keys, NULL, NULL, 2, T0, allowed, NULL) ==
              RATECELL_OK);
        CHECK_EQ_U64(allowed[0], 0);
        CHECK_EQ_U64(allowed[1], capacity > 0 ? 1 : 0);

        /* Byte keys: "k" is fresh on a keyed limiter. */
        const uint8_t k[] = {'k'};
        CHECK(rq_each_bytes(l, k, 1, 1, T0, &m) == RATECELL_OK);
        CHECK_EQ_U64(m.decision.allowed, capacity > 0);
        ratecell_limiter_free(l);
    }
}

static void test_a_single_limit_reports_one(void) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_TOKEN_BUCKET, 1, SECOND);
    ratecell_limiter *l = NULL;
    CHECK(ratecell_limiter_new(&cfg, &l) == RATECELL_OK);
    ratecell_multi_decision m;
    CHECK(rq_each(l, 0, 1, T0, &m) == RATECELL_OK);
    CHECK(m.decision.allowed);
    CHECK_EQ_U64(m.count, 1);
    CHECK(rq_each(l, 0, 1, T0, &m) == RATECELL_OK);
    CHECK_EQ_U64(m.denied_by, 0);
    ratecell_limiter_free(l);
}

static void test_every_algorithm_in_one_block(void) {
    /* Seven limits, a sliding log among them: a latched block. */
    ratecell_config cfgs[RATECELL_MAX_LIMITS];
    for (uint32_t a = 1; a <= 7; a++) {
        ratecell_config_init(&cfgs[a - 1], (ratecell_algorithm)a, 10 + a,
                             SECOND);
    }
    ratecell_config_init(&cfgs[7], RATECELL_ALGORITHM_GCRA, 4, SECOND);
    ratecell_limiter *l = make_multi(cfgs, RATECELL_MAX_LIMITS);
    if (l == NULL) {
        return;
    }
    int admitted = 0;
    ratecell_multi_decision m;
    for (int i = 0; i < 20; i++) {
        CHECK(rq_each(l, 0, 1, RATECELL_NOW, &m) == RATECELL_OK);
        admitted += m.decision.allowed;
    }
    CHECK(admitted >= 4); /* 4 at once, maybe one more as time passes */
    CHECK(admitted <= 6);
    CHECK_EQ_U64(m.count, RATECELL_MAX_LIMITS);
    ratecell_limiter_free(l);
}

static void test_bad_lists_get_named_statuses(void) {
    ratecell_config cfgs[RATECELL_MAX_LIMITS + 1];
    for (size_t i = 0; i < RATECELL_MAX_LIMITS + 1; i++) {
        ratecell_config_init(&cfgs[i], RATECELL_ALGORITHM_GCRA, 10, SECOND);
    }
    ratecell_limiter *l = (ratecell_limiter *)&cfgs; /* must stay unchanged */
    ratecell_limiter *const before = l;
    CHECK(rq_build(cfgs, 0, 0, &l) == RATECELL_INVALID_LENGTH);
    CHECK(rq_build(cfgs, RATECELL_MAX_LIMITS + 1, 0, &l) ==
          RATECELL_INVALID_LENGTH);
    CHECK(rq_build(NULL, 2, 0, &l) == RATECELL_NULL_ARGUMENT);
    CHECK(rq_build(cfgs, 2, 0, NULL) == RATECELL_NULL_ARGUMENT);
    cfgs[1].capacity = 10;
    CHECK(rq_build(cfgs, 2, 0, &l) ==
          RATECELL_INVALID_CAPACITY);
    cfgs[1].capacity = 0;
    cfgs[1].overflow = RATECELL_OVERFLOW_ALLOW;
    CHECK(rq_build(cfgs, 2, 0, &l) ==
          RATECELL_INVALID_OVERFLOW);
    cfgs[1].overflow = RATECELL_OVERFLOW_DENY;
    cfgs[1].clock = RATECELL_CLOCK_COARSE;
    CHECK(rq_build(cfgs, 2, 0, &l) == RATECELL_INVALID_CLOCK);
    cfgs[1].clock = cfgs[0].clock;
    cfgs[1].limit = 0;
    CHECK(rq_build(cfgs, 2, 0, &l) == RATECELL_INVALID_LIMIT);
    CHECK(l == before);
    ratecell_multi_decision m;
    CHECK(rq_each(NULL, 0, 1, T0, &m) ==
          RATECELL_NULL_ARGUMENT);
}

static void test_reconfigure_keeps_the_spent_and_refuses_by_status(void) {
    for (uint64_t capacity = 0; capacity <= 100; capacity += 100) {
        ratecell_config cfgs[2];
        two_limits(cfgs, capacity);
        ratecell_limiter *l = make_multi(cfgs, 2);
        if (l == NULL) {
            return;
        }
        ratecell_multi_decision m;
        CHECK(rq_each(l, 5, 2, T0, &m) == RATECELL_OK);
        CHECK(m.decision.allowed);
        /* 3 to 2 per minute (same count width): the 2 spent stay spent. */
        cfgs[0].limit = cfgs[0].burst = 20;
        cfgs[1].limit = cfgs[1].burst = 2;
        CHECK(ratecell_limiter_reconfigure(l, cfgs, 2) == RATECELL_OK);
        CHECK(rq_each(l, 5, 0, T0, &m) == RATECELL_OK);
        CHECK_EQ_U64(m.limits[0].limit, 20);
        CHECK_EQ_U64(m.limits[1].limit, 2);
        CHECK_EQ_U64(m.limits[1].remaining, 0);
        CHECK(!m.decision.allowed);
        ratecell_config got;
        CHECK(ratecell_limiter_config(l, &got) == RATECELL_OK);
        CHECK_EQ_U64(got.limit, 20);
        /* Refusals: nothing changes. */
        ratecell_config bad[2];
        memcpy(bad, cfgs, sizeof bad);
        bad[1].period_ns = 30 * SECOND; /* a window's period */
        CHECK(ratecell_limiter_reconfigure(l, bad, 2) == RATECELL_RECONFIGURE_REFUSED);
        memcpy(bad, cfgs, sizeof bad);
        bad[0].algorithm = RATECELL_ALGORITHM_SLIDING_WINDOW;
        bad[0].burst = 0;
        CHECK(ratecell_limiter_reconfigure(l, bad, 2) == RATECELL_RECONFIGURE_REFUSED);
        memcpy(bad, cfgs, sizeof bad);
        bad[0].capacity = bad[1].capacity = capacity + 1;
        CHECK(ratecell_limiter_reconfigure(l, bad, 2) == RATECELL_RECONFIGURE_REFUSED);
        CHECK(ratecell_limiter_reconfigure(l, cfgs, 1) == RATECELL_RECONFIGURE_REFUSED);
        memcpy(bad, cfgs, sizeof bad);
        bad[0].limit = 0;
        CHECK(ratecell_limiter_reconfigure(l, bad, 2) == RATECELL_INVALID_LIMIT);
        CHECK(ratecell_limiter_reconfigure(l, cfgs, 0) == RATECELL_INVALID_LENGTH);
        CHECK(ratecell_limiter_reconfigure(l, NULL, 2) == RATECELL_NULL_ARGUMENT);
        CHECK(ratecell_limiter_reconfigure(NULL, cfgs, 2) == RATECELL_NULL_ARGUMENT);
        CHECK(rq_each(l, 5, 0, T0, &m) == RATECELL_OK);
        CHECK_EQ_U64(m.limits[0].limit, 20);
        CHECK_EQ_U64(m.limits[1].limit, 2);
        ratecell_limiter_free(l);
    }
}

int main(void) {
    RUN(test_the_tighter_limit_decides_and_reports);
    RUN(test_a_single_limit_reports_one);
    RUN(test_every_algorithm_in_one_block);
    RUN(test_bad_lists_get_named_statuses);
    RUN(test_reconfigure_keeps_the_spent_and_refuses_by_status);
    return harness_finish();
}
