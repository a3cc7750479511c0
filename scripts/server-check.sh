#!/usr/bin/env bash
# Checks the voicecat-server installed under PREFIX ($1): it needs no library from the
# Swift toolchain (the runtime is linked in) and none of libasound/libopus/SpeexDSP, and
# its systemd unit passes `systemd-analyze verify` with no warning.
set -euo pipefail
prefix=${1:?usage: server-check.sh PREFIX}
bin=$prefix/bin/voicecat-server
unit=$prefix/lib/systemd/system/voicecat-server.service

echo "ldd $bin:"
ldd "$bin" | sed 's/^/    /'
if ldd "$bin" | grep -q -e /opt/swift -e libswift -e libFoundation -e libdispatch; then
    echo "FAIL: voicecat-server needs a library of the Swift toolchain"; exit 1
fi
# SwiftPM leaves RUNPATH $ORIGIN (the binary's own directory): harmless; any other is not.
if readelf -d "$bin" | grep -E 'RPATH|RUNPATH' | grep -v '\[\$ORIGIN\]$'; then
    echo "FAIL: voicecat-server carries a search path other than \$ORIGIN"; exit 1
fi
for lib in $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case $lib in
        libsodium.so.*|libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|ld-linux*|libdl.so.*|libpthread.so.*|librt.so.*) ;;
        *) echo "FAIL: voicecat-server needs $lib"; exit 1 ;;
    esac
done
"$bin" --help >/dev/null
echo "voicecat-server: self-contained (NEEDED: $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' '))"

# The unit. systemd-analyze comes with Debian's systemd package (scripts/deps.sh). Where it
# cannot work at all (it fails on a trivial unit too), the check is skipped and says why.
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "SKIP: systemd-analyze is not installed (Debian package: systemd); the unit was not verified"; exit 0
fi
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf '[Unit]\nDescription=probe\n[Service]\nExecStart=/bin/true\n' > "$probe_dir/vc-probe.service"
if ! probe=$(systemd-analyze verify "$probe_dir/vc-probe.service" 2>&1); then
    echo "SKIP: systemd-analyze cannot run here (it fails on a trivial unit too): $probe"; exit 0
fi
if ! out=$(systemd-analyze verify "$unit" 2>&1) || [ -n "$out" ]; then
    echo "$out"
    echo "FAIL: systemd-analyze verify $unit"; exit 1
fi
echo "systemd-analyze verify $unit: clean"
systemd-analyze security --offline=true "$unit" 2>/dev/null | tail -1 || true
