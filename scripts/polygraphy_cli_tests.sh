#!/usr/bin/env bash
# Polygraphy's own CLI tests (its tests/tools/test_{run,inspect,surgeon,data,debug}.py, unmodified)
# run against toolkit: the numbers in docs/compatibility.md ("Polygraphy's own CLI tests").
#
#   scripts/polygraphy_cli_tests.sh                      # toolkit found on PATH (activate .venv first)
#   PEER_TOOL=/path/to/toolkit scripts/polygraphy_cli_tests.sh
#   PEER_TOOL=$(command -v polygraphy) scripts/polygraphy_cli_tests.sh   # the baseline: Polygraphy itself
#   scripts/polygraphy_cli_tests.sh -k TestReduce         # extra pytest arguments pass through
#
# The tests: Polygraphy's wheel ships none, so they come from the TensorRT repository at the commit
# below (tools/Polygraphy/tests; a sparse, blob-less clone of ~3 MB into the cache, once), or from
# POLYGRAPHY_TESTS=FOLDER, a folder holding that tests/ folder.
# The runner's own environment (pytest, polygraphy for the tests' helpers, onnx for the fake
# checker) is a separate venv, $PEER_VENV (default ~/.cache/toolkit-peer-venv), made on first use.
# TensorRT/CUDA/torch tests are skipped; scripts/polygraphy_cli_tests/out_of_scope.txt lists the
# tests deselected on purpose (features outside toolkit's scope), with the reason.
# Results: $PEER_OUT (default ~/.cache/toolkit-peer-results)/<tool>.xml and .log (each test's
# commands and output), and the per-file counts printed at the end.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/polygraphy_cli_tests" && pwd)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}
VENV=${PEER_VENV:-$CACHE/toolkit-peer-venv}
OUT=${PEER_OUT:-$CACHE/toolkit-peer-results}
TOOL=${PEER_TOOL:-$(command -v toolkit || true)}
REPO_URL=${POLYGRAPHY_TESTS_REPO:-https://github.com/NVIDIA/TensorRT}
COMMIT=a892d22267d9cd2dedc1a0893e6892ac901f6d3d  # main of 2026-07-07 (Polygraphy 0.49.27's tests)
[[ -x $TOOL ]] || { echo "no tool to test: activate the venv with toolkit installed, or set PEER_TOOL" >&2; exit 2; }

tests=${POLYGRAPHY_TESTS:-}
if [[ -z $tests ]]; then
  src=$CACHE/toolkit-polygraphy-tests
  if [[ ! -d $src/tools/Polygraphy/tests/tools ]]; then
    rm -rf "$src"
    git clone -q --filter=blob:none --no-checkout "$REPO_URL" "$src" &&
      git -C "$src" sparse-checkout set tools/Polygraphy/tests &&
      git -C "$src" checkout -q "$COMMIT" ||
      { echo "cannot fetch Polygraphy's tests; give POLYGRAPHY_TESTS=FOLDER (a folder holding tests/)" >&2; exit 2; }
  fi
  tests=$src/tools/Polygraphy
fi
[[ -d $tests/tests/tools ]] || { echo "$tests: no tests/tools folder in it" >&2; exit 2; }

if [[ ! -x $VENV/bin/python ]] || ! "$VENV/bin/python" -c "import polygraphy, pytest_timeout, xdist, sympy, onnx_graphsurgeon, onnxruntime" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q polygraphy==0.53.6 onnx onnxruntime onnx-graphsurgeon numpy sympy \
      pytest pytest-timeout pytest-xdist || exit 2
fi

# the work folder: the adapter beside the tests (node ids in out_of_scope.txt start polygraphy_tests/)
WORK=$OUT/work
rm -rf "$WORK" && mkdir -p "$WORK/shim" || exit 2
cp "$HERE"/peer_adapter.py "$HERE"/summarize.py "$HERE"/out_of_scope.txt "$HERE"/pytest.ini "$WORK"/
cp "$HERE/polygraphy" "$WORK/shim/polygraphy" && chmod +x "$WORK/shim/polygraphy"
ln -s "$(cd "$tests" && pwd)" "$WORK/polygraphy_tests"

export PEER_TOOL=$TOOL PEER_ANCHOR_BIN=$VENV/bin PEER_TOOL_TIMEOUT=${PEER_TOOL_TIMEOUT:-120}
unset PYTHONPATH
name=$(basename "$TOOL")
T=polygraphy_tests/tests/tools
DESELECT=()
while read -r id _; do DESELECT+=(--deselect "$id"); done < <(grep -v '^#' "$WORK/out_of_scope.txt" | sed 's/  #.*//')
cd "$WORK" || exit 2
"$VENV/bin/python" -m pytest -c pytest.ini --noconftest -p peer_adapter -n "${PEER_JOBS:-2}" \
    --timeout="$PEER_TOOL_TIMEOUT" -q -rfE --junitxml="$OUT/$name.xml" "${DESELECT[@]}" \
    "$T/test_run.py" "$T/test_inspect.py" "$T/test_surgeon.py" "$T/test_data.py" "$T/test_debug.py" "$@" \
    2>&1 | tee "$OUT/$name.log" | grep -v '^\(PASSED\|SKIPPED\) ' | tail -n 60
rc=${PIPESTATUS[0]}
echo "--- per file ($name); full log: $OUT/$name.log ---"
"$VENV/bin/python" "$WORK/summarize.py" "$OUT/$name.xml"
exit "$rc"
