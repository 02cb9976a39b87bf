"""Builds real Megatron checkpoints with megatron-core on CPU (run as a script by test_megatron.py).

usage: python megatron_builder.py OUT_DIR PORT [CONVERTED_CKPT_DIR ...]

Two gloo processes form a TP=2 group. Rank r builds a small Llama-like `GPTModel` (local layer spec:
RMSNorm, SwiGLU, RoPE, GQA 4 heads / 2 groups, untied, vocabulary 128) and writes under OUT_DIR:
- classic/iter_0000010/mp_rank_0r/model_optim_rng.pt (+ tracker): `model.state_dict()` and Megatron-style args;
- pp2/iter_0000010/mp_rank_0r_00p/...: the same weights split into two pipeline stages;
- dist/iter_0000010/: `dist_checkpointing.save` of `model.sharded_state_dict()` (torch_dist) + args;
- logits.pt: the model's full-vocabulary logits on `INPUT_IDS`.
Each CONVERTED_CKPT_DIR (written by `hybridrl convert hf-to-megatron --transformer-impl local --tp 2`) is
loaded strictly into a GPTModel built from its own args; its logits go to CONVERTED_CKPT_DIR/logits.pt.

megatron-core 0.16 on a CPU-only torch needs three shims, applied only inside these processes:
`torch.cuda.current_device` -> "cpu" (RoPE moves `inv_freq` to it), `torch.cuda.synchronize` -> no-op
(dist_checkpointing.save), and a no-op CUDA RNG tracker (attention forks the "model-parallel-rng" state).
An explicit causal mask is passed because the default one is created with device="cuda".
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import torch

INPUT_IDS = [[5, 17, 3, 60, 42, 8, 64, 1, 80, 77, 30, 2]]  # < 85, the tiny tokenizer's vocabulary
ITER = "iter_0000010"


def _cpu_shims() -> None:
    from megatron.core.tensor_parallel import random as mrandom

    class _NoCudaRng:
        def fork(self, name: str | None = None):
            return contextlib.nullcontext()

    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *a, **k: None
    mrandom._CUDA_RNG_STATE_TRACKER = _NoCudaRng()
    mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


def native_args() -> argparse.Namespace:
    """What Megatron-LM's argument parser records for this model (the fields the converter reads)."""
    return argparse.Namespace(
        num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, group_query_attention=True,
        num_query_groups=2, kv_channels=16, padded_vocab_size=128, vocab_size=None, make_vocab_size_divisible_by=64,
        max_position_embeddings=64, seq_length=64, swiglu=True, normalization="RMSNorm", norm_epsilon=1e-6,
        position_embedding_type="rope", rotary_base=10000, rotary_percent=1.0, rotary_interleaved=False,
        untie_embeddings_and_output_weights=True, add_bias_linear=False, add_qkv_bias=False, qk_layernorm=False,
        num_experts=None, tensor_model_parallel_size=2, pipeline_model_parallel_size=1,
        virtual_pipeline_model_parallel_size=None, transformer_impl="local", params_dtype=torch.float32,
        bf16=False, fp16=False)


def build_model(args: argparse.Namespace):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=args.num_layers, hidden_size=args.hidden_size, num_attention_heads=args.num_attention_heads,
        num_query_groups=args.num_query_groups, kv_channels=args.kv_channels, ffn_hidden_size=args.ffn_hidden_size,
        normalization="RMSNorm", layernorm_epsilon=args.norm_epsilon, gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, add_bias_linear=False, add_qkv_bias=args.add_qkv_bias,
        qk_layernorm=args.qk_layernorm, hidden_dropout=0.0, attention_dropout=0.0, use_cpu_initialization=True,
        perform_initialization=True, bias_activation_fusion=False, masked_softmax_fusion=False,
        bias_dropout_fusion=False, apply_rope_fusion=False, gradient_accumulation_fusion=False,
        tensor_model_parallel_size=2, params_dtype=torch.float32)
    spec = get_gpt_layer_local_spec(normalization="RMSNorm", qk_layernorm=args.qk_layernorm)
    return GPTModel(config, spec, vocab_size=args.padded_vocab_size, max_sequence_length=args.max_position_embeddings,
                    position_embedding_type="rope", rotary_base=args.rotary_base,
                    share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights).eval()


def full_logits(model) -> torch.Tensor:
    """(1, T, padded_vocab) logits: each TP rank computes a vocabulary slice; gather them."""
    import torch.distributed as dist

    ids = torch.tensor(INPUT_IDS)
    seq = ids.shape[1]
    mask = torch.triu(torch.ones(1, 1, seq, seq), diagonal=1).bool()  # True = masked
    with torch.no_grad():
        local = model(ids, torch.arange(seq).unsqueeze(0), attention_mask=mask)
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local.contiguous())
    return torch.cat(parts, dim=-1)


def _save(path: str, obj: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(obj, path)


def _tracker(root: str) -> None:
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("10")


def save_classic(out: str, rank: int, state: dict, args: argparse.Namespace) -> None:
    ckpt = {"args": args, "checkpoint_version": 3.0, "iteration": 10, "model": state}
    _save(os.path.join(out, "classic", ITER, f"mp_rank_{rank:02d}", "model_optim_rng.pt"), ckpt)
    stage0 = {k: v for k, v in state.items() if k.startswith(("embedding.", "decoder.layers.0."))}
    stage1 = {k.replace("decoder.layers.1.", "decoder.layers.0."): v for k, v in state.items()
              if k.startswith(("decoder.layers.1.", "decoder.final_layernorm", "output_layer."))}
    pp_args = argparse.Namespace(**{**vars(args), "pipeline_model_parallel_size": 2})
    for stage, part in enumerate((stage0, stage1)):
        _save(os.path.join(out, "pp2", ITER, f"mp_rank_{rank:02d}_{stage:03d}", "model_optim_rng.pt"),
              {"args": pp_args, "checkpoint_version": 3.0, "iteration": 10, "model": part})
    if rank == 0:
        _tracker(os.path.join(out, "classic"))
        _tracker(os.path.join(out, "pp2"))


def save_dist(out: str, rank: int, model, args: argparse.Namespace) -> None:
    from megatron.core import dist_checkpointing

    path = os.path.join(out, "dist", ITER)
    os.makedirs(path, exist_ok=True)
    dist_checkpointing.save({"model": model.sharded_state_dict(), "args": args}, path)
    if rank == 0:
        _tracker(os.path.join(out, "dist"))


def check_converted(ckpt_dir: str, rank: int) -> None:
    """Strict-load a hybridrl-written shard into a GPTModel built from its args; write its logits."""
    release = os.path.join(ckpt_dir, "release", f"mp_rank_{rank:02d}", "model_optim_rng.pt")
    ckpt = torch.load(release, weights_only=False)
    model = build_model(ckpt["args"])
    model.load_state_dict(ckpt["model"], strict=True)
    logits = full_logits(model)
    if rank == 0:
        torch.save(logits, os.path.join(ckpt_dir, "logits.pt"))


def worker(rank: int, out: str, port: int, converted: list[str]) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    _cpu_shims()
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
    torch.manual_seed(1234)  # CPU init builds each full weight from this seed, then slices it per rank
    args = native_args()
    model = build_model(args)
    logits = full_logits(model)
    save_classic(out, rank, model.state_dict(), args)
    save_dist(out, rank, model, args)
    if rank == 0:
        torch.save(logits, os.path.join(out, "logits.pt"))
    for ckpt_dir in converted:
        check_converted(ckpt_dir, rank)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    # Import megatron-core once here and fork the two ranks: importing it takes ~10 s per process.
    import megatron.core.models.gpt  # noqa: F401

    out_dir, port = sys.argv[1], int(sys.argv[2])
    mp.start_processes(worker, args=(out_dir, port, sys.argv[3:]), nprocs=2, start_method="fork")
