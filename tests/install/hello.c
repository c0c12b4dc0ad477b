/* The smallest useful C program on ratecell, linked statically against the
 * installed libratecell.a: scripts/install-tests.sh measures its size (the
 * cost of ratecell in a user's static binary) and runs it. One keyed
 * limiter, one check. */
#include <ratecell.h>

#include <stdio.h>

int main(void) {
    ratecell_config cfg;
    ratecell_config_init(&cfg, RATECELL_ALGORITHM_GCRA, 5, 1000000000);
    cfg.capacity = 1000;
    ratecell_limiter *limiter = NULL;
    if (ratecell_limiter_new(&cfg, &limiter) != RATECELL_OK) {
        return 1;
    }
    struct ratecell_request r;
    ratecell_request_init(&r);
    r.key_id = 42;
    ratecell_decision d;
    ratecell_status status = ratecell_check(limiter, &r, &d);
    ratecell_limiter_free(limiter);
    if (status != RATECELL_OK || !d.allowed) {
        return 1;
    }
    puts("hello, admitted");
    return 0;
}
