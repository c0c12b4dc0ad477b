# Sourced by the test scripts: counts steps passed and failed.
#
#   step NAME COMMAND...   runs COMMAND, prints its name, outcome and time
#   steps_summary          prints the failed steps and "N passed, M failed",
#                          and returns non-zero if any step failed
#
# STEP_PREFIX (default "==") starts every line a step prints;
# SUMMARY_PREFIX (default empty) starts the summary lines.

passed=0
failed=0
failures=()

step() {
    local name="$1"
    shift
    echo
    echo "${STEP_PREFIX:-==} $name: $*"
    local started=$SECONDS
    if "$@"; then
        passed=$((passed + 1))
        echo "${STEP_PREFIX:-==} $name: ok ($((SECONDS - started)) s)"
    else
        failed=$((failed + 1))
        failures+=("$name")
        echo "${STEP_PREFIX:-==} $name: FAILED ($((SECONDS - started)) s)"
    fi
}

steps_summary() {
    echo
    if [ "$failed" -gt 0 ]; then
        echo "${SUMMARY_PREFIX:-}failed steps: ${failures[*]}"
    fi
    echo "${SUMMARY_PREFIX:-}$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
