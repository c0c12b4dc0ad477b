# Sourced by the scripts that check one thing per line (install-tests.sh,
# dependent-tests.sh): counts the checks passed and failed.
#
#   check WHAT COMMAND...  runs COMMAND, prints "ok: WHAT" or "FAILED: WHAT"
#   checks_summary         prints "N passed, M failed", and returns non-zero
#                          if any check failed

passed=0
failed=0

check() {
    local what="$1"
    shift
    if "$@"; then
        passed=$((passed + 1))
        echo "ok: $what"
    else
        failed=$((failed + 1))
        echo "FAILED: $what" >&2
    fi
}

checks_summary() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
