/*
 * C11 tests of the lease ABI (SPEC §8) without a network: the test plays
 * the Redis module's part with a model of RATECELL.LEASE for a fixed
 * window, so every reply is composed as §8 says the module composes it
 * (g = the largest cost in 1..=w the window still admits, the units
 * expiring at the window's end), and drives the protocol the way a C user
 * does around their own Redis client: check, send the grant's argv,
 * complete with the reply, spend locally.
 *
 * Built and run by scripts/c-tests.sh, once normally and once under
 * -fsanitize=address,undefined. Prints "N passed, M failed" last.
 */
#include "ratecell.h"
#include "requests.h"

#include "harness.h"

#include <inttypes.h>
#include <string.h>

#define SECOND UINT64_C(1000000000)
#define MS UINT64_C(1000000)
/* A whole second: windows of 1 s start at T0 + k·s. */
#define T0 (UINT64_C(480000) * 3600 * SECOND)
#define LIMIT 100
#define MAX_GRANT 10

/* The module's books for one key of `fixed_window LIMIT 1s`: the window
 * of the last grant and what it has counted. */
struct window_model {
    uint64_t window;
    uint64_t count;
    uint64_t grants;
};

/* RATECELL.LEASE's reply at `t` to `want` units, as SPEC §8 decides it
 * for a fixed window: [g, expires_at_ns, retry_after_ns, limit,
 * remaining], g what the window still admits up to `want`. */
static void model_lease(struct window_model *m, uint64_t t, uint64_t want, int64_t reply[5]) {
    uint64_t window = t / SECOND;
    if (window != m->window) {
        m->window = window;
        m->count = 0;
    }
    uint64_t left = LIMIT - m->count;
    uint64_t g = want < left ? want : left;
    m->count += g;
    m->grants++;
    reply[0] = (int64_t)g;
    reply[1] = (int64_t)((window + 1) * SECOND);
    /* For g = 0: when a grant of 1 can next succeed, the window's end. */
    reply[2] = g == 0 ? (int64_t)((window + 1) * SECOND - t) : 0;
    reply[3] = LIMIT;
    reply[4] = (int64_t)(LIMIT - m->count);
}

static ratecell_leases *make_leases(uint32_t send_at) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_FIXED_WINDOW, LIMIT, SECOND);
    cfg.capacity = 16;
    ratecell_lease_options o;
    ratecell_lease_options_init(&o);
    o.max_grant = MAX_GRANT;
    /* One explicit timeline for node and "server": no skew to allow for. */
    o.skew_ns = 0;
    o.send_at = send_at;
    o.prefix = (const uint8_t *)"api:";
    o.prefix_len = 4;
    ratecell_leases *l = NULL;
    ratecell_status s = ratecell_leases_new(&cfg, &o, &l);
    if (s != RATECELL_OK) {
        fprintf(stderr, "ratecell_leases_new: %s\n", ratecell_status_str(s));
    }
    CHECK(s == RATECELL_OK);
    return l;
}

/* The step of a leased check of `key` at `t` (UINT32_MAX, and a failed
 * CHECK, when the call fails). */
static uint32_t check_at(const ratecell_leases *l, const char *key, uint64_t cost, uint64_t t,
                         ratecell_decision *out, ratecell_grant **grant) {
    struct ratecell_request r = rq_bytes(key, strlen(key), 0, cost, t);
    uint32_t step = UINT32_MAX;
    CHECK(ratecell_leases_check(l, &r, &step, out, grant) == RATECELL_OK);
    return step;
}

/* A decision no call writes: to see that a call left *out alone. */
static ratecell_decision untouched(void) {
    ratecell_decision d;
    memset(&d, 0, sizeof d);
    d.limit = 0xDEAD;
    d.remaining = 0xBEEF;
    return d;
}

/* The grant's argv equals `want[0 .. n)`. */
static void check_argv(const ratecell_grant *g, const char *const *want, size_t n) {
    size_t argc = 0;
    /* Too small a buffer: only the count is written. */
    CHECK(ratecell_grant_command(g, NULL, NULL, 0, &argc) == RATECELL_INVALID_LENGTH);
    CHECK_EQ_U64(argc, n);
    const uint8_t *args[RATECELL_LEASE_MAX_ARGS];
    size_t lens[RATECELL_LEASE_MAX_ARGS];
    CHECK(ratecell_grant_command(g, args, lens, RATECELL_LEASE_MAX_ARGS, &argc) == RATECELL_OK);
    CHECK_EQ_U64(argc, n);
    for (size_t i = 0; i < n && i < argc; i++) {
        if (lens[i] != strlen(want[i]) || memcmp(args[i], want[i], lens[i]) != 0) {
            fprintf(stderr, "argument %zu is \"%.*s\", expected \"%s\"\n", i, (int)lens[i],
                    (const char *)args[i], want[i]);
            CHECK(0);
        }
    }
}

/* Sends the grant to the model (checking its argv asks for `want` units
 * of `key` at `t`) and completes it at `t`. */
static ratecell_completion serve(const ratecell_leases *l, struct window_model *m,
                                 const ratecell_grant *g, const char *key, uint64_t t) {
    struct ratecell_grant_info info;
    CHECK(ratecell_grant_info(g, &info) == RATECELL_OK);
    char redis_key[64], want[24], at[24];
    snprintf(redis_key, sizeof redis_key, "api:%s", key);
    snprintf(want, sizeof want, "%" PRIu64, info.want);
    snprintf(at, sizeof at, "%" PRIu64, t);
    const char *argv[] = {"RATECELL.LEASE", redis_key, "fixed_window", "100",
                          "1000000000ns",   "WANT",    want,           "AT",
                          at};
    check_argv(g, argv, sizeof argv / sizeof argv[0]);
    CHECK(info.want >= 1 && info.want <= MAX_GRANT);
    CHECK_EQ_U64(info.at_ns, t);
    int64_t reply[5];
    model_lease(m, t, info.want, reply);
    ratecell_completion c;
    memset(&c, 0, sizeof c);
    CHECK(ratecell_leases_complete(l, g, reply, 5, t, &c) == RATECELL_OK);
    CHECK(!c.has_retry);
    return c;
}

static void test_a_new_key_fetches_then_spends_its_grant_here(void) {
    ratecell_leases *l = make_leases(1);
    if (l == NULL) {
        return;
    }
    struct window_model m = {0, 0, 0};
    const char *key = "user:1";
    uint64_t t = T0 + 100 * MS;

    /* A new key holds no units: the check waits on a fetch. */
    ratecell_decision d = untouched();
    ratecell_grant *g = NULL;
    CHECK_EQ_U64(check_at(l, key, MAX_GRANT, t, &d, &g), RATECELL_STEP_FETCH);
    CHECK(g != NULL);
    CHECK_EQ_U64(d.limit, 0xDEAD); /* a fetch writes no decision */
    struct ratecell_grant_info info;
    CHECK(ratecell_grant_info(g, &info) == RATECELL_OK);
    CHECK(info.is_fetch);
    CHECK(info.key_len == strlen(key) && memcmp(info.key, key, info.key_len) == 0);
    /* No checks seen yet: w is what this one needs. */
    CHECK_EQ_U64(info.want, MAX_GRANT);
    ratecell_completion c = serve(l, &m, g, key, t);
    ratecell_grant_free(g);
    CHECK(c.has_decision);
    CHECK(c.decision.allowed);
    CHECK_EQ_U64(c.decision.limit, LIMIT);
    CHECK_EQ_U64(c.decision.remaining, 0); /* the grant went to this check */

    /* Spent: the next check fetches again, for the demand of the last
     * horizon (W at most), and its completion leaves the rest in hand. */
    t += MS;
    g = NULL;
    CHECK_EQ_U64(check_at(l, key, 1, t, &d, &g), RATECELL_STEP_FETCH);
    CHECK(ratecell_grant_info(g, &info) == RATECELL_OK);
    CHECK_EQ_U64(info.want, MAX_GRANT);
    c = serve(l, &m, g, key, t);
    ratecell_grant_free(g);
    CHECK(c.has_decision && c.decision.allowed);
    uint64_t held = MAX_GRANT - 1;
    CHECK_EQ_U64(c.decision.remaining, held);
    uint64_t grants = m.grants;

    /* The units in hand are spent here, one check at a time, with no
     * command, until a quarter of the grant is left: that check asks for
     * the next grant in the background. */
    int refilled = 0;
    while (held > 0 && !refilled) {
        t += MS;
        held--;
        g = NULL;
        uint32_t step = check_at(l, key, 1, t, &d, &g);
        CHECK(d.allowed);
        CHECK_EQ_U64(d.remaining, held);
        if (step == RATECELL_STEP_REFILL) {
            refilled = 1;
            CHECK(held <= MAX_GRANT / 4);
            CHECK(ratecell_grant_info(g, &info) == RATECELL_OK);
            CHECK(!info.is_fetch);
            c = serve(l, &m, g, key, t);
            ratecell_grant_free(g);
            CHECK(!c.has_decision); /* no check waited on it */
            held += info.want;
        } else {
            CHECK_EQ_U64(step, RATECELL_STEP_DECIDED);
            CHECK(g == NULL);
            CHECK(held > MAX_GRANT / 4);
        }
    }
    CHECK(refilled);
    CHECK_EQ_U64(m.grants, grants + 1);
    /* The refill joined the units in hand (the same window). */
    t += MS;
    g = NULL;
    CHECK_EQ_U64(check_at(l, key, 0, t, &d, &g), RATECELL_STEP_DECIDED);
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, held);

    /* The window ends: its units are gone, and the key asks again, at
     * the new window's time. */
    t = T0 + SECOND;
    g = NULL;
    CHECK_EQ_U64(check_at(l, key, 1, t, &d, &g), RATECELL_STEP_FETCH);
    CHECK(g != NULL);
    c = serve(l, &m, g, key, t);
    ratecell_grant_free(g);
    CHECK(c.has_decision && c.decision.allowed);
    CHECK_EQ_U64(m.window, (T0 + SECOND) / SECOND);

    struct ratecell_lease_stats s;
    CHECK(ratecell_leases_stats(l, &s) == RATECELL_OK);
    CHECK_EQ_U64(s.fetches, 3);
    CHECK_EQ_U64(s.refills, 1);
    CHECK_EQ_U64(s.replies, m.grants);
    CHECK_EQ_U64(s.failures, 0);
    CHECK_EQ_U64(s.keys, 1);
    ratecell_leases_free(l);
}

/* The window admits no more than its limit through any number of grants:
 * what the node admits is what the module's books granted. */
static void test_a_node_never_admits_more_than_its_grants(void) {
    ratecell_leases *l = make_leases(1);
    if (l == NULL) {
        return;
    }
    struct window_model m = {0, 0, 0};
    uint64_t admitted = 0;
    uint64_t t = T0 + 2 * SECOND;
    for (int i = 0; i < 3 * LIMIT; i++, t += MS / 2) {
        ratecell_decision d = untouched();
        ratecell_grant *g = NULL;
        uint32_t step = check_at(l, "k", 1, t, &d, &g);
        CHECK(step != UINT32_MAX);
        if (g != NULL) {
            ratecell_completion c = serve(l, &m, g, "k", t);
            ratecell_grant_free(g);
            if (step == RATECELL_STEP_FETCH) {
                CHECK(c.has_decision);
                d = c.decision;
            }
        }
        admitted += d.allowed ? 1 : 0;
    }
    /* 150 ms of checks, all in one window: the limit, and no more. */
    CHECK_EQ_U64(m.window, (T0 + 2 * SECOND) / SECOND);
    CHECK_EQ_U64(admitted, LIMIT);
    CHECK(m.count == LIMIT);
    /* Far fewer commands than checks. */
    CHECK(m.grants <= LIMIT / 4);
    ratecell_leases_free(l);
}

static void test_a_reply_that_is_not_a_lease_changes_nothing(void) {
    ratecell_leases *l = make_leases(0);
    if (l == NULL) {
        return;
    }
    uint64_t t = T0 + 200 * MS;
    ratecell_decision d = untouched();
    ratecell_grant *g = NULL;
    CHECK_EQ_U64(check_at(l, "k", 1, t, &d, &g), RATECELL_STEP_FETCH);
    /* Without send_at the command carries no AT (the server's clock and
     * the key's expiry on it), but a fetch is DATED its check's time, so
     * its grant is of that check's window. */
    struct ratecell_grant_info info;
    CHECK(ratecell_grant_info(g, &info) == RATECELL_OK);
    char want[24], dated[24];
    snprintf(want, sizeof want, "%" PRIu64, info.want);
    snprintf(dated, sizeof dated, "%" PRIu64, t);
    const char *argv[] = {"RATECELL.LEASE", "api:k", "fixed_window", "100", "1000000000ns",
                          "WANT", want, "DATED", dated};
    check_argv(g, argv, sizeof argv / sizeof argv[0]);

    struct ratecell_lease_stats before, after;
    CHECK(ratecell_leases_stats(l, &before) == RATECELL_OK);
    int64_t short_reply[3] = {5, (int64_t)(T0 + SECOND), 0};
    int64_t negative_units[5] = {-5, (int64_t)(T0 + SECOND), 0, LIMIT, 95};
    /* A RATECELL.CHECK reply sent by mistake: six integers. */
    int64_t check_reply[6] = {1, LIMIT, 99, 0, 800000000, 0};
    struct {
        const int64_t *ints;
        size_t n;
    } bad[] = {{short_reply, 3}, {negative_units, 5}, {check_reply, 6}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ratecell_completion c;
        memset(&c, 0x5A, sizeof c);
        ratecell_completion seen = c;
        CHECK(ratecell_leases_complete(l, g, bad[i].ints, bad[i].n, t, &c) ==
              RATECELL_INVALID_REPLY);
        CHECK(memcmp(&c, &seen, sizeof c) == 0);
    }
    CHECK(ratecell_leases_stats(l, &after) == RATECELL_OK);
    CHECK(memcmp(&before, &after, sizeof before) == 0);
    /* No units came: a peek still finds none. */
    ratecell_grant *none = NULL;
    CHECK_EQ_U64(check_at(l, "k", 0, t, &d, &none), RATECELL_STEP_DECIDED);
    CHECK(!d.allowed);
    CHECK(none == NULL);

    /* What to do with it: complete as "no answer". The failure policy
     * (deny) decides the waiting check, and the grant is asked again
     * after the first backoff step, 10 ms. */
    ratecell_completion c;
    CHECK(ratecell_leases_complete(l, g, NULL, 0, t, &c) == RATECELL_OK);
    CHECK(c.has_decision);
    CHECK(!c.decision.allowed);
    CHECK_EQ_U64(c.decision.retry_after_ns, 10 * MS);
    CHECK(c.has_retry);
    CHECK_EQ_U64(c.retry_at_ns, t + 10 * MS);
    ratecell_grant *retry = NULL;
    CHECK(ratecell_leases_retry(l, g, c.retry_at_ns, &retry) == RATECELL_OK);
    CHECK(ratecell_grant_info(retry, &info) == RATECELL_OK);
    CHECK(!info.is_fetch);
    CHECK_EQ_U64(info.at_ns, t + 10 * MS);
    CHECK(ratecell_leases_stats(l, &after) == RATECELL_OK);
    CHECK_EQ_U64(after.failures, before.failures + 1);
    CHECK_EQ_U64(after.lease_fallbacks, before.lease_fallbacks + 1);
    CHECK_EQ_U64(after.replies, before.replies);

    /* Grants belong to the leases that made them. */
    ratecell_leases *other = make_leases(0);
    if (other != NULL) {
        int64_t reply[5] = {1, (int64_t)(T0 + SECOND), 0, LIMIT, 99};
        ratecell_completion oc = c;
        CHECK(ratecell_leases_complete(other, retry, reply, 5, t, &oc) == RATECELL_INVALID_GRANT);
        CHECK(memcmp(&oc, &c, sizeof c) == 0);
        ratecell_leases_free(other);
    }
    ratecell_grant_free(retry);
    ratecell_grant_free(g);
    ratecell_leases_free(l);
}

static void test_null_arguments_are_statuses(void) {
    ratecell_leases *l = make_leases(0);
    if (l == NULL) {
        return;
    }
    ratecell_decision d;
    ratecell_grant *g = NULL;
    struct ratecell_request r = rq_key(1, 0, 1, T0);
    uint32_t step = UINT32_MAX;
    CHECK(ratecell_leases_check(NULL, &r, &step, &d, &g) == RATECELL_NULL_ARGUMENT);
    CHECK(ratecell_leases_check(l, NULL, &step, &d, &g) == RATECELL_NULL_ARGUMENT);
    CHECK(ratecell_leases_check(l, &r, NULL, &d, &g) == RATECELL_NULL_ARGUMENT);
    CHECK(ratecell_leases_check(l, &r, &step, &d, NULL) == RATECELL_NULL_ARGUMENT);
    /* A leased limit has one tier. */
    r.tier = 1;
    CHECK(ratecell_leases_check(l, &r, &step, &d, &g) == RATECELL_INVALID_TIER);
    CHECK(step == UINT32_MAX && g == NULL); /* a failed call writes nothing */
    ratecell_completion c;
    CHECK(ratecell_leases_complete(l, NULL, NULL, 0, T0, &c) == RATECELL_NULL_ARGUMENT);
    CHECK(ratecell_grant_command(NULL, NULL, NULL, 0, NULL) == RATECELL_NULL_ARGUMENT);
    ratecell_grant_free(NULL);
    ratecell_leases_free(l);
    ratecell_leases_free(NULL);

    /* An algorithm whose units cannot be spent apart from the module. */
    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_LEAKY_BUCKET, 10, SECOND);
    ratecell_lease_options o;
    ratecell_lease_options_init(&o);
    ratecell_leases *refused = NULL;
    CHECK(ratecell_leases_new(&cfg, &o, &refused) == RATECELL_NOT_LEASABLE);
    CHECK(refused == NULL);
}

/* cached_deny: a denial Redis gave is answered here until its
 * retry_after, counted down; admissions and "never" are not kept. */
static void test_denials_are_remembered_until_their_retry_after(void) {
    ratecell_denials *c = NULL;
    CHECK(ratecell_denials_new(16, RATECELL_CLOCK_TSC, &c) == RATECELL_OK);
    if (c == NULL) {
        return;
    }
    uint64_t t = T0 + 300 * MS;
    struct ratecell_request r = rq_bytes("user:9", 6, 0, 1, t);
    ratecell_decision denied = {false, 5, 0, 400 * MS, 900 * MS, 0};
    CHECK(ratecell_denials_remember(c, &r, &denied) == RATECELL_OK);
    ratecell_decision d = untouched();
    bool found = false;
    r.at_ns = t + 100 * MS;
    CHECK(ratecell_denials_check(c, &r, &found, &d) == RATECELL_OK);
    CHECK(found);
    CHECK(!d.allowed);
    CHECK_EQ_U64(d.limit, 5);
    CHECK_EQ_U64(d.retry_after_ns, 300 * MS);
    CHECK_EQ_U64(d.reset_after_ns, 800 * MS);
    /* Over at its retry_after: ask Redis (not found), *out untouched. */
    r.at_ns = t + 400 * MS;
    d = untouched();
    CHECK(ratecell_denials_check(c, &r, &found, &d) == RATECELL_OK);
    CHECK(!found);
    CHECK_EQ_U64(d.limit, 0xDEAD);
    /* Another key was never denied. */
    struct ratecell_request other = rq_bytes("user:8", 6, 0, 1, t + 100 * MS);
    found = true;
    CHECK(ratecell_denials_check(c, &other, &found, &d) == RATECELL_OK);
    CHECK(!found);

    ratecell_decision admitted = {true, 5, 4, 0, 200 * MS, 0};
    ratecell_decision never = {false, 5, 0, UINT64_MAX, 0, 0};
    struct ratecell_request a = rq_key(1, 0, 1, t);
    struct ratecell_request n = rq_key(2, 0, 1, t);
    CHECK(ratecell_denials_remember(c, &a, &admitted) == RATECELL_OK);
    CHECK(ratecell_denials_remember(c, &n, &never) == RATECELL_OK);
    a.at_ns = n.at_ns = t + 1;
    found = true;
    CHECK(ratecell_denials_check(c, &a, &found, &d) == RATECELL_OK);
    CHECK(!found);
    found = true;
    CHECK(ratecell_denials_check(c, &n, &found, &d) == RATECELL_OK);
    CHECK(!found);
    /* NULLs are statuses, and a failed call writes nothing. */
    found = true;
    CHECK(ratecell_denials_check(NULL, &a, &found, &d) == RATECELL_NULL_ARGUMENT);
    CHECK(ratecell_denials_check(c, &a, NULL, &d) == RATECELL_NULL_ARGUMENT);
    CHECK(ratecell_denials_check(c, &a, &found, NULL) == RATECELL_NULL_ARGUMENT);
    CHECK(ratecell_denials_remember(c, &a, NULL) == RATECELL_NULL_ARGUMENT);
    CHECK(found);
    ratecell_denials_free(c);
    ratecell_denials_free(NULL);
}

int main(void) {
    RUN(test_a_new_key_fetches_then_spends_its_grant_here);
    RUN(test_a_node_never_admits_more_than_its_grants);
    RUN(test_a_reply_that_is_not_a_lease_changes_nothing);
    RUN(test_null_arguments_are_statuses);
    RUN(test_denials_are_remembered_until_their_retry_after);
    return harness_finish();
}
