#!/usr/bin/env bash
# Listening quality under loss (issue #16): tools/quality_bench.py in a virtual
# environment with PyPI's numpy and pesq (PESQ-WB, ITU-T P.862.2; built from source, so
# it needs a C compiler and python3-dev, which scripts/deps.sh installs). The venv is
# kept in WORKDIR/venv and reused while it works.
#   quality.sh BENCH_BINARY WORKDIR [quality_bench.py options...]
set -euo pipefail
bench=$(realpath "$1")
work=$2
shift 2
python=${PYTHON3:-python3}
mkdir -p "$work"
venv=$work/venv
if ! "$venv/bin/python" -c "import numpy, pesq" 2>/dev/null; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q numpy pesq
fi
"$venv/bin/python" "$(dirname "$0")/../tools/quality_bench.py" "$bench" "$work/run" "$@"
