/*
 * C11 tests of ratecell's snapshots through the C ABI: save and restore of
 * every algorithm, direct and keyed; a configuration that differs;
 * missing, damaged and truncated files; the periodic saver; and a child
 * process killed with SIGKILL while it saves, whose file still restores.
 *
 * Built and run by scripts/c-tests.sh. Takes a scratch directory as its
 * argument (default: /tmp). Prints "N passed, M failed" last.
 */
#define _POSIX_C_SOURCE 200809L

#include "ratecell.h"
#include "requests.h"

#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SECOND UINT64_C(1000000000)
#define T0 (UINT64_C(1700000000) * SECOND)

static const uint32_t ALGORITHMS[] = {
    RATECELL_ALGORITHM_GCRA,           RATECELL_ALGORITHM_LEAKY_BUCKET,
    RATECELL_ALGORITHM_TOKEN_BUCKET,   RATECELL_ALGORITHM_FIXED_WINDOW,
    RATECELL_ALGORITHM_SLIDING_WINDOW, RATECELL_ALGORITHM_BUCKETED_WINDOW,
    RATECELL_ALGORITHM_SLIDING_LOG,
};
#define N_ALGORITHMS (sizeof ALGORITHMS / sizeof ALGORITHMS[0])

static char dir[512] = "/tmp";

static void path_of(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/ratecell-c-%ld-%s", dir, (long)getpid(), name);
}

static ratecell_config config(uint32_t algorithm, uint64_t capacity) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, algorithm, 5, SECOND);
    cfg.capacity = capacity;
    return cfg;
}

static ratecell_decision at(const ratecell_limiter *l, uint64_t key, uint64_t cost,
                            uint64_t now) {
    ratecell_decision d;
    memset(&d, 0, sizeof d);
    CHECK(rq_check(l, key, cost, now, &d) == RATECELL_OK);
    return d;
}

static int same(ratecell_decision a, ratecell_decision b) {
    return a.allowed == b.allowed && a.limit == b.limit && a.remaining == b.remaining &&
           a.retry_after_ns == b.retry_after_ns && a.reset_after_ns == b.reset_after_ns &&
           a.wait_ns == b.wait_ns;
}

/* A trace up to T0 + 1 s is saved, then the rest from there decides alike in
 * the original and in both restored forms. */
static void test_round_trip_every_algorithm(void) {
    char path[600];
    path_of(path, sizeof path, "round.snap");
    for (size_t a = 0; a < N_ALGORITHMS; a++) {
        for (uint64_t capacity = 0; capacity <= 100; capacity += 100) {
            ratecell_config cfg = config(ALGORITHMS[a], capacity);
            ratecell_limiter *l = NULL;
            CHECK(ratecell_limiter_new(&cfg, &l) == RATECELL_OK);
            uint64_t t = T0;
            for (uint64_t i = 0; i < 200; i++) {
                t += (i * 7919) % (SECOND / 10);
                at(l, i % 13, i % 3, t);
            }
            CHECK(ratecell_snapshot_save_at(l, path, t) == RATECELL_OK);
            ratecell_limiter *r1 = NULL, *r2 = NULL;
            CHECK(rq_restore_saved(path, &r1) == RATECELL_OK);
            CHECK(rq_restore(&cfg, 1, 0, path, &r2) == RATECELL_OK);
            int agree = r1 != NULL && r2 != NULL;
            for (uint64_t i = 0; agree && i < 300; i++) {
                t += (i * 104729) % (SECOND / 10);
                ratecell_decision d = at(l, i % 13, i % 3, t);
                agree = same(d, at(r1, i % 13, i % 3, t)) && same(d, at(r2, i % 13, i % 3, t));
            }
            if (!agree) {
                fprintf(stderr, "algorithm %u capacity %" PRIu64 " disagrees\n",
                        ALGORITHMS[a], capacity);
            }
            CHECK(agree);
            ratecell_limiter_free(r1);
            ratecell_limiter_free(r2);
            ratecell_limiter_free(l);
        }
    }
    remove(path);
}

static void test_a_different_configuration_is_refused(void) {
    char path[600];
    path_of(path, sizeof path, "mismatch.snap");
    ratecell_config cfg = config(RATECELL_ALGORITHM_GCRA, 100);
    ratecell_limiter *l = NULL;
    CHECK(ratecell_limiter_new(&cfg, &l) == RATECELL_OK);
    CHECK(ratecell_snapshot_save(l, path) == RATECELL_OK);
    ratecell_limiter *r = NULL;
    ratecell_config other = cfg;
    other.limit = 6;
    CHECK(rq_restore(&other, 1, 0, path, &r) == RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    other = cfg;
    other.capacity = 0;
    CHECK(rq_restore(&other, 1, 0, path, &r) == RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    other = cfg;
    other.limit = 0;
    CHECK(rq_restore(&other, 1, 0, path, &r) == RATECELL_INVALID_LIMIT);
    CHECK(r == NULL);
    /* The overflow policy may differ: the caller's applies. */
    other = cfg;
    other.overflow = RATECELL_OVERFLOW_ALLOW;
    CHECK(rq_restore(&other, 1, 0, path, &r) == RATECELL_OK);
    ratecell_limiter_free(r);
    ratecell_limiter_free(l);
    remove(path);
}

/* States from a snapshot or a persisted file are read with the rest of the
 * options (the size first); a field the states do not read, or states out
 * of range, are refused by name (RATECELL_INVALID_STATES) before any file
 * or region is touched; nothing is written on failure. */
static void test_states_are_read_with_the_options(void) {
    char path[600], region[600];
    path_of(path, sizeof path, "options.snap");
    path_of(region, sizeof region, "options.region");
    remove(region);
    ratecell_config cfg = config(RATECELL_ALGORITHM_GCRA, 100);
    cfg.clock = RATECELL_CLOCK_COARSE;
    ratecell_limiter *l = NULL;
    CHECK(ratecell_limiter_new(&cfg, &l) == RATECELL_OK);
    CHECK(at(l, 1, 5, T0).allowed);
    CHECK(ratecell_snapshot_save_at(l, path, T0) == RATECELL_OK);
    ratecell_limiter_free(l);

    ratecell_limiter *const sentinel = (ratecell_limiter *)&cfg;
    ratecell_limiter *r = sentinel;
    uint32_t from_file[2] = {RATECELL_STATES_SNAPSHOT, RATECELL_STATES_PERSISTED};
    for (int i = 0; i < 2; i++) {
        struct ratecell_options o = rq_options(&cfg, 1, 0);
        o.states = from_file[i];
        o.path = path;
        o.size += 1;
        CHECK(ratecell_limiter_build(&o, &r) == RATECELL_INVALID_LENGTH);
        o.size -= 1;
        o.shared_path = region;
        CHECK(ratecell_limiter_build(&o, &r) == RATECELL_INVALID_STATES);
        o.shared_path = NULL;
        CHECK(ratecell_limiter_build(&o, NULL) == RATECELL_NULL_ARGUMENT);
        o.path = NULL;
        CHECK(ratecell_limiter_build(&o, &r) == RATECELL_NULL_ARGUMENT);
    }
    struct ratecell_options o = rq_options(&cfg, 1, 0);
    o.states = 4;
    CHECK(ratecell_limiter_build(&o, &r) == RATECELL_INVALID_STATES);
    o.states = RATECELL_STATES_FRESH;
    o.path = path;
    CHECK(ratecell_limiter_build(&o, &r) == RATECELL_INVALID_STATES);
    o.path = NULL;
    o.save_every_ns = SECOND;
    CHECK(ratecell_limiter_build(&o, &r) == RATECELL_INVALID_STATES);
    o.states = RATECELL_STATES_SNAPSHOT;
    o.path = path;
    CHECK(ratecell_limiter_build(&o, &r) == RATECELL_INVALID_STATES);
    CHECK(access(region, F_OK) != 0); /* no region was made */
    CHECK(r == sentinel);

    /* The options' clock is the restored limiter's: key 1 spent all 5. */
    r = NULL;
    CHECK(rq_restore(&cfg, 1, 0, path, &r) == RATECELL_OK);
    ratecell_config got;
    CHECK(r != NULL && ratecell_limiter_config(r, &got) == RATECELL_OK);
    CHECK(got.clock == RATECELL_CLOCK_COARSE);
    CHECK(!at(r, 1, 1, T0).allowed);
    ratecell_limiter_free(r);
    remove(path);
}

static void test_missing_damaged_and_truncated_files_are_refused(void) {
    char path[600], bad[600];
    path_of(path, sizeof path, "good.snap");
    path_of(bad, sizeof bad, "bad.snap");
    ratecell_limiter *r = NULL;
    CHECK(rq_restore_saved(bad, &r) == RATECELL_SNAPSHOT_NOT_FOUND);
    CHECK(rq_restore_saved(NULL, &r) == RATECELL_NULL_ARGUMENT);
    CHECK(ratecell_snapshot_save(NULL, bad) == RATECELL_NULL_ARGUMENT);

    ratecell_config cfg = config(RATECELL_ALGORITHM_SLIDING_LOG, 16);
    ratecell_limiter *l = NULL;
    CHECK(ratecell_limiter_new(&cfg, &l) == RATECELL_OK);
    CHECK(ratecell_snapshot_save(NULL, path) == RATECELL_NULL_ARGUMENT);
    CHECK(ratecell_snapshot_save(l, NULL) == RATECELL_NULL_ARGUMENT);
    at(l, 1, 2, T0);
    at(l, 2, 1, T0);
    CHECK(ratecell_snapshot_save_at(l, path, T0) == RATECELL_OK);
    CHECK(ratecell_snapshot_save(l, "/nonexistent-dir/x.snap") == RATECELL_SNAPSHOT_IO);

    unsigned char buf[4096];
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    size_t n = f != NULL ? fread(buf, 1, sizeof buf, f) : 0;
    if (f != NULL) {
        fclose(f);
    }
    CHECK(n > 120 && n < sizeof buf);
    /* Every truncation, and a flipped bit at every offset. */
    int all_refused = 1;
    for (size_t len = 0; len <= n; len++) {
        for (int flip = 0; flip < 2; flip++) {
            if (flip && len == n) {
                continue;
            }
            unsigned char copy[4096];
            memcpy(copy, buf, n);
            size_t write_len = len;
            if (flip) {
                copy[len] ^= 0x10;
                write_len = n;
            }
            FILE *g = fopen(bad, "wb");
            CHECK(g != NULL);
            if (g == NULL) {
                return;
            }
            CHECK(fwrite(copy, 1, write_len, g) == write_len);
            fclose(g);
            ratecell_status s = rq_restore_saved(bad, &r);
            int expected = (!flip && len == n) ? s == RATECELL_OK
                                               : (s == RATECELL_SNAPSHOT_DAMAGED ||
                                                  s == RATECELL_SNAPSHOT_VERSION);
            if (!expected) {
                fprintf(stderr, "len %zu flip %d: %s\n", len, flip, ratecell_status_str(s));
                all_refused = 0;
            }
            if (s == RATECELL_OK) {
                ratecell_limiter_free(r);
                r = NULL;
            }
        }
    }
    CHECK(all_refused);
    ratecell_limiter_free(l);
    remove(path);
    remove(bad);
}

static void test_persisted_limiter_survives_close_and_open(void) {
    char path[600];
    path_of(path, sizeof path, "persisted.snap");
    remove(path);
    ratecell_config cfg = config(RATECELL_ALGORITHM_TOKEN_BUCKET, 1000);
    cfg.period_ns = 3600 * SECOND;
    ratecell_limiter *p = NULL;
    CHECK(rq_persisted(&cfg, 1, 0, path, 1000000, &p) == RATECELL_OK);
    const ratecell_limiter *l = p;
    uint64_t now = ratecell_now_ns(l);
    for (int i = 0; i < 5; i++) {
        CHECK(at(l, 42, 1, now).allowed);
    }
    CHECK(!at(l, 42, 1, now).allowed);
    CHECK(ratecell_snapshot_save(p, path) == RATECELL_OK);
    CHECK(ratecell_snapshot_stop(p) == RATECELL_OK); /* the last save, reported */
    CHECK(ratecell_snapshot_stop(p) == RATECELL_OK); /* nothing more */
    CHECK(ratecell_snapshot_stop(NULL) == RATECELL_NULL_ARGUMENT);
    ratecell_limiter_free(p);
    ratecell_limiter_free(NULL);

    CHECK(rq_persisted(&cfg, 1, 0, path, 1000000, &p) == RATECELL_OK);
    l = p;
    CHECK(!at(l, 42, 1, now).allowed);
    CHECK(at(l, 43, 1, now).allowed);
    ratecell_limiter_free(p);
    ratecell_config other = cfg;
    other.limit = 7;
    CHECK(rq_persisted(&other, 1, 0, path, 1000000, &p) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    CHECK(ratecell_limiter_build(NULL, &p) == RATECELL_NULL_ARGUMENT);
    remove(path);
}

/* A child saves every millisecond while it checks; it is killed with
 * SIGKILL at varying moments, and the file it leaves restores. */
static void test_sigkill_during_periodic_saves_leaves_a_restorable_file(void) {
    char path[600];
    path_of(path, sizeof path, "killed.snap");
    remove(path);
    ratecell_config cfg = config(RATECELL_ALGORITHM_GCRA, 20000);
    cfg.limit = 1000;
    cfg.period_ns = 3600 * SECOND;
    for (int round = 0; round < 4; round++) {
        fflush(stdout);
        fflush(stderr);
        pid_t child = fork();
        CHECK(child >= 0);
        if (child == 0) {
            ratecell_limiter *p = NULL;
            if (rq_persisted(&cfg, 1, 0, path, 1000000, &p) != RATECELL_OK) {
                _exit(3);
            }
            const ratecell_limiter *l = p;
            for (uint64_t i = 0;; i++) {
                ratecell_decision d;
                rq_check(l, i % 15000, 1, RATECELL_NOW, &d);
            }
        }
        /* Wait (bounded) for a first file, then a little more. */
        for (int i = 0; i < 3000 && access(path, F_OK) != 0; i++) {
            struct timespec ms = {0, 10000000};
            nanosleep(&ms, NULL);
        }
        struct timespec wait = {0, 50000000L + 30000000L * round};
        nanosleep(&wait, NULL);
        CHECK(kill(child, SIGKILL) == 0);
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        ratecell_limiter *r = NULL;
        ratecell_status s = rq_restore(&cfg, 1, 0, path, &r);
        if (s != RATECELL_OK) {
            fprintf(stderr, "round %d: %s\n", round, ratecell_status_str(s));
        }
        CHECK(s == RATECELL_OK);
        struct ratecell_stats st;
        CHECK(r != NULL && ratecell_stats(r, &st) == RATECELL_OK && st.keys_tracked > 0);
        ratecell_limiter_free(r);
    }
    remove(path);
}

/* Several limits (format version 2): saved, restored with the same list and
 * by the file's own, refused with another list (or one limit), truncated
 * files refused, and a periodic saver of several that comes back. */
static void test_several_limits(void) {
    char path[600];
    path_of(path, sizeof path, "multi.snap");
    ratecell_config limits[3];
    ratecell_config_init(&limits[0], RATECELL_ALGORITHM_SLIDING_LOG, 3, SECOND);
    ratecell_config_init(&limits[1], RATECELL_ALGORITHM_GCRA, 10, SECOND);
    ratecell_config_init(&limits[2], RATECELL_ALGORITHM_FIXED_WINDOW, 50, 60 * SECOND);
    for (uint64_t capacity = 0; capacity <= 30; capacity += 30) {
        for (int i = 0; i < 3; i++) {
            limits[i].capacity = capacity;
        }
        ratecell_limiter *l = NULL;
        CHECK(rq_build(limits, 3, 0, &l) == RATECELL_OK);
        for (int i = 0; i < 3; i++) {
            CHECK(at(l, 2, 1, T0).allowed);
        }
        CHECK(ratecell_snapshot_save_at(l, path, T0) == RATECELL_OK);
        ratecell_limiter *r1 = NULL, *r2 = NULL, *r3 = NULL;
        CHECK(rq_restore(limits, 3, 0, path, &r1) == RATECELL_OK);
        CHECK(rq_restore_saved(path, &r2) == RATECELL_OK);
        for (uint64_t t = T0; t < T0 + 2 * SECOND; t += SECOND / 4) {
            ratecell_multi_decision a, b, c;
            CHECK(rq_each(l, 2, 1, t, &a) == RATECELL_OK);
            CHECK(rq_each(r1, 2, 1, t, &b) == RATECELL_OK);
            CHECK(rq_each(r2, 2, 1, t, &c) == RATECELL_OK);
            CHECK(a.count == 3 && b.count == 3 && c.count == 3);
            CHECK(same(a.decision, b.decision) && same(a.decision, c.decision));
            CHECK(a.denied_by == b.denied_by && a.denied_by == c.denied_by);
            for (uint32_t i = 0; i < 3; i++) {
                CHECK(same(a.limits[i], b.limits[i]));
            }
        }
        ratecell_config swapped[3] = {limits[1], limits[0], limits[2]};
        CHECK(rq_restore(swapped, 3, 0, path, &r3) ==
              RATECELL_SNAPSHOT_CONFIG_MISMATCH);
        CHECK(rq_restore(limits, 2, 0, path, &r3) ==
              RATECELL_SNAPSHOT_CONFIG_MISMATCH);
        CHECK(rq_restore(&limits[0], 1, 0, path, &r3) ==
              RATECELL_SNAPSHOT_CONFIG_MISMATCH);
        CHECK(rq_restore(limits, 0, 0, path, &r3) == RATECELL_INVALID_LENGTH);
        CHECK(rq_restore(NULL, 3, 0, path, &r3) == RATECELL_NULL_ARGUMENT);
        CHECK(r3 == NULL);
        ratecell_limiter_free(l);
        ratecell_limiter_free(r1);
        ratecell_limiter_free(r2);
    }
    /* Truncated at every length: refused, never a crash. */
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    unsigned char bytes[4096];
    size_t len = f ? fread(bytes, 1, sizeof bytes, f) : 0;
    if (f) {
        fclose(f);
    }
    CHECK(len > 116 && len < sizeof bytes);
    char cut[600];
    path_of(cut, sizeof cut, "multi-cut.snap");
    for (size_t n = 0; n < len; n += 1) {
        FILE *w = fopen(cut, "wb");
        CHECK(w != NULL);
        if (!w) {
            break;
        }
        fwrite(bytes, 1, n, w);
        fclose(w);
        ratecell_limiter *r = NULL;
        CHECK(rq_restore(limits, 3, 0, cut, &r) == RATECELL_SNAPSHOT_DAMAGED);
        CHECK(r == NULL);
    }
    remove(cut);
    remove(path);
    /* The periodic saver of several limits. */
    ratecell_limiter *p = NULL;
    CHECK(rq_persisted(limits, 3, 0, path, SECOND, &p) == RATECELL_OK);
    const ratecell_limiter *pl = p;
    uint64_t now = ratecell_now_ns(pl);
    for (int i = 0; i < 3; i++) {
        CHECK(at(pl, 5, 1, now).allowed);
    }
    ratecell_limiter_free(p);
    p = NULL;
    CHECK(rq_persisted(limits, 3, 0, path, SECOND, &p) == RATECELL_OK);
    pl = p;
    CHECK(!at(pl, 5, 1, now).allowed);
    ratecell_limiter_free(p);
    ratecell_limiter *q = NULL;
    CHECK(rq_persisted(&limits[0], 1, 0, path, SECOND, &q) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    CHECK(q == NULL);
    remove(path);
}

int main(int argc, char **argv) {
    if (argc > 1) {
        snprintf(dir, sizeof dir, "%s", argv[1]);
    }
    RUN(test_round_trip_every_algorithm);
    RUN(test_a_different_configuration_is_refused);
    RUN(test_states_are_read_with_the_options);
    RUN(test_missing_damaged_and_truncated_files_are_refused);
    RUN(test_persisted_limiter_survives_close_and_open);
    RUN(test_sigkill_during_periodic_saves_leaves_a_restorable_file);
    RUN(test_several_limits);
    return harness_finish();
}
