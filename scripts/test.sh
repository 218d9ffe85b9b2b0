#!/bin/sh
# Installs what the test suite needs (Chromium from Debian for the report test, the package with its test extras
# including vLLM's CPU build, OpenRLHF 0.11.2 without its GPU dependencies, DeepSpeed without its CUDA ops), checks
# the packages' imports against setup.py (deptry), builds the docs site strict (mkdocs), and runs the whole suite
# (arguments go to pytest, e.g. -m "not slow", and then the tests run in one process; every test over 20 s is listed
# with its time).
set -e
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    { $SUDO apt-get install -y -q chromium || { $SUDO apt-get update -q && $SUDO apt-get install -y -q chromium; }; } >/dev/null
fi
# the package with its test extra, then OpenRLHF and DeepSpeed without their GPU dependencies, as --cpu runs them
sh scripts/install-cpu-harness.sh test
python scripts/check_deps.py
ruff check . && ruff format --check .
# the documentation site, strict: a broken link, a missing page or anchor fails; built outside the checkout
site=$(mktemp -d "${TMPDIR:-/tmp}/asearcher-site.XXXXXX")
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir "$site" || { rm -rf "$site"; exit 1; }
rm -rf "$site"
if [ $# -gt 0 ]; then
    python -m pytest -q --durations=0 --durations-min=20 "$@"
    exit
fi
# The quick tests on two workers, a file to each at a time (a file's tests share its module fixtures); then the slow
# ones (OpenRLHF's trainer with vLLM, Ray rollouts, soaks) one at a time: two of those side by side on two cores took
# 2-4x as long each (measured: docs/testing.md), more than running them in turn
python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow" --durations=0 --durations-min=20
python -m pytest -q -m slow --durations=0 --durations-min=20
