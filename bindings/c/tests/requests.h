/*
 * Shorthands for the C tests: one line per request, built on the ABI's one
 * request shape (ratecell_request_init, then the fields that differ), so a
 * test reads as the request it makes. Every helper passes its status
 * through unchanged; the tests of the structs themselves (sizes, NULL
 * key bytes, tiers) fill them by hand.
 *
 * `at` is UNIX nanoseconds or RATECELL_NOW (the limiter's clock).
 */
#ifndef RATECELL_TEST_REQUESTS_H
#define RATECELL_TEST_REQUESTS_H

#include "ratecell.h"

static inline struct ratecell_request rq_key(uint64_t key, uint32_t tier, uint64_t cost, uint64_t at) {
    struct ratecell_request r;
    ratecell_request_init(&r);
    r.key_id = key;
    r.tier = tier;
    r.cost = cost;
    r.at_ns = at;
    return r;
}

static inline struct ratecell_request rq_bytes(const void *key, size_t len, uint32_t tier,
                                        uint64_t cost, uint64_t at) {
    struct ratecell_request r = rq_key(0, tier, cost, at);
    r.key_bytes = (const uint8_t *)key;
    r.key_len = len;
    return r;
}

/* ratecell_check of the number key `key`. */
static inline ratecell_status rq_check(const ratecell_limiter *l, uint64_t key, uint64_t cost,
                                       uint64_t at, ratecell_decision *out) {
    struct ratecell_request r = rq_key(key, 0, cost, at);
    return ratecell_check(l, &r, out);
}

static inline ratecell_status rq_check_tier(const ratecell_limiter *l, uint64_t key,
                                            uint32_t tier, uint64_t cost, uint64_t at,
                                            ratecell_decision *out) {
    struct ratecell_request r = rq_key(key, tier, cost, at);
    return ratecell_check(l, &r, out);
}

/* ratecell_check of the byte key `key[0 .. len)`. */
static inline ratecell_status rq_check_bytes(const ratecell_limiter *l, const void *key,
                                             size_t len, uint64_t cost, uint64_t at,
                                             ratecell_decision *out) {
    struct ratecell_request r = rq_bytes(key, len, 0, cost, at);
    return ratecell_check(l, &r, out);
}

static inline ratecell_status rq_check_bytes_tier(const ratecell_limiter *l, const void *key,
                                                  size_t len, uint32_t tier, uint64_t cost,
                                                  uint64_t at, ratecell_decision *out) {
    struct ratecell_request r = rq_bytes(key, len, tier, cost, at);
    return ratecell_check(l, &r, out);
}

static inline ratecell_status rq_each(const ratecell_limiter *l, uint64_t key, uint64_t cost,
                                      uint64_t at, ratecell_multi_decision *out) {
    struct ratecell_request r = rq_key(key, 0, cost, at);
    return ratecell_check_each(l, &r, out);
}

static inline ratecell_status rq_each_tier(const ratecell_limiter *l, uint64_t key,
                                           uint32_t tier, uint64_t cost, uint64_t at,
                                           ratecell_multi_decision *out) {
    struct ratecell_request r = rq_key(key, tier, cost, at);
    return ratecell_check_each(l, &r, out);
}

static inline ratecell_status rq_each_bytes(const ratecell_limiter *l, const void *key,
                                            size_t len, uint64_t cost, uint64_t at,
                                            ratecell_multi_decision *out) {
    struct ratecell_request r = rq_bytes(key, len, 0, cost, at);
    return ratecell_check_each(l, &r, out);
}

/* ratecell_check_batch; `tiers` and `costs` may be NULL. */
static inline ratecell_status rq_batch(const ratecell_limiter *l, const uint64_t *keys,
                                       const uint32_t *tiers, const uint64_t *costs, size_t n,
                                       uint64_t at, uint8_t *allowed,
                                       ratecell_decision *decisions) {
    struct ratecell_batch b;
    ratecell_batch_init(&b);
    b.n = n;
    b.keys = keys;
    b.costs = costs;
    b.tiers = tiers;
    b.at_ns = at;
    return ratecell_check_batch(l, &b, allowed, decisions);
}

static inline ratecell_status rq_acquire(const ratecell_limiter *l, uint64_t key, uint32_t tier,
                                         uint64_t cost, uint64_t timeout_ns,
                                         ratecell_decision *out) {
    struct ratecell_request r = rq_key(key, tier, cost, RATECELL_NOW);
    return ratecell_acquire(l, &r, timeout_ns, out);
}

static inline ratecell_status rq_acquire_bytes(const ratecell_limiter *l, const void *key,
                                               size_t len, uint32_t tier, uint64_t cost,
                                               uint64_t timeout_ns, ratecell_decision *out) {
    struct ratecell_request r = rq_bytes(key, len, tier, cost, RATECELL_NOW);
    return ratecell_acquire(l, &r, timeout_ns, out);
}

static inline ratecell_status rq_reset(const ratecell_limiter *l, uint64_t key) {
    struct ratecell_request r = rq_key(key, 0, 1, RATECELL_NOW);
    return ratecell_reset(l, &r);
}

static inline ratecell_status rq_reset_bytes(const ratecell_limiter *l, const void *key,
                                             size_t len) {
    struct ratecell_request r = rq_bytes(key, len, 0, 1, RATECELL_NOW);
    return ratecell_reset(l, &r);
}

/* The options of `n_tiers` (0: none) tiers of `n_limits` limits. */
static inline struct ratecell_options rq_options(const ratecell_config *configs, size_t n_limits,
                                                 size_t n_tiers) {
    struct ratecell_options o;
    ratecell_options_init(&o);
    o.configs = configs;
    o.n_limits = n_limits;
    o.n_tiers = n_tiers;
    return o;
}

/* ratecell_limiter_build of `n_tiers` (0: none) tiers of `n_limits` limits. */
static inline ratecell_status rq_build(const ratecell_config *configs, size_t n_limits,
                                       size_t n_tiers, ratecell_limiter **out) {
    struct ratecell_options o = rq_options(configs, n_limits, n_tiers);
    return ratecell_limiter_build(&o, out);
}

/* ratecell_limiter_build of `n_tiers` (0: none) tiers of `n_limits`
 * limits, their states from the snapshot file at `path`. */
static inline ratecell_status rq_restore(const ratecell_config *configs, size_t n_limits,
                                         size_t n_tiers, const char *path,
                                         ratecell_limiter **out) {
    struct ratecell_options o = rq_options(configs, n_limits, n_tiers);
    o.states = RATECELL_STATES_SNAPSHOT;
    o.path = path;
    return ratecell_limiter_build(&o, out);
}

/* ratecell_limiter_build of the limits and states saved in the snapshot
 * file at `path` (no limit given: the file's own). */
static inline ratecell_status rq_restore_saved(const char *path, ratecell_limiter **out) {
    return rq_restore(NULL, 0, 0, path, out);
}

/* ratecell_limiter_build of `n_tiers` (0: none) tiers of `n_limits`
 * limits, persisted: restored from `path` if the file exists, saved there
 * every `every_ns`. */
static inline ratecell_status rq_persisted(const ratecell_config *configs, size_t n_limits,
                                           size_t n_tiers, const char *path, uint64_t every_ns,
                                           ratecell_limiter **out) {
    struct ratecell_options o = rq_options(configs, n_limits, n_tiers);
    o.states = RATECELL_STATES_PERSISTED;
    o.path = path;
    o.save_every_ns = every_ns;
    return ratecell_limiter_build(&o, out);
}

/* ratecell_limiter_build of one limit in the shared region at `path`. */
static inline ratecell_status rq_open_shared(const char *path, const ratecell_config *cfg,
                                             uint32_t mode, ratecell_limiter **out) {
    struct ratecell_options o;
    ratecell_options_init(&o);
    o.configs = cfg;
    o.states = RATECELL_STATES_SHARED;
    o.shared_path = path;
    o.shared_mode = mode;
    return ratecell_limiter_build(&o, out);
}

#endif /* RATECELL_TEST_REQUESTS_H */
