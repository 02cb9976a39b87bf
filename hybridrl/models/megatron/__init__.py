"""Megatron-LM checkpoints (classic `mp_rank_*` and torch_dist layouts) as model paths, and conversion
between Megatron and HF layouts (`hybridrl convert megatron-to-hf | hf-to-megatron`)."""

from hybridrl.models.megatron.convert_cli import main_convert
from hybridrl.models.megatron.layout import (MegatronCheckpointError, MegatronLayout, detect_layout,
                                            is_megatron_checkpoint)
from hybridrl.models.megatron.load import (load_megatron_as_hf, load_megatron_hf_state_dict,
                                          load_megatron_state_dict)
from hybridrl.models.megatron.writer import save_hf_as_megatron

__all__ = ["MegatronCheckpointError", "MegatronLayout", "detect_layout", "is_megatron_checkpoint",
           "load_megatron_as_hf", "load_megatron_hf_state_dict", "load_megatron_state_dict", "main_convert",
           "save_hf_as_megatron"]
