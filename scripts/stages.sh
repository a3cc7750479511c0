#!/usr/bin/env bash
# Runs make targets in order, stopping at the first that fails, and prints how long
# each took (make test's stages; the suite should stay within about 20 minutes on a
# 2-core machine, so a stage that grows shows here).
# Usage: scripts/stages.sh MAKE TARGET...
set -uo pipefail
make_cmd=$1; shift
declare -a names=() secs=()
start=$SECONDS
report() {
    local i
    echo "make test: stage times"
    for i in "${!names[@]}"; do printf '  %-13s %5d s\n' "${names[$i]}" "${secs[$i]}"; done
    printf '  %-13s %5d s\n' total $((SECONDS - start))
}
for t in "$@"; do
    t0=$SECONDS
    echo "== make $t (started $(date -u +%H:%M:%S) UTC)"
    $make_cmd "$t"; rc=$?
    names+=("$t"); secs+=($((SECONDS - t0)))
    if [ $rc -ne 0 ]; then
        report
        echo "make test: stage $t failed (exit $rc)"
        exit $rc
    fi
done
report
