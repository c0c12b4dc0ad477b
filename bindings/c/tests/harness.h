/*
 * A minimal test harness for the C and C++ tests of ratecell's C ABI.
 *
 * A test is a function `static void test_name(void)` that uses CHECK and
 * CHECK_EQ_U64; RUN(test_name) runs it and counts it as passed when none of
 * its checks failed. harness_finish() prints the closing line
 * "N passed, M failed" and returns the process exit code.
 */
#ifndef RATECELL_TEST_HARNESS_H
#define RATECELL_TEST_HARNESS_H

#include <inttypes.h>
#include <stdio.h>

static int harness_passed;
static int harness_failed;
static int harness_check_failures;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            harness_check_failures++;                                      \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__,         \
                    __LINE__, #cond);                                      \
        }                                                                  \
    } while (0)

#define CHECK_EQ_U64(actual, expected)                                     \
    do {                                                                   \
        uint64_t harness_a = (uint64_t)(actual);                           \
        uint64_t harness_e = (uint64_t)(expected);                         \
        if (harness_a != harness_e) {                                      \
            harness_check_failures++;                                      \
            fprintf(stderr,                                                \
                    "%s:%d: %s == %" PRIu64 ", expected %s == %" PRIu64    \
                    "\n",                                                  \
                    __FILE__, __LINE__, #actual, harness_a, #expected,     \
                    harness_e);                                            \
        }                                                                  \
    } while (0)

#define RUN(test)                                                          \
    do {                                                                   \
        int harness_before = harness_check_failures;                       \
        test();                                                            \
        if (harness_check_failures == harness_before) {                    \
            harness_passed++;                                              \
            printf("ok   %s\n", #test);                                    \
        } else {                                                           \
            harness_failed++;                                              \
            printf("FAIL %s\n", #test);                                    \
        }                                                                  \
        fflush(stdout);                                                    \
    } while (0)

static int harness_finish(void) {
    printf("%d passed, %d failed\n", harness_passed, harness_failed);
    return harness_failed == 0 && harness_passed > 0 ? 0 : 1;
}

#endif /* RATECELL_TEST_HARNESS_H */
