#!/usr/bin/env bash
# Install hybridrl and its test dependencies. Installs a CPU build of torch first when torch is absent,
# so a bare `torch` requirement does not pull a multi-GB CUDA build on a CPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
if ! "$PY" -c "import hybridrl, pytest, matplotlib, pyarrow, transformers, peft, ray, megatron.core, triton" >/dev/null 2>&1 \
   || [ "${HYBRIDRL_REINSTALL:-0}" = 1 ]; then
  "$PY" -m pip install -q -e ".[test]"
fi
