/*
 * A random-call fuzz driver for ratecell's C ABI: random configurations and
 * call sequences (any integers, NULL pointers, empty and impossible
 * lengths, times near 0 and UINT64_MAX, struct sizes this library cannot
 * know, tiers a limiter does not have, NULL key bytes with a length)
 * through every exported function.
 *
 * It checks what the ABI promises: no crash (the sanitized build adds
 * ASan, UBSan and LeakSanitizer), no RATECELL_PANIC, no status outside the
 * enum, out-parameters untouched on failure, decisions that are coherent.
 *
 *   fuzz_abi [ITERATIONS [SEED]]     (defaults: 200000, a seed from the clock)
 *
 * scripts/c-tests.sh runs it with RATECELL_FUZZ_ITERATIONS calls, normally
 * and under the sanitizers; run it longer by hand with a larger count. A
 * failure prints the seed that reproduces it.
 */
#define _POSIX_C_SOURCE 200809L

#include "ratecell.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng_state;

static uint64_t next(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * UINT64_C(2685821657736338717);
}

static uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }

/* An integer from a mix of edges and anything at all. */
static uint64_t any(const uint64_t *edges, size_t n_edges) {
    return below(4) == 0 ? next() : edges[below(n_edges)];
}

static const uint64_t LIMITS[] = {0, 1, 2, 3, 10, 1000, UINT32_MAX, UINT64_C(1) << 32,
                                  UINT64_MAX};
static const uint64_t PERIODS[] = {0, 999, 1000, 1000000, 1000000000, 60000000000,
                                   UINT64_C(31622400000000000), UINT64_C(31622400000000001),
                                   UINT64_MAX};
static const uint64_t SUB_WINDOWS[] = {0, 1, 2, 7, 10, 60, 64, 65, UINT32_MAX};
/* Capacities stay small or impossible: a few GiB would be allocated for real. */
static const uint64_t CAPACITIES[] = {0, 0, 0, 1, 2, 7, 64, 1000, UINT64_C(1) << 48,
                                      UINT64_C(1) << 63, UINT64_MAX};
static const uint64_t COSTS[] = {0, 1, 1, 1, 2, 5, 1000, UINT32_MAX, UINT64_C(1) << 32,
                                 UINT64_MAX};
static const uint64_t T0 = UINT64_C(1700000000000000000);

static uint64_t a_time(void) {
    static const uint64_t edges[] = {0, 1, UINT64_C(1) << 62, UINT64_MAX - 1, UINT64_MAX};
    switch (below(8)) {
    case 0:
        return edges[below(5)];
    case 1:
        return next();
    default:
        return T0 + below(UINT64_C(100000000000)) - UINT64_C(50000000000);
    }
}

static uint64_t failures;
static uint64_t seed;

#define EXPECT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            failures++;                                                        \
            fprintf(stderr, "fuzz_abi.c:%d: %s failed (seed %" PRIu64 ")\n",   \
                    __LINE__, #cond, seed);                                    \
        }                                                                      \
    } while (0)

static int valid_status(ratecell_status s) {
    return (s <= RATECELL_INVALID_TIER || s == RATECELL_INVALID_STATES) && s != RATECELL_PANIC;
}

static const unsigned char SENTINEL = 0x5A;

static int untouched(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        if (b[i] != SENTINEL) {
            return 0;
        }
    }
    return 1;
}

/* A decision the ABI could have produced. */
static void coherent(const ratecell_decision *d) {
    EXPECT(d->allowed == true || d->allowed == false);
    if (d->allowed) {
        EXPECT(d->retry_after_ns == 0);
    } else {
        EXPECT(d->retry_after_ns >= 1);
        EXPECT(d->wait_ns == 0);
    }
    EXPECT(d->remaining <= d->limit);
}

/* After a call: a valid status; on success a coherent decision, on
 * failure an untouched one. */
static void after(ratecell_status s, const ratecell_decision *d) {
    EXPECT(valid_status(s));
    if (s == RATECELL_OK) {
        coherent(d);
    } else if (s == RATECELL_TIMED_OUT || s == RATECELL_COST_EXCEEDS_LIMIT) {
        coherent(d);
        EXPECT(!d->allowed);
    } else {
        EXPECT(untouched(d, sizeof *d));
    }
}

/* A struct size: mostly the right one, now and then one this library
 * cannot know (another version's, 0, anything). */
static uint32_t a_size(uint32_t right) {
    switch (below(24)) {
    case 0: return 0;
    case 1: return right - 8;
    case 2: return right + 8;
    case 3: return (uint32_t)next();
    default: return right;
    }
}

/* A tier: mostly 0 or one a tiered limiter has, now and then any. */
static uint32_t a_tier(void) {
    switch (below(8)) {
    case 0: return (uint32_t)next();
    case 1: case 2: return (uint32_t)below(RATECELL_MAX_TIERS + 2);
    default: return 0;
    }
}

/* A random request over `bytes` (80 of them), and the status the ABI must
 * answer for its shape on a live `l` (RATECELL_OK when the shape is fine). */
static ratecell_status a_request(struct ratecell_request *r, const ratecell_limiter *l,
                                 const uint8_t *bytes, size_t n_bytes) {
    ratecell_request_init(r);
    r->size = a_size((uint32_t)sizeof *r);
    r->tier = a_tier();
    r->key_id = below(2) ? below(16) : next();
    r->cost = any(COSTS, 10);
    r->at_ns = below(3) == 0 ? RATECELL_NOW : a_time();
    switch (below(6)) {
    case 0: r->key_bytes = bytes; r->key_len = (size_t)below(n_bytes + 1); break;
    case 1: r->key_bytes = bytes; r->key_len = (size_t)below(9); break;
    case 2: r->key_bytes = bytes; r->key_len = 0; break;               /* the empty key */
    case 3: if (below(4) == 0) r->key_len = 1 + (size_t)below(100); break; /* NULL, a length */
    case 4:
        if (below(4) == 0) {
            r->key_bytes = bytes;
            r->key_len = (size_t)PTRDIFF_MAX + 1 + (size_t)below(1000);
        }
        break;
    default: break;
    }
    if (r->size != sizeof *r) return RATECELL_INVALID_LENGTH;
    if (r->key_bytes == NULL && r->key_len != 0) return RATECELL_NULL_ARGUMENT;
    if (r->key_len > (size_t)PTRDIFF_MAX) return RATECELL_INVALID_LENGTH;
    if (l != NULL && r->tier >= ratecell_limiter_tiers(l)) return RATECELL_INVALID_TIER;
    return RATECELL_OK;
}

/* The status a call taking a request must return on `l` with the request
 * pointer `r` (NULL or not) of shape `shape`, and an out pointer `out`. */
static ratecell_status expected(const ratecell_limiter *l, const void *r, ratecell_status shape,
                                const void *out) {
    if (l == NULL || r == NULL) return RATECELL_NULL_ARGUMENT;
    if (shape != RATECELL_OK) return shape;
    return out == NULL ? RATECELL_NULL_ARGUMENT : RATECELL_OK;
}

/* A decision that is coherent with a multi-decision's combined one. */
static void coherent_multi(const ratecell_multi_decision *m) {
    coherent(&m->decision);
    EXPECT(m->count >= 1 && m->count <= RATECELL_MAX_LIMITS);
    if (m->decision.allowed) EXPECT(m->denied_by == RATECELL_NO_LIMIT);
    if (m->denied_by != RATECELL_NO_LIMIT) EXPECT(m->denied_by < m->count);
    for (uint32_t i = 0; i < m->count && i < RATECELL_MAX_LIMITS; i++) {
        coherent(&m->limits[i]);
    }
}

enum { SLOTS = 4, MAX_BATCH = 64 };

int main(int argc, char **argv) {
    uint64_t iterations = argc > 1 ? strtoull(argv[1], NULL, 10) : 200000;
    seed = argc > 2 ? strtoull(argv[2], NULL, 10) : (uint64_t)time(NULL);
    rng_state = seed * 2 + 1;
    printf("fuzz_abi: %" PRIu64 " calls, seed %" PRIu64 "\n", iterations, seed);

    ratecell_limiter *slots[SLOTS] = {NULL};
    uint64_t made = 0, refused = 0, checks = 0;
    uint8_t bytes[80];
    uint64_t keys[MAX_BATCH], costs[MAX_BATCH];
    uint32_t tiers[MAX_BATCH];
    uint8_t allowed[MAX_BATCH];
    ratecell_decision decisions[MAX_BATCH];

    for (uint64_t it = 0; it < iterations; it++) {
        size_t slot = (size_t)below(SLOTS);
        /* Mostly a live limiter (or NULL when the slot is empty), now and
         * then NULL on purpose. */
        const ratecell_limiter *l = below(50) == 0 ? NULL : slots[slot];
        ratecell_decision d;
        memset(&d, SENTINEL, sizeof d);
        for (size_t i = 0; i < sizeof bytes; i++) {
            bytes[i] = (uint8_t)next();
        }
        switch (below(17)) {
        case 0: { /* make (or fail to make) a limiter */
            ratecell_config cfg;
            if (below(2) == 0) { /* valid, so that the other calls have limiters */
                ratecell_config_init(&cfg, 1 + (uint32_t)below(7), 1 + below(20),
                                     UINT64_C(60000000) * (1 + below(100)));
                cfg.capacity = below(3) == 0 ? 0 : 1 + below(64);
                cfg.overflow = (uint32_t)below(3);
            } else {
                ratecell_config_init(&cfg, (uint32_t)below(10), any(LIMITS, 9), any(PERIODS, 9));
                if (below(4) == 0) cfg.algorithm = (uint32_t)next();
                if (below(2) == 0) cfg.burst = any(LIMITS, 9);
                if (below(2) == 0) cfg.sub_windows = (uint32_t)any(SUB_WINDOWS, 9);
                cfg.capacity = CAPACITIES[below(11)];
                if (below(8) == 0) cfg.overflow = (uint32_t)below(4);
                if (below(16) == 0) cfg.clock = (uint32_t)below(3);
            }
            ratecell_limiter *out;
            memset(&out, SENTINEL, sizeof out);
            ratecell_status s = ratecell_limiter_new(below(40) == 0 ? NULL : &cfg,
                                                     below(40) == 0 ? NULL : &out);
            EXPECT(valid_status(s));
            if (s == RATECELL_OK) {
                made++;
                ratecell_config back;
                EXPECT(ratecell_limiter_config(out, &back) == RATECELL_OK);
                EXPECT(back.limit == cfg.limit && back.capacity == cfg.capacity);
                ratecell_limiter_free(slots[slot]);
                slots[slot] = out;
            } else {
                refused++;
                EXPECT(untouched(&out, sizeof out));
            }
            break;
        }
        case 1: /* free */
            if (below(4) == 0) {
                ratecell_limiter_free(slots[slot]);
                slots[slot] = NULL;
            }
            break;
        case 2:
        case 3:
        case 4: { /* check */
            struct ratecell_request r;
            ratecell_status shape = a_request(&r, l, bytes, sizeof bytes);
            const struct ratecell_request *rp = below(40) == 0 ? NULL : &r;
            ratecell_decision *out = below(40) == 0 ? NULL : &d;
            ratecell_status s = ratecell_check(l, rp, out);
            after(s, &d);
            EXPECT(s == expected(l, rp, shape, out));
            checks++;
            break;
        }
        case 5: { /* check_each */
            struct ratecell_request r;
            ratecell_status shape = a_request(&r, l, bytes, sizeof bytes);
            const struct ratecell_request *rp = below(40) == 0 ? NULL : &r;
            ratecell_multi_decision m;
            memset(&m, SENTINEL, sizeof m);
            ratecell_multi_decision *out = below(40) == 0 ? NULL : &m;
            ratecell_status s = ratecell_check_each(l, rp, out);
            EXPECT(valid_status(s));
            EXPECT(s == expected(l, rp, shape, out));
            if (s == RATECELL_OK) {
                coherent_multi(&m);
            } else {
                EXPECT(untouched(&m, sizeof m));
            }
            checks++;
            break;
        }
        case 6: { /* reset: the request read as a check reads it, but for
                   * the tier, which ratecell_reset does not read (its doc) */
            struct ratecell_request r;
            ratecell_status shape = a_request(&r, l, bytes, sizeof bytes);
            if (shape == RATECELL_INVALID_TIER) shape = RATECELL_OK; /* checked last */
            const struct ratecell_request *rp = below(40) == 0 ? NULL : &r;
            ratecell_status s = ratecell_reset(l, rp);
            EXPECT(valid_status(s));
            EXPECT(s == expected(l, rp, shape, &r));
            break;
        }
        case 7:
        case 8: {
            size_t n = (size_t)below(MAX_BATCH + 1);
            int bad_tier = 0;
            for (size_t i = 0; i < n; i++) {
                keys[i] = below(8);
                costs[i] = any(COSTS, 10);
                tiers[i] = below(8) == 0 ? a_tier() : 0;
                if (l != NULL && tiers[i] >= ratecell_limiter_tiers(l)) bad_tier = 1;
            }
            memset(allowed, SENTINEL, sizeof allowed);
            memset(decisions, SENTINEL, sizeof decisions);
            struct ratecell_batch b;
            ratecell_batch_init(&b);
            b.size = a_size((uint32_t)sizeof b);
            b.n = n;
            b.keys = keys;
            b.costs = below(2) ? costs : NULL;
            b.tiers = below(2) ? tiers : NULL;
            b.at_ns = below(2) ? RATECELL_NOW : a_time();
            uint8_t *a = allowed;
            int impossible = 0;
            switch (below(12)) {
            case 0: b.keys = NULL; break;
            case 1: a = NULL; break;
            case 2: b.n = SIZE_MAX - (size_t)below(3); impossible = 1; break;
            case 3: b.n = SIZE_MAX / 48 + 1; impossible = 1; break;
            default: break;
            }
            const struct ratecell_batch *bp = below(40) == 0 ? NULL : &b;
            ratecell_decision *ds = below(2) ? decisions : NULL;
            ratecell_status s = ratecell_check_batch(l, bp, a, ds);
            EXPECT(valid_status(s));
            if (s == RATECELL_OK) {
                for (size_t i = 0; i < n; i++) {
                    EXPECT(allowed[i] <= 1);
                    if (ds != NULL) {
                        coherent(&decisions[i]);
                        EXPECT(decisions[i].allowed == (allowed[i] == 1));
                    }
                }
            } else {
                EXPECT(untouched(allowed, sizeof allowed));
                EXPECT(untouched(decisions, sizeof decisions));
            }
            if (l != NULL && bp != NULL) {
                if (b.size != sizeof b || impossible) {
                    EXPECT(s == RATECELL_INVALID_LENGTH);
                } else if (b.n > 0 && b.keys == NULL) {
                    EXPECT(s == RATECELL_NULL_ARGUMENT);
                } else if (b.tiers != NULL && bad_tier) {
                    EXPECT(s == RATECELL_INVALID_TIER);
                } else if (b.n > 0 && a == NULL) {
                    EXPECT(s == RATECELL_NULL_ARGUMENT);
                } else {
                    EXPECT(s == RATECELL_OK);
                }
            }
            checks++;
            break;
        }
        case 9: { /* acquire, with a short time-out to stay bounded */
            uint64_t timeout = below(4) == 0 ? below(1000000) : 0;
            struct ratecell_request r;
            ratecell_status shape = a_request(&r, l, bytes, sizeof bytes);
            ratecell_status s = ratecell_acquire(l, &r, timeout, &d);
            after(s, &d);
            ratecell_status want = expected(l, &r, shape, &d);
            if (want == RATECELL_OK) {
                EXPECT(s == RATECELL_OK || s == RATECELL_TIMED_OUT ||
                       s == RATECELL_COST_EXCEEDS_LIMIT);
            } else {
                EXPECT(s == want);
            }
            checks++;
            break;
        }
        case 10: { /* build: several limits, tiers, a shared path that cannot open,
                    * states out of range */
            ratecell_config cfgs[RATECELL_MAX_LIMITS * 3];
            size_t n_limits = below(8) == 0 ? (size_t)below(RATECELL_MAX_LIMITS + 2)
                                            : 1 + (size_t)below(3);
            size_t n_tiers = below(3) == 0 ? 0 : (size_t)below(4);
            if (below(16) == 0) n_tiers = below(2) ? RATECELL_MAX_TIERS + 1 : next();
            uint32_t alg = 1 + (uint32_t)below(5);
            uint64_t capacity = below(6) == 0 ? 0 : 1 + below(64);
            for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
                /* The same limit i in every tier, another limit per tier. */
                size_t limit_i = i % (n_limits == 0 ? 1 : n_limits);
                ratecell_config_init(&cfgs[i], alg, 1 + limit_i + i / 8,
                                     UINT64_C(60000000) * (1 + limit_i));
                cfgs[i].capacity = capacity;
                if (below(64) == 0) cfgs[i].limit = any(LIMITS, 9);
            }
            struct ratecell_options o;
            ratecell_options_init(&o);
            o.size = a_size((uint32_t)sizeof o);
            o.configs = below(40) == 0 ? NULL : cfgs;
            o.n_limits = n_limits;
            o.n_tiers = n_tiers;
            if (below(16) == 0) {
                o.states = RATECELL_STATES_SHARED;
                o.shared_path = "/nonexistent-ratecell-fuzz/region";
                o.shared_mode = (uint32_t)below(01000);
            }
            if (below(32) == 0) {
                o.states = (uint32_t)next();
            }
            size_t rows = n_tiers == 0 ? 1 : n_tiers;
            if (n_limits * rows > sizeof cfgs / sizeof cfgs[0] && o.configs != NULL &&
                o.size == sizeof o && n_limits <= RATECELL_MAX_LIMITS &&
                n_tiers <= RATECELL_MAX_TIERS) {
                break; /* more configs than the array holds: not a call to make */
            }
            ratecell_limiter *out;
            memset(&out, SENTINEL, sizeof out);
            ratecell_limiter **outp = below(40) == 0 ? NULL : &out;
            ratecell_status s = ratecell_limiter_build(below(40) == 0 ? NULL : &o, outp);
            EXPECT(valid_status(s));
            if (s == RATECELL_OK) {
                made++;
                EXPECT(o.shared_path == NULL && o.states == RATECELL_STATES_FRESH);
                EXPECT(ratecell_limiter_tiers(out) == (n_tiers == 0 ? 1 : n_tiers));
                ratecell_limiter_free(slots[slot]);
                slots[slot] = out;
            } else {
                refused++;
                EXPECT(untouched(&out, sizeof out));
                if (outp != NULL && o.size != sizeof o && s != RATECELL_NULL_ARGUMENT)
                    EXPECT(s == RATECELL_INVALID_LENGTH);
            }
            break;
        }
        case 11: {
            struct ratecell_stats st;
            memset(&st, SENTINEL, sizeof st);
            ratecell_status s = ratecell_stats(l, &st);
            EXPECT(valid_status(s));
            if (s == RATECELL_OK) {
                EXPECT(st.checks == st.allowed + st.denied);
            } else {
                EXPECT(untouched(&st, sizeof st));
            }
            break;
        }
        case 12:
            if (l == NULL) {
                EXPECT(ratecell_now_ns(l) == 0);
            } else {
                EXPECT(ratecell_now_ns(l) > T0 / 2);
            }
            break;
        case 13: {
            const char *text = ratecell_status_str((uint32_t)(below(2) ? below(20) : next()));
            EXPECT(text != NULL && strlen(text) > 0);
            const char *name = ratecell_algorithm_name((uint32_t)(below(2) ? below(10) : next()));
            if (name != NULL) {
                ratecell_algorithm back;
                EXPECT(ratecell_algorithm_from_name((const uint8_t *)name, strlen(name), &back) ==
                       RATECELL_OK);
            }
            break;
        }
        case 14: {
            ratecell_algorithm a;
            memset(&a, SENTINEL, sizeof a);
            ratecell_status s = ratecell_algorithm_from_name(below(8) == 0 ? NULL : bytes,
                                                             (size_t)below(16), &a);
            EXPECT(valid_status(s));
            if (s != RATECELL_OK) {
                EXPECT(untouched(&a, sizeof a));
            }
            break;
        }
        case 15: { /* the yes/no fast path */
            ratecell_status s = ratecell_allow(l, below(2) ? below(16) : next());
            if (l == NULL) {
                EXPECT(s == RATECELL_NULL_ARGUMENT);
            } else {
                EXPECT(s == RATECELL_OK || s == RATECELL_DENIED);
            }
            checks++;
            break;
        }
        default: {
            ratecell_config cfg;
            memset(&cfg, SENTINEL, sizeof cfg);
            ratecell_status s = ratecell_limiter_config(l, &cfg);
            EXPECT(valid_status(s));
            if (s != RATECELL_OK) {
                EXPECT(untouched(&cfg, sizeof cfg));
            }
            break;
        }
        }
    }
    for (size_t i = 0; i < SLOTS; i++) {
        ratecell_limiter_free(slots[i]);
    }
    printf("fuzz_abi: %" PRIu64 " limiters made, %" PRIu64 " configs refused, %" PRIu64
           " checks, %" PRIu64 " failures\n",
           made, refused, checks, failures);
    EXPECT(made > 0 && refused > 0);
    printf("%d passed, %d failed\n", failures == 0 ? 1 : 0, failures == 0 ? 0 : 1);
    return failures == 0 ? 0 : 1;
}
