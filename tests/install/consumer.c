/* A C program built against an installed ratecell, the way a user builds
 * one: `cc app.c $(pkg-config --cflags --libs ratecell)`. Run by
 * scripts/install-tests.sh. Checks decisions at explicit times, so the
 * output does not depend on the clock; prints "N passed, M failed". */
#include <ratecell.h>

#include <stdio.h>
#include <string.h>

static int passed, failed;

static void expect(int ok, const char *what) {
    if (ok) {
        passed++;
    } else {
        failed++;
        fprintf(stderr, "FAILED: %s\n", what);
    }
}

/* One request of cost 1 for `key` at `at_ns`, checked. */
static ratecell_status check_at(ratecell_limiter *limiter, uint64_t key, uint64_t at_ns,
                                ratecell_decision *d) {
    ratecell_request r;
    ratecell_request_init(&r);
    r.key_id = key;
    r.cost = 1;
    r.at_ns = at_ns;
    return ratecell_check(limiter, &r, d);
}

int main(void) {
    const uint64_t second = 1000000000u, t0 = 1700000000u * second;
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", RATECELL_VERSION_MAJOR, RATECELL_VERSION_MINOR,
             RATECELL_VERSION_PATCH);
    expect(strcmp(ratecell_version(), version) == 0, "the loaded library is the header's version");

    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_FIXED_WINDOW, 3, second);
    ratecell_limiter *limiter = NULL;
    expect(ratecell_limiter_new(&cfg, &limiter) == RATECELL_OK && limiter != NULL, "limiter_new");
    if (limiter == NULL) {
        printf("%d passed, %d failed\n", passed, failed);
        return 1;
    }
    ratecell_decision d;
    int admitted = 0;
    for (int i = 0; i < 5; i++) {
        expect(check_at(limiter, 7, t0, &d) == RATECELL_OK, "check");
        admitted += d.allowed;
    }
    expect(admitted == 3, "3 of 5 admitted in one window of limit 3");
    expect(!d.allowed && d.retry_after_ns == second, "the last is denied until the next window");
    expect(check_at(limiter, 7, t0 + second, &d) == RATECELL_OK && d.allowed,
           "admitted in the next window");
    ratecell_limiter_free(limiter);

    cfg.limit = 0;
    expect(ratecell_limiter_new(&cfg, &limiter) == RATECELL_INVALID_LIMIT, "limit 0 is refused");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
