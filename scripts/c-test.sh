#!/usr/bin/env bash
# Runs the C API checks and the C examples against a live voicecat-server on loopback.
#   c-test.sh EXAMPLES_DIR SERVER_BINARY
set -euo pipefail
ex=$1 server=$2
work=$(mktemp -d)
# Trust on first use records each server in the per-user known-servers file: keep
# this run's (a fresh server identity on a random port) out of the user's.
export XDG_CONFIG_HOME="$work/config"
trap 'kill $spid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
"$server" --port any --port-file "$work/port" --identity "$work/id.key" >"$work/server.log" 2>&1 &
spid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
port=$(cat "$work/port")

"$ex/api_check" "$port"

# Allocations in the whole host process, steady state, in each output mode.
for mode in sink pull device; do
    "$ex/alloc_host" "$port" "$mode" "${ALLOC_SECONDS:-10}"
done

# The two examples through the server: a 1.5 s tone spoken by one, recorded by the other.
sox -n -r 48000 -c 1 -b 16 "$work/tone.wav" synth 1.5 sine 440 vol 0.3
"$ex/record_mix" 127.0.0.1 "$port" listener Lobby "$work/mix.wav" 3 >"$work/record.log" &
rpid=$!
sleep 0.5
"$ex/speak_wav" 127.0.0.1 "$port" talker Lobby "$work/tone.wav"
wait $rpid
cat "$work/record.log"
# The recording must hold the tone: RMS well above silence.
rms=$(sox "$work/mix.wav" -n stat 2>&1 | awk '/RMS +amplitude/ {print $3}')
echo "c-test: recorded mix RMS amplitude $rms"
awk -v r="$rms" 'BEGIN { exit !(r > 0.05) }' || { echo "c-test: the recording is (nearly) silent"; exit 1; }
grep -q "talk start" "$work/record.log" || { echo "c-test: no talk-start event seen"; exit 1; }
echo "c-test: 2 passed, 0 failed"
