/*
 * ratecell from C: 5 requests per second per user with a sliding window,
 * checked for three users at one instant. Built and run by scripts/c-tests.sh.
 */
#include <inttypes.h>
#include <stdio.h>

#include "ratecell.h"

int main(void) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_SLIDING_WINDOW, 5, 1000000000);
    cfg.capacity = 10000; /* one state per user, up to 10 000 users */

    ratecell_limiter *limiter = NULL;
    ratecell_status status = ratecell_limiter_new(&cfg, &limiter);
    if (status != RATECELL_OK) {
        fprintf(stderr, "ratecell_limiter_new: %s\n", ratecell_status_str(status));
        return 1;
    }

    struct ratecell_request req;
    ratecell_request_init(&req); /* key 0, cost 1, the limiter's clock, tier 0 */
    req.at_ns = ratecell_now_ns(limiter); /* one instant for every check */
    for (uint64_t user = 1; user <= 3; user++) {
        int admitted = 0;
        ratecell_decision d;
        req.key_id = user;
        for (int i = 0; i < 8; i++) {
            if (ratecell_check(limiter, &req, &d) == RATECELL_OK && d.allowed) {
                admitted++;
            }
        }
        /* d is the 8th, denied request: retry_after_ns says when to come back. */
        printf("user %" PRIu64 ": %d of 8 admitted, retry in %" PRIu64 " ns\n", user,
               admitted, d.retry_after_ns);
        if (admitted != 5) {
            return 1;
        }
    }

    struct ratecell_stats stats; /* a struct tag: ratecell_stats() is the function */
    ratecell_stats(limiter, &stats);
    printf("ratecell %s: %" PRIu64 " checks, %" PRIu64 " admitted, %" PRIu64 " keys\n",
           ratecell_version(), stats.checks, stats.allowed, stats.keys_tracked);
    ratecell_limiter_free(limiter);
    return 0;
}
