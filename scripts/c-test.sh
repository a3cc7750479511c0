#!/usr/bin/env bash
# Runs the C API checks and the C examples against a live voicecat-server on loopback.
#   c-test.sh EXAMPLES_DIR SERVER_BINARY LIBRARY
set -euo pipefail
ex=$1 server=$2 lib=$3
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
# A program built against release 0.2, emulated: the old layouts through the old symbol versions.
"$ex/abi_compat" "$lib" "$port"

# Allocations in the whole host process, steady state, in each output mode.
for mode in sink pull device; do
    "$ex/alloc_host" "$port" "$mode" "${ALLOC_SECONDS:-10}"
    "$ex/alloc_host" "$port" "$mode" "${ALLOC_RESAMPLE_SECONDS:-5}" resample
done
"$ex/alloc_host" "$port" sink10 "${ALLOC_RESAMPLE_SECONDS:-5}"
"$ex/alloc_host" "$port" sink10 "${ALLOC_RESAMPLE_SECONDS:-5}" resample

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
grep -q "VC_EVENT_TALK_START" "$work/record.log" || { echo "c-test: no talk-start event seen"; exit 1; }

# The audio edge: a 44.1 kHz file spoken; one listener records each speaker to its own
# WAV file, another pulls the mix at 16 kHz mono with a per-speaker sink.
sox -n -r 44100 -c 1 -b 16 "$work/tone441.wav" synth 1.5 sine 440 vol 0.3
mkdir "$work/speakers"
"$ex/record_speakers" 127.0.0.1 "$port" recorder Lobby "$work/speakers" 3.5 >"$work/speakers.log" &
spk=$!
"$ex/pull_16k" 127.0.0.1 "$port" stt Lobby "$work/mix16k.wav" 3.5 >"$work/pull.log" &
pll=$!
sleep 0.5
"$ex/speak_wav" 127.0.0.1 "$port" talker441 Lobby "$work/tone441.wav"
wait $spk $pll
cat "$work/speakers.log" "$work/pull.log"
files=("$work"/speakers/talker441-*.wav)
[ -f "${files[0]}" ] || { echo "c-test: record_speakers wrote no file for the talker"; exit 1; }
rms=$(sox "${files[0]}" -n stat 2>&1 | awk '/RMS +amplitude/ {print $3}')
echo "c-test: ${files[0]##*/}: $(sox --i -r "${files[0]}") Hz, RMS amplitude $rms"
awk -v r="$rms" 'BEGIN { exit !(r > 0.05) }' || { echo "c-test: the speaker's recording is (nearly) silent"; exit 1; }
rate=$(sox --i -r "$work/mix16k.wav") chans=$(sox --i -c "$work/mix16k.wav")
rms=$(sox "$work/mix16k.wav" -n stat 2>&1 | awk '/RMS +amplitude/ {print $3}')
echo "c-test: pull_16k wrote $rate Hz, $chans channel(s), RMS amplitude $rms"
[ "$rate" = 16000 ] && [ "$chans" = 1 ] || { echo "c-test: pull_16k's file is not 16 kHz mono"; exit 1; }
awk -v r="$rms" 'BEGIN { exit !(r > 0.05) }' || { echo "c-test: the 16 kHz pull is (nearly) silent"; exit 1; }
loud=$(awk '/speaker ssrc/ && /above/ {for (i = 1; i <= NF; i++) if ($i == "of" && $(i+1) == "it") print $(i-2)}' "$work/pull.log" | sort -n | tail -1)
awk -v s="${loud:-0}" 'BEGIN { exit !(s > 1.0) }' || { echo "c-test: the per-speaker sink saw no speech"; exit 1; }
echo "c-test: 4 passed, 0 failed"
