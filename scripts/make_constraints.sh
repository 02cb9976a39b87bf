#!/usr/bin/env bash
# Regenerate constraints.txt: a fresh virtualenv, every extra installed from PyPI (torch 2.13.0 as pinned),
# then `pip freeze`. The local-version tag (+cpu) is dropped so that a GPU machine resolves PyPI's CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=$(mktemp -d)/venv
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q "torch==2.13.0"
"$VENV/bin/pip" install -q -e ".[test,plot,docs,lora,ray,megatron]" pytest-randomly omegaconf hydra-core
{
  sed -n '1,/^$/p' constraints.txt | grep '^#'
  "$VENV/bin/pip" freeze --exclude-editable | grep -v '^hybridrl' | sed -E 's/^(torch==[0-9.]+)\+[a-z0-9]+$/\1/'
} > constraints.txt.new
mv constraints.txt.new constraints.txt
rm -rf "$(dirname "$VENV")"
echo "wrote constraints.txt ($(grep -vc '^#' constraints.txt) pins)"
