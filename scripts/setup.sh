#!/usr/bin/env bash
# Install hybridrl into the current Python environment at the versions CI tests (constraints.txt).
#   scripts/setup.sh quickstart   core + plotting: what `make quickstart` needs
#   scripts/setup.sh test         the test extras (ray, peft, megatron-core, triton, pytest, mkdocs, ...)
# torch is pinned to 2.13.0: a CPU-only machine gets the CPU build where its pip finds one, a GPU machine PyPI's
# CUDA build. Use a virtualenv: `python3 -m venv .venv && . .venv/bin/activate`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
case "${1:-test}" in
  quickstart) extras="plot" ;;
  test) extras="test" ;;
  *) echo "usage: scripts/setup.sh [quickstart|test]" >&2; exit 2 ;;
esac
"$PY" -m pip install -q -c constraints.txt -e ".[$extras]"
