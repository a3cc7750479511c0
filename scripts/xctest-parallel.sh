#!/usr/bin/env bash
# Runs an XCTest bundle's tests WORKERS at a time, each test in a process of its own
# (what `swift test` does with one, given the list), and prints each test's whole
# output when it ends, so the log reads test by test. Most of the suite waits on real
# time (audio paced at 20 ms, timeouts, reconnects): run one at a time it left a core
# nearly idle (about a quarter of one in use), and took 10 of make test's 26 minutes.
#   xctest-parallel.sh BUNDLE WORKERS [--filter ERE]... [--skip ERE]...
# A test is run when its name (Module.Class/testName) matches any --filter (all, when
# none is given) and no --skip. Each test gets a TMPDIR of its own, removed after it.
# One that runs longer than TEST_MINUTES (default 10) is killed and fails, named in
# the log. A test fails when its process fails or ran no test. Exit status 1 when any
# test failed or did not run.
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
case $workers in ''|*[!0-9]*|0) echo "xctest-parallel: WORKERS must be a number of at least 1 (got '$workers')" >&2; exit 2 ;; esac
minutes=${TEST_MINUTES:-10}
case $minutes in ''|*[!0-9]*|0) echo "xctest-parallel: TEST_MINUTES must be a whole number of at least 1 (got '$minutes')" >&2; exit 2 ;; esac
work=$(mktemp -d)

"$bundle" --list-tests | grep -E '^[A-Za-z0-9_]+\.[A-Za-z0-9_]+/' > "$work/all" || {
    echo "xctest-parallel: $bundle lists no tests" >&2; rm -rf "$work"; exit 2; }
cp "$work/all" "$work/list"
if [ ${#filters[@]} -gt 0 ]; then
    pattern=$(IFS='|'; echo "${filters[*]}")
    grep -E "$pattern" "$work/all" > "$work/list" || true
fi
for s in "${skips[@]}"; do
    grep -v -E "$s" "$work/list" > "$work/kept"; mv "$work/kept" "$work/list"
done
n=$(wc -l < "$work/list")
[ "$n" -gt 0 ] || { echo "xctest-parallel: no test matches" >&2; rm -rf "$work"; exit 2; }
echo 1 > "$work/next"
: > "$work/results"
start=$SECONDS

# Interrupted (Ctrl-C, CI's kill): the tests run in process groups of their own (each
# under `timeout`), so they are ended here, with whatever servers they started.
stop_tests() {
    local f
    touch "$work/stop"
    for f in "$work"/pid.*; do [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null; done
    wait
    rm -rf "$work"
    exit 130
}
trap stop_tests INT TERM
trap 'rm -rf "$work"' EXIT

run_worker() {
    local w=$1 i t rc t0 secs verdict
    while :; do
        { flock 9; i=$(<"$work/next"); echo $((i + 1)) > "$work/next"; } 9> "$work/lock"
        [ "$i" -le "$n" ] && [ ! -e "$work/stop" ] || return 0
        t=$(sed -n "${i}p" "$work/list")
        { flock 9; echo "[$i/$n] $t: started"; } 9> "$work/lock"
        mkdir "$work/tmp.$i"
        t0=$SECONDS
        TMPDIR="$work/tmp.$i" timeout --kill-after=10 "${minutes}m" "$bundle" "$t" > "$work/out.$i" 2>&1 &
        echo $! > "$work/pid.$w"
        wait $!
        rc=$?
        rm -f "$work/pid.$w"
        secs=$((SECONDS - t0))
        verdict=passed
        if [ $rc -ne 0 ]; then
            verdict="FAILED (exit $rc)"
            [ $secs -ge $((minutes * 60)) ] && verdict="FAILED (killed after $minutes minutes)"
        elif ! grep -q -E "^[[:space:]]+Executed 1 test," "$work/out.$i"; then
            verdict="FAILED (the process ran no test)"
        elif grep -q "^Test Case '.*' skipped" "$work/out.$i"; then
            verdict=skipped
        fi
        {
            flock 9
            echo "[$i/$n] $t: $verdict in $secs s"
            # The per-process suite lines say nothing the summary does not.
            grep -v -E "^Test Suite '|^[[:space:]]+Executed [0-9]+ tests?," "$work/out.$i"
            case $verdict in passed|skipped) echo "$verdict $t" ;; *) echo "failed $t" ;; esac >> "$work/results"
        } 9> "$work/lock"
        rm -rf "$work/out.$i" "$work/tmp.$i"
    done
}

for w in $(seq "$workers"); do run_worker "$w" & done
wait
passed=$(grep -c '^passed ' "$work/results") skipped=$(grep -c '^skipped ' "$work/results")
failed=$(grep -c '^failed ' "$work/results") done=$(wc -l < "$work/results")
echo "xctest-parallel: $n tests in $((SECONDS - start)) s, $workers at a time:" \
    "$passed passed, $skipped skipped, $failed failed$([ "$done" -ne "$n" ] && echo ", $((n - done)) not run")"
if [ "$failed" -gt 0 ] || [ "$done" -ne "$n" ]; then
    grep '^failed ' "$work/results" | sed 's/^failed /  failed: /'
    exit 1
fi
