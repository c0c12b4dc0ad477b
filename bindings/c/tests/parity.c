/*
 * Cross-language parity, C side: replays tests/parity/trace.csv through the
 * C ABI and prints one line per check, which must equal
 * tests/parity/expected.csv byte for byte (tests/parity.rs describes both
 * formats; scripts/python-tests.sh builds this program and compares).
 *
 *   parity TRACE.csv            every check through ratecell_check (a
 *                               request at the trace's time)
 *   parity --batch TRACE.csv    every u64 check through a one-element
 *                               ratecell_check_batch with decisions
 *
 * Exits 0 after printing every decision; 2 on a malformed trace or any
 * status other than RATECELL_OK (a parity run has no expected errors).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ratecell.h"
#include "requests.h"

#define MAX_LIMITERS 64
#define MAX_FIELDS 12
#define MAX_LINE 1024
#define MAX_KEY 256

struct named_limiter {
    char name[64];
    ratecell_limiter *limiter;
};

static struct named_limiter limiters[MAX_LIMITERS];
static size_t limiter_count;
static unsigned long line_number;

static void free_limiters(void) {
    for (size_t i = 0; i < limiter_count; i++) {
        ratecell_limiter_free(limiters[i].limiter);
    }
    limiter_count = 0;
}

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "parity: trace line %lu: %s%s%s\n", line_number, what,
            detail ? ": " : "", detail ? detail : "");
    free_limiters();
    exit(2);
}

static void check_status(ratecell_status status, const char *call) {
    if (status != RATECELL_OK) {
        fail(call, ratecell_status_str(status));
    }
}

/* Splits `line` in place at commas; empty fields are kept (an empty byte
 * key is one). Returns the number of fields. */
static size_t split(char *line, char **fields) {
    size_t n = 0;
    char *p = line;
    for (;;) {
        if (n == MAX_FIELDS) {
            fail("too many fields", NULL);
        }
        fields[n++] = p;
        char *comma = strchr(p, ',');
        if (comma == NULL) {
            return n;
        }
        *comma = '\0';
        p = comma + 1;
    }
}

static uint64_t parse_u64(const char *text) {
    if (text[0] < '0' || text[0] > '9') {
        fail("not an unsigned integer", text);
    }
    errno = 0;
    char *end = NULL;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') {
        fail("not a u64", text);
    }
    return (uint64_t)value;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t parse_hex(const char *text, uint8_t *out) {
    size_t len = strlen(text);
    if (len % 2 != 0 || len / 2 > MAX_KEY) {
        fail("bad hex key", text);
    }
    for (size_t i = 0; i < len / 2; i++) {
        int hi = hex_digit(text[2 * i]);
        int lo = hex_digit(text[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            fail("bad hex key", text);
        }
        out[i] = (uint8_t)(hi * 16 + lo);
    }
    return len / 2;
}

static ratecell_limiter *find(const char *name) {
    for (size_t i = 0; i < limiter_count; i++) {
        if (strcmp(limiters[i].name, name) == 0) {
            return limiters[i].limiter;
        }
    }
    fail("unknown limiter", name);
    return NULL;
}

static void expect_fields(size_t got, size_t want) {
    if (got != want) {
        fail("wrong number of fields", NULL);
    }
}

static void add_limiter(char **f, size_t n) {
    expect_fields(n, 9);
    if (limiter_count == MAX_LIMITERS || strlen(f[1]) >= sizeof limiters[0].name) {
        fail("too many limiters or name too long", f[1]);
    }
    ratecell_algorithm algorithm = 0;
    check_status(ratecell_algorithm_from_name((const uint8_t *)f[2], strlen(f[2]), &algorithm),
                 "ratecell_algorithm_from_name");
    ratecell_config cfg;
    ratecell_config_init(&cfg, algorithm, parse_u64(f[3]), parse_u64(f[4]));
    cfg.burst = parse_u64(f[5]);
    uint64_t sub_windows = parse_u64(f[6]);
    if (sub_windows > UINT32_MAX) {
        fail("sub_windows does not fit in 32 bits", f[6]);
    }
    cfg.sub_windows = (uint32_t)sub_windows;
    cfg.capacity = parse_u64(f[7]);
    if (strcmp(f[8], "deny") == 0) {
        cfg.overflow = RATECELL_OVERFLOW_DENY;
    } else if (strcmp(f[8], "allow") == 0) {
        cfg.overflow = RATECELL_OVERFLOW_ALLOW;
    } else {
        fail("unknown overflow policy", f[8]);
    }
    ratecell_limiter *limiter = NULL;
    check_status(ratecell_limiter_new(&cfg, &limiter), "ratecell_limiter_new");
    strcpy(limiters[limiter_count].name, f[1]);
    limiters[limiter_count].limiter = limiter;
    limiter_count++;
}

static void print_decision(const ratecell_decision *d) {
    printf("%lu,%d,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n", line_number,
           d->allowed ? 1 : 0, d->limit, d->remaining, d->retry_after_ns, d->reset_after_ns,
           d->wait_ns);
}

int main(int argc, char **argv) {
    int batch = 0;
    const char *path = NULL;
    if (argc == 3 && strcmp(argv[1], "--batch") == 0) {
        batch = 1;
        path = argv[2];
    } else if (argc == 2) {
        path = argv[1];
    } else {
        fprintf(stderr, "usage: %s [--batch] tests/parity/trace.csv\n", argv[0]);
        return 2;
    }
    FILE *trace = fopen(path, "r");
    if (trace == NULL) {
        perror(path);
        return 2;
    }
    char line[MAX_LINE];
    char *f[MAX_FIELDS];
    uint8_t key[MAX_KEY];
    while (fgets(line, sizeof line, trace) != NULL) {
        line_number++;
        size_t len = strlen(line);
        if (len > 0 && line[len - 1] == '\n') {
            line[--len] = '\0';
        } else if (!feof(trace)) {
            fail("line too long", NULL);
        }
        if (len > 0 && line[len - 1] == '\r') {
            line[--len] = '\0';
        }
        if (len == 0 || line[0] == '#') {
            continue;
        }
        size_t n = split(line, f);
        ratecell_decision d;
        if (strcmp(f[0], "limiter") == 0) {
            add_limiter(f, n);
        } else if (strcmp(f[0], "check") == 0) {
            expect_fields(n, 5);
            ratecell_limiter *l = find(f[1]);
            uint64_t k = parse_u64(f[2]), cost = parse_u64(f[3]), now = parse_u64(f[4]);
            if (batch) {
                uint8_t allowed = 2;
                check_status(rq_batch(l, &k, NULL, &cost, 1, now, &allowed, &d),
                             "ratecell_check_batch");
                if (allowed != (d.allowed ? 1 : 0)) {
                    fail("batch flag disagrees with its decision", NULL);
                }
            } else {
                check_status(rq_check(l, k, cost, now, &d), "ratecell_check");
            }
            print_decision(&d);
        } else if (strcmp(f[0], "check_bytes") == 0) {
            expect_fields(n, 5);
            ratecell_limiter *l = find(f[1]);
            size_t key_len = parse_hex(f[2], key);
            /* Never NULL, even when empty: NULL bytes name the number key. */
            check_status(rq_check_bytes(l, key, key_len, parse_u64(f[3]), parse_u64(f[4]), &d),
                         "ratecell_check (byte key)");
            print_decision(&d);
        } else if (strcmp(f[0], "reset_key") == 0) {
            expect_fields(n, 3);
            check_status(rq_reset(find(f[1]), parse_u64(f[2])), "ratecell_reset");
        } else {
            fail("unknown record", f[0]);
        }
    }
    if (ferror(trace)) {
        fail("read error", path);
    }
    fclose(trace);
    free_limiters();
    if (fflush(stdout) != 0) {
        perror("stdout");
        return 2;
    }
    return 0;
}
