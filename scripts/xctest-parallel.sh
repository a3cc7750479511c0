#!/usr/bin/env bash
# Runs an XCTest bundle's tests WORKERS at a time, each test in a process of its own
# (what `swift test` does with one, given the list), and prints each test's whole
# output when it ends, so the log reads test by test. Most of the suite waits on real
# time (audio paced at 20 ms, timeouts, reconnects): run one at a time it left a core
# nearly idle (about a quarter of one in use), and took 10 of make test's 26 minutes.
#   xctest-parallel.sh BUNDLE WORKERS [--filter ERE]... [--skip ERE]...
# A test is run when its name (Module.Class/testName) matches any --filter (all, when
# none is given) and no --skip. One that runs longer than TEST_MINUTES (default 10) is
# killed and fails, named in the log. Exit status 1 when any test failed.
set -uo pipefail
bundle=$1 workers=$2
shift 2
filters=() skips=()
while [ $# -gt 0 ]; do
    case $1 in
        --filter) filters+=("$2") ;;
        --skip) skips+=("$2") ;;
        *) echo "xctest-parallel: unknown argument $1" >&2; exit 2 ;;
    esac
    shift 2
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$bundle" --list-tests | grep -E '^[A-Za-z0-9_]+\.[A-Za-z0-9_]+/' > "$work/all" || {
    echo "xctest-parallel: $bundle lists no tests" >&2; exit 2; }
cp "$work/all" "$work/list"
if [ ${#filters[@]} -gt 0 ]; then
    pattern=$(IFS='|'; echo "${filters[*]}")
    grep -E "$pattern" "$work/all" > "$work/list" || true
fi
for s in "${skips[@]}"; do
    grep -v -E "$s" "$work/list" > "$work/kept"; mv "$work/kept" "$work/list"
done
n=$(wc -l < "$work/list")
[ "$n" -gt 0 ] || { echo "xctest-parallel: no test matches" >&2; exit 2; }
echo 1 > "$work/next"
: > "$work/failed"
: > "$work/skipped"
start=$SECONDS

run_worker() {
    local i t rc t0 secs verdict
    while :; do
        { flock 9; i=$(<"$work/next"); echo $((i + 1)) > "$work/next"; } 9> "$work/lock"
        [ "$i" -le "$n" ] || return 0
        t=$(sed -n "${i}p" "$work/list")
        t0=$SECONDS
        timeout --kill-after=10 "${TEST_MINUTES:-10}m" "$bundle" "$t" > "$work/out.$i" 2>&1
        rc=$?
        secs=$((SECONDS - t0))
        verdict=passed
        if [ $rc -ne 0 ]; then
            verdict="FAILED (exit $rc$([ $rc -eq 124 ] && echo ", killed after ${TEST_MINUTES:-10} minutes"))"
        fi
        {
            flock 9
            echo "[$i/$n] $t: $verdict in $secs s"
            # The per-process suite lines say nothing the summary does not.
            grep -v -E "^Test Suite '|^[[:space:]]+Executed [0-9]+ tests?," "$work/out.$i"
            [ $rc -eq 0 ] || echo "$t" >> "$work/failed"
            grep -q "^Test Case '.*' skipped" "$work/out.$i" && echo "$t" >> "$work/skipped"
        } 9> "$work/lock"
        rm -f "$work/out.$i"
    done
}

for _ in $(seq "$workers"); do run_worker & done
wait
failed=$(wc -l < "$work/failed") skipped=$(wc -l < "$work/skipped")
echo "xctest-parallel: $n tests in $((SECONDS - start)) s, $workers at a time:" \
    "$((n - failed - skipped)) passed, $skipped skipped, $failed failed"
if [ "$failed" -gt 0 ]; then
    sed 's/^/  failed: /' "$work/failed"
    exit 1
fi
