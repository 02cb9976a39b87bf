"""Lines the loader logs about accepted settings whose effect differs from verl's."""

from __future__ import annotations

from hybridrl.config import load_config
from hybridrl.config.notices import config_notices


def test_prefix_grouper_is_accepted_with_one_line_saying_what_runs():
    notices = config_notices(load_config(["actor_rollout_ref.actor.use_prefix_grouper=true"]))
    grouper = [line for line in notices if "use_prefix_grouper" in line]
    assert grouper == ["actor_rollout_ref.actor.use_prefix_grouper=true: hybridrl's training forward computes each "
                       "sequence whole, prompt included: the same log-probs and gradients as verl's PrefixGrouper, "
                       "without its shared-prefix speed-up"]
    assert not [line for line in config_notices(load_config()) if "use_prefix_grouper" in line]
