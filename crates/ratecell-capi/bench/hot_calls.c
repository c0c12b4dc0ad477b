/* The C ABI's hot calls, one case a run, for callgrind
 * (scripts/hot-instructions.sh): each case's loop is in a `measured_*`
 * function, so `--toggle-collect='measured*'` counts the calls and the
 * loop that makes them, nothing of the setup.
 *
 *   hot_calls CASE [N]    CASE: check, allow, allow-keyed, leases, denials
 *
 * Keyed cases read their table from a snapshot (made by the first run and
 * kept in $HOT_CALLS_DIR, default /tmp), so every build measured probes
 * the same slots under the same hash seed.
 *
 * RATECELL_INT32_CALLS builds it against the ABI before `ratecell_allow`,
 * `ratecell_leases_check` and `ratecell_denials_check` returned a
 * `ratecell_status` (and the last two took the time apart from the
 * request), to measure that change against the one before it. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ratecell.h"

#define T0 1800000000000000000ull
#define HOUR 3600000000000ull

static void must(ratecell_status s, const char *what) {
    if (s != RATECELL_OK) {
        fprintf(stderr, "hot_calls: %s: status %d\n", what, (int)s);
        exit(1);
    }
}

static ratecell_config gcra(uint64_t capacity) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_GCRA, 1000000000ull, HOUR);
    cfg.capacity = capacity;
    return cfg;
}

/* Whether ratecell_allow's answer admits. */
#ifdef RATECELL_INT32_CALLS
#define ADMITTED(answer) ((answer) == 1)
#else
#define ADMITTED(answer) ((answer) == RATECELL_OK)
#endif

/* A keyed GCRA limiter over 1024 keys, every key placed, from the
 * snapshot `name` under $HOT_CALLS_DIR (made on the first run). */
static ratecell_limiter *keyed_1k(const char *name) {
    const char *dir = getenv("HOT_CALLS_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "/tmp", name);
    ratecell_config cfg = gcra(1024);
    ratecell_options o;
    ratecell_options_init(&o);
    o.configs = &cfg;
    o.n_limits = 1;
    ratecell_limiter *l = NULL;
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        fclose(f);
#ifdef RATECELL_INT32_CALLS
        must(ratecell_limiter_restore(&o, path, &l), "restore");
#else
        o.states = RATECELL_STATES_SNAPSHOT;
        o.path = path;
        must(ratecell_limiter_build(&o, &l), "build from the snapshot");
#endif
        return l;
    }
    must(ratecell_limiter_new(&cfg, &l), "new");
    for (uint64_t k = 0; k < 1024; k++) ratecell_allow(l, k);
    must(ratecell_snapshot_save(l, path), "save");
    return l;
}

/* A request of cost 1 at `at_ns`, key 0. */
static ratecell_request request_at(uint64_t at_ns) {
    ratecell_request r;
    ratecell_request_init(&r);
    r.at_ns = at_ns;
    return r;
}

__attribute__((noinline)) static uint64_t measured_check(ratecell_limiter *l, uint64_t n) {
    uint64_t a = 0;
    ratecell_request r = request_at(T0);
    ratecell_decision d;
    for (uint64_t i = 0; i < n; i++) {
        r.key_id = i & 1023;
        if (ratecell_check(l, &r, &d) == RATECELL_OK) a += d.allowed;
    }
    return a;
}

__attribute__((noinline)) static uint64_t measured_allow(ratecell_limiter *l, uint64_t n) {
    uint64_t a = 0;
    for (uint64_t i = 0; i < n; i++) a += ADMITTED(ratecell_allow(l, i & 1023));
    return a;
}

__attribute__((noinline)) static uint64_t measured_leases(ratecell_leases *l, uint64_t n) {
    uint64_t a = 0;
    ratecell_request r = request_at(T0);
    ratecell_decision d;
    for (uint64_t i = 0; i < n; i++) {
        r.key_id = i & 1023;
        ratecell_grant *g = NULL;
#ifdef RATECELL_INT32_CALLS
        if (ratecell_leases_check(l, &r, RATECELL_NOW, &d, &g) == RATECELL_STEP_DECIDED) a += d.allowed;
#else
        uint32_t step = 0;
        if (ratecell_leases_check(l, &r, &step, &d, &g) == RATECELL_OK && step == RATECELL_STEP_DECIDED)
            a += d.allowed;
#endif
        if (g != NULL) ratecell_grant_free(g);
    }
    return a;
}

__attribute__((noinline)) static uint64_t measured_denials(ratecell_denials *c, uint64_t n) {
    uint64_t a = 0;
    ratecell_request r = request_at(T0 + 1);
    ratecell_decision d;
    for (uint64_t i = 0; i < n; i++) {
        r.key_id = i & 1023;
#ifdef RATECELL_INT32_CALLS
        a += ratecell_denials_check(c, &r, RATECELL_NOW, &d) == 1;
#else
        bool found = false;
        if (ratecell_denials_check(c, &r, &found, &d) == RATECELL_OK) a += found;
#endif
    }
    return a;
}

/* A lease store over 1024 keys, each holding a large grant. */
static ratecell_leases *leases_1k(void) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_FIXED_WINDOW, 1000000000ull, 86400000000000ull);
    cfg.capacity = 4096;
    ratecell_lease_options o;
    ratecell_lease_options_init(&o);
    o.send_at = 1;
    o.max_grant = 1000000;
    o.skew_ns = 0;
    ratecell_leases *l = NULL;
    must(ratecell_leases_new(&cfg, &o, &l), "leases");
    const uint64_t day = 86400000000000ull;
    for (uint64_t k = 0; k < 1024; k++) {
        ratecell_request r = request_at(T0);
        r.key_id = k;
        ratecell_decision d;
        ratecell_grant *g = NULL;
#ifdef RATECELL_INT32_CALLS
        ratecell_leases_check(l, &r, RATECELL_NOW, &d, &g);
#else
        uint32_t step = 0;
        ratecell_leases_check(l, &r, &step, &d, &g);
#endif
        if (g != NULL) {
            /* The server's reply: a grant of 1M units for this day. */
            int64_t reply[5] = {1000000, (int64_t)(T0 / day * day + day), 0, 1000000000, 999000000};
            ratecell_completion done;
            ratecell_leases_complete(l, g, reply, 5, T0, &done);
            ratecell_grant_free(g);
        }
    }
    return l;
}

static ratecell_denials *denials_1k(void) {
    ratecell_denials *c = NULL;
    must(ratecell_denials_new(4096, RATECELL_CLOCK_TSC, &c), "denials");
    ratecell_decision denied = {false, 5, 0, HOUR, HOUR, 0};
    for (uint64_t k = 0; k < 1024; k++) {
        ratecell_request r = request_at(T0);
        r.key_id = k;
#ifdef RATECELL_INT32_CALLS
        ratecell_denials_remember(c, &r, RATECELL_NOW, &denied);
#else
        ratecell_denials_remember(c, &r, &denied);
#endif
    }
    return c;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: hot_calls check|allow|allow-keyed|leases|denials [N]\n");
        return 2;
    }
    const char *c = argv[1];
    uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 200000;
    uint64_t a;
    if (!strcmp(c, "check")) {
        a = measured_check(keyed_1k("hot_calls-check.snap"), n);
    } else if (!strcmp(c, "allow")) {
        ratecell_config cfg = gcra(0);
        ratecell_limiter *l = NULL;
        must(ratecell_limiter_new(&cfg, &l), "new");
        a = measured_allow(l, n);
    } else if (!strcmp(c, "allow-keyed")) {
        a = measured_allow(keyed_1k("hot_calls-allow.snap"), n);
    } else if (!strcmp(c, "leases")) {
        a = measured_leases(leases_1k(), n);
    } else if (!strcmp(c, "denials")) {
        a = measured_denials(denials_1k(), n);
    } else {
        fprintf(stderr, "hot_calls: no case %s\n", c);
        return 2;
    }
    printf("%s: %llu of %llu\n", c, (unsigned long long)a, (unsigned long long)n);
    return 0;
}
