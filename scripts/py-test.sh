#!/usr/bin/env bash
# The Python package's tests, each time in a fresh virtual environment:
#   source: pip install ./python, with numpy; mypy --strict on the package and the
#           examples; the library found through pkg-config in PREFIX.
#   wheel:  pip install dist/voicecat-*.whl, without numpy, with nothing pointing at
#           PREFIX: only the library bundled in the wheel.
# PyPI packages (pytest, numpy, mypy; setuptools for the build) go into the venvs.
# Then the listening-quality goals of issue #16 (scripts/quality.sh: PESQ-WB from PyPI's
# pesq, in its own venv) with the bench-quality binary, on the clean, isolated-loss and
# bursty-loss traces.
#   py-test.sh PREFIX SERVER_BINARY [BENCH_QUALITY_BINARY]
set -euo pipefail
prefix=$1
server=$(realpath "$2")
bench_quality=${3:-}
root=$(pwd)
work=$root/build/py-test
python=${PYTHON3:-python3}
wheel=$(ls "$root"/dist/voicecat-*.whl)
rm -rf "$work"
mkdir -p "$work"

# A test that hangs (a wait the library never ends) ends the run after 5 minutes with
# every thread's stack, failed (pytest-timeout, thread method: it works while the main
# thread is blocked in a C call, where a signal would not be handled; it exits at once,
# so the fixtures' servers are left to die with the CI job), not at CI's time limit.
hang_guard="--timeout=300 --timeout-method=thread"

echo "py-test: source install (pip install ./python) with numpy, library through pkg-config"
"$python" -m venv "$work/source"
"$work/source/bin/pip" install -q pytest pytest-timeout numpy mypy
"$work/source/bin/pip" install -q "$root/python"
# Type-check the installed package (its py.typed) and the examples that use it, from a
# directory where the checkout's python/ cannot shadow it.
(cd "$work" && source/bin/mypy --strict --no-incremental -p voicecat && \
    source/bin/mypy --strict --no-incremental "$root"/examples/python/*.py)
(cd "$work" && env -u VOICECAT_LIBRARY PKG_CONFIG_PATH="$prefix/lib/pkgconfig" VOICECAT_SERVER="$server" \
    VOICECAT_TEST_INSTALL=source source/bin/python -m pytest -q -p no:cacheprovider $hang_guard "$root/Tests/python")

echo "py-test: wheel install ($(basename "$wheel")) without numpy, only the bundled library"
"$python" -m venv "$work/wheel"
"$work/wheel/bin/pip" install -q pytest pytest-timeout
"$work/wheel/bin/pip" install -q "$wheel"
(cd "$work" && env -u VOICECAT_LIBRARY -u PKG_CONFIG_PATH -u LD_LIBRARY_PATH VOICECAT_SERVER="$server" \
    VOICECAT_TEST_INSTALL=wheel wheel/bin/python -m pytest -q -p no:cacheprovider $hang_guard "$root/Tests/python")

if [ -n "$bench_quality" ]; then
    echo "py-test: listening quality under loss (PESQ-WB; issue #16)"
    bash "$root/scripts/quality.sh" "$bench_quality" "$root/build/quality-test" --seeds 2 --arm bare-plc --arm pipeline \
        --trace clean --trace isolated-1 --trace isolated-2 --trace isolated-3 --trace bursty-5 --trace bursty-7 --check
fi
