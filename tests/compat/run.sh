#!/usr/bin/env bash
# The compatibility matrix: for each pyspark line, a virtualenv with that pyspark and the
# libraries its clusters run (tests/compat/<line>.txt), then the tests of the Spark fronts
# against that Spark's own built-in reader. Usage: tests/compat/run.sh [--install-only] [LINE ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
INSTALL_ONLY=0
if [ "${1:-}" = "--install-only" ]; then
  INSTALL_ONLY=1
  shift
fi
LINES=("$@")
# 4.3 is the pyspark of .venv, which `make test` runs
[ ${#LINES[@]} -gt 0 ] || LINES=(3.5 4.0 4.1 4.2)

install() {
  local line=$1 venv=.venv-compat/$1 pins=tests/compat/$1.txt
  if [ ! -f "$venv/.installed" ] || [ "$pins" -nt "$venv/.installed" ] || [ setup.cfg -nt "$venv/.installed" ]; then
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    # the pins first, so the project's own requirements are resolved within them
    "$venv/bin/python" -m pip install -q -r "$pins" -e . pytest
    touch "$venv/.installed"
  fi
}

# the virtualenvs are installed side by side (downloads and wheel builds wait on the network and the
# disk more than on a core); the tests then run one line at a time, each Spark with both cores
mkdir -p .venv-compat
pids=()
for line in "${LINES[@]}"; do
  install "$line" >".venv-compat/$line.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!LINES[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "== installing the pyspark ${LINES[$i]} line failed:" >&2
    cat ".venv-compat/${LINES[$i]}.log" >&2
    failed=1
  fi
done
[ "$failed" = 0 ] || exit 1
[ "$INSTALL_ONLY" = 0 ] || exit 0

# the lines' tests run side by side: each is one JVM reading a dozen small checkpoints, waiting on itself
# more than on the cores (measured: about 240 s one after another, 190 s side by side); each log prints at the end
pids=()
for line in "${LINES[@]}"; do
  venv=.venv-compat/$line
  {
    echo "== pyspark $("$venv/bin/python" -c 'import pyspark; print(pyspark.__version__)') ($line line)"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/oracles/test_spark_fronts.py
    # rows written into a store are checked with the line's own pyarrow, numpy and pandas (no Spark)
    "$venv/bin/python" -m pytest -q -p no:cacheprovider -m "not spark" tests/formats/test_json_values.py \
      tests/core/test_rewrite_edit_fit.py
  } >".venv-compat/$line.test.log" 2>&1 &
  pids+=($!)
done
for i in "${!LINES[@]}"; do
  if ! wait "${pids[$i]}"; then
    failed=1
  fi
  cat ".venv-compat/${LINES[$i]}.test.log"
done
exit "$failed"
