#!/usr/bin/env bash
# The demo behind `make demo`: voicecat-server on loopback, one host (C, linked
# through pkg-config) speaks an espeak-ng recording as a MIC stream, another records
# the final mix to a WAV file; per-stream statistics and the server's counters are
# printed.
#   demo.sh PREFIX EXAMPLES_DIR
set -euo pipefail
prefix=$1 ex=$2
out=build/demo
mkdir -p "$out"
# The demo's server identity lives in $out: so does the known-servers file its hosts
# record it in (trust on first use), apart from the user's own.
export XDG_CONFIG_HOME="$PWD/$out/config"
server=.build/server/release/voicecat-server

text="Hello from VoiceCat. This sentence was spoken by one host, encoded with Opus, \
sealed, relayed by the server, and recorded by another host on the same channel."
espeak-ng -s 150 -w "$out/speech-raw.wav" "$text"
sox "$out/speech-raw.wav" -r 48000 -c 1 -b 16 "$out/speech.wav"
seconds=$(sox --i -D "$out/speech.wav")
echo "demo: speech recording $out/speech.wav (${seconds} s)"

rm -f "$out/port"
"$server" --port any --port-file "$out/port" --identity "$out/identity.key" --stats-interval 5 \
    >"$out/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$out/port" ] && break; sleep 0.05; done
port=$(cat "$out/port")
fp=$(awk '/^fingerprint/ {print $2}' "$out/server.log")
echo "demo: voicecat-server on 127.0.0.1:$port, fingerprint $fp"

record_for=$(awk -v s="$seconds" 'BEGIN { printf "%.1f", s + 2 }')
"$ex/record_mix" 127.0.0.1 "$port" sam Lobby "$out/mix.wav" "$record_for" "$fp" &
rpid=$!
sleep 0.5
"$ex/speak_wav" 127.0.0.1 "$port" alex Lobby "$out/speech.wav" "$fp"
wait $rpid
kill -TERM $spid
wait $spid 2>/dev/null || true
trap - EXIT
echo "demo: server counters: $(grep 'stopped:' "$out/server.log" | sed 's/.*stopped: //')"
echo "demo: the recording of what sam heard is $out/mix.wav"
sox "$out/mix.wav" -n stat 2>&1 | grep -E "Length|RMS +amplitude" | sed 's/^/demo:   /'
