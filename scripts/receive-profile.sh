#!/bin/bash
# The share of the receive path's CPU outside libopus, engine against bare baseline,
# from one perf profile of bench-audio's listener (docs/benchmarks.md, receive).
#
# bench-audio's receive ratio is a median of 16 windows whose ratios spread 0.9-1.3x
# on a shared machine. This counts cpu-clock samples instead: the listener's engine
# threads (vc-mixer, vc-network) and the baseline's thread (bench-bare) run in the same
# process in the same seconds, so samples outside libopus per sample inside it compare
# like with like, run to run. Needs perf (linux-perf) and permission to profile.
#
#   scripts/receive-profile.sh [streams]      (default 64; after a release build of bench-audio)
set -euo pipefail
streams=${1:-64}
bin=.build/release/bench-audio
out=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && cp "$out/perf.data" "$KEEP"; rm -rf "$out"' EXIT
[ -x "$bin" ] || { echo "build it first: swift build -c release --product bench-audio" >&2; exit 2; }
"$bin" --only receive --streams "$streams" > "$out/bench.txt" 2>&1 &
bench=$!
# The listener process is up and both paths run after about 9 s (connects, warm-up).
sleep 9
pid=$(pgrep -f "bench-audio listen" | head -1)
[ -n "$pid" ] || { echo "no listener process found" >&2; exit 1; }
perf record -F 3999 -p "$pid" -o "$out/perf.data" -- sleep 10 > /dev/null 2>&1
wait "$bench"
perf report -i "$out/perf.data" -g none --no-children --sort comm,dso --stdio 2> /dev/null \
    | awk '$1 ~ /%$/ {
        pct = $1; sub(/%/, "", pct); comm = $2; dso = $3
        opus = (dso ~ /libopus/)
        if (comm == "bench-bare") { if (opus) bo += pct; else bx += pct }
        else if (comm ~ /^vc-/) { if (opus) eo += pct; else ex += pct }
    }
    END {
        printf "engine: libopus %.2f %%, outside %.2f %% (outside per libopus sample %.3f)\n", eo, ex, ex / eo
        printf "bare:   libopus %.2f %%, outside %.2f %% (outside per libopus sample %.3f)\n", bo, bx, bx / bo
        printf "all engine samples / all baseline samples: %.3f\n", (eo + ex) / (bo + bx)
    }'
grep "receive + decode" "$out/bench.txt" | head -1
