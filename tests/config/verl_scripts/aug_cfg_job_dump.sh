#!/usr/bin/env bash
# expect: pass
# A config dumped by verl (`--cfg job`) run again by name, as verl users keep them.
set -xeuo pipefail
DUMPS="$(cd "$(dirname "$0")" && pwd)/../fixtures"
python3 -m verl.trainer.main_ppo --config-path="$DUMPS" --config-name=verl_aug_dump trainer.n_gpus_per_node=4 "$@"
