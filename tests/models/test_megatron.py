"""Megatron-LM checkpoints as model paths, and conversion both ways (hybridrl.models.megatron).

Ground truth comes from megatron-core itself where it is installed (`pip install megatron-core`; 0.16.1
tested): `megatron_builder.py` runs two gloo processes (TP=2) that build a real `GPTModel` with the
local (non-TransformerEngine) layer spec on CPU, save classic, PP=2-split and torch_dist checkpoints and
its logits, and strict-load checkpoints written by `hf-to-megatron`. CPU needed three shims (listed in
that file's docstring): torch.cuda.current_device -> "cpu", a no-op torch.cuda.synchronize, a no-op CUDA
RNG tracker, plus an explicit causal mask. Without megatron-core those tests skip; the rest use
checkpoints written by this package's writer or built by hand in Megatron's documented layouts.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from hybridrl.models.megatron import (MegatronCheckpointError, detect_layout, is_megatron_checkpoint,
                                      load_megatron_as_hf, load_megatron_hf_state_dict, load_megatron_state_dict,
                                      main_convert)
from hybridrl.models.megatron.classic import merge_tp
from hybridrl.models.megatron.hf_map import fuse_qkv, split_qkv
from hybridrl.models.megatron.spec import GptSpec
from hybridrl.models.tiny import save_tiny_model_dir

BUILDER = os.path.join(os.path.dirname(__file__), "megatron_builder.py")
INPUT_IDS = torch.tensor([[5, 17, 3, 60, 42, 8, 64, 1, 80, 77, 30, 2]])  # as in megatron_builder.py
ATOL = 1e-4


def _logits(model, ids: torch.Tensor = INPUT_IDS) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def _hf_to_megatron(hf_dir: str, out: str, tp: int, pp: int = 1, *extra: str) -> str:
    assert main_convert(["hf-to-megatron", "--input", hf_dir, "--output", out, "--tp", str(tp), "--pp", str(pp),
                         *extra]) == 0
    return out


# ---------------------------------------------------------------- megatron-core ground truth

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def megatron_built(tmp_path_factory) -> str:
    """Run megatron_builder.py once: native TP=2 checkpoints + hybridrl-written ones loaded by megatron-core."""
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        pytest.skip("megatron-core is not installed (pip install megatron-core)")
    root = str(tmp_path_factory.mktemp("megatron_core"))
    converted = []
    for arch in ("qwen2", "qwen3"):  # tied + QKV bias; QK layernorm
        save_tiny_model_dir(os.path.join(root, f"{arch}_hf"), arch=arch)
        converted.append(_hf_to_megatron(os.path.join(root, f"{arch}_hf"), os.path.join(root, f"{arch}_mg"), 2, 1,
                                         "--transformer-impl", "local"))
    cmd = [sys.executable, BUILDER, os.path.join(root, "native"), str(_free_port()), *converted]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        pytest.fail(f"megatron_builder.py failed:\n{proc.stderr[-4000:]}")
    return root


@pytest.mark.parametrize("kind,pp,layout_kind", [("classic", 1, "classic"), ("pp2", 2, "classic"),
                                                  ("dist", 1, "dist")])
def test_megatron_core_checkpoint_logits_match(megatron_built, kind, pp, layout_kind):
    path = os.path.join(megatron_built, "native", kind)
    layout = detect_layout(path)
    assert (layout.kind, layout.pp_size, layout.iteration) == (layout_kind, pp, 10)
    assert layout.kind == "dist" or layout.tp_size == 2
    model = load_megatron_as_hf(path)
    expected = torch.load(os.path.join(megatron_built, "native", "logits.pt"))
    assert type(model).__name__ == "LlamaForCausalLM" and not model.config.tie_word_embeddings
    assert model.config.num_key_value_heads == 2 and model.config.vocab_size == 128
    torch.testing.assert_close(_logits(model), expected, atol=ATOL, rtol=0)


def test_megatron_core_checkpoint_to_hf_dir_trims_vocab(megatron_built, tmp_path):
    """With an HF config of vocabulary 100, the padded rows 100..127 are dropped; logits are Megatron's."""
    config_dir = str(tmp_path / "cfg")
    LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, rms_norm_eps=1e-6, max_position_embeddings=64,
                tie_word_embeddings=False).save_pretrained(config_dir)
    out = str(tmp_path / "hf")
    argv = ["megatron-to-hf", "--input", os.path.join(megatron_built, "native", "classic"), "--output", out,
            "--hf-config", config_dir]
    assert main_convert(argv) == 0
    model = AutoModelForCausalLM.from_pretrained(out)
    expected = torch.load(os.path.join(megatron_built, "native", "logits.pt"))[..., :100]
    torch.testing.assert_close(_logits(model), expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_hf_to_megatron_loads_into_megatron_core(megatron_built, arch):
    """megatron-core strict-loaded our shards and its logits equal the HF model's (padded vocab aside)."""
    hf = AutoModelForCausalLM.from_pretrained(os.path.join(megatron_built, f"{arch}_hf"))
    megatron_logits = torch.load(os.path.join(megatron_built, f"{arch}_mg", "logits.pt"))
    assert megatron_logits.shape[-1] == 256  # 85 padded to a multiple of 128 * TP
    torch.testing.assert_close(_logits(hf), megatron_logits[..., :hf.config.vocab_size], atol=ATOL, rtol=0)


# ---------------------------------------------------------------- layouts by hand

def _spec(num_heads: int = 4, num_kv_heads: int = 2, head_dim: int = 3) -> GptSpec:
    return GptSpec(model_type="llama", num_layers=1, hidden_size=5, num_heads=num_heads, num_kv_heads=num_kv_heads,
                   head_dim=head_dim, ffn_hidden_size=4, vocab_size=8, tie_embeddings=False)


def test_qkv_follows_megatron_group_interleaving():
    """Rows: for each query group g, its query heads, then key head g, then value head g."""
    spec = _spec()
    q, k, v = (torch.arange(n * 3 * 5, dtype=torch.float32).view(n * 3, 5) + base
               for n, base in ((4, 0), (2, 1000), (2, 2000)))
    by_hand = torch.cat([q[0:6], k[0:3], v[0:3], q[6:12], k[3:6], v[3:6]])
    assert torch.equal(fuse_qkv(q, k, v, spec), by_hand)
    assert all(torch.equal(a, b) for a, b in zip(split_qkv(by_hand, spec), (q, k, v)))
    bias = torch.arange(24.0)
    assert torch.equal(fuse_qkv(*split_qkv(bias, spec), spec), bias)


def test_merge_tp_regroups_swiglu_and_splits_by_parallel_style():
    gate, up = torch.arange(8.0).view(4, 2), 100 + torch.arange(8.0).view(4, 2)
    ranks = [{"decoder.layers.0.mlp.linear_fc1.weight": torch.cat([gate[2 * r:2 * r + 2], up[2 * r:2 * r + 2]]),
              "decoder.layers.0.mlp.linear_fc2.weight": torch.full((2, 1), float(r)),
              "decoder.layers.0.input_layernorm.weight": torch.ones(2)} for r in range(2)]
    merged = merge_tp(ranks, "test")
    assert torch.equal(merged["decoder.layers.0.mlp.linear_fc1.weight"], torch.cat([gate, up]))
    assert torch.equal(merged["decoder.layers.0.mlp.linear_fc2.weight"], torch.tensor([[0.0, 1.0], [0.0, 1.0]]))
    assert torch.equal(merged["decoder.layers.0.input_layernorm.weight"], torch.ones(2))


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tiny_hf")
    return {arch: save_tiny_model_dir(str(root / arch), arch=arch, num_layers=4 if arch == "llama" else 2)
            for arch in ("llama", "qwen2", "qwen3", "mistral")}


@pytest.mark.parametrize("arch,tp,pp", [("llama", 2, 2), ("qwen2", 2, 1), ("qwen3", 1, 2), ("mistral", 2, 1)])
def test_hf_megatron_hf_round_trip_is_exact(tiny_dirs, tmp_path, arch, tp, pp):
    ckpt = _hf_to_megatron(tiny_dirs[arch], str(tmp_path / "mg"), tp, pp, "--iteration", "7")
    layout = detect_layout(ckpt)
    assert (layout.tp_size, layout.pp_size, layout.iteration) == (tp, pp, 7)
    assert main_convert(["megatron-to-hf", "--input", ckpt, "--output", str(tmp_path / "hf"),
                         "--tokenizer", tiny_dirs[arch]]) == 0
    original = AutoModelForCausalLM.from_pretrained(tiny_dirs[arch])
    restored = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"))
    assert type(restored) is type(original)
    a, b = original.state_dict(), restored.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert os.path.isfile(tmp_path / "hf" / "tokenizer.json")


def _edit_shards(ckpt_dir: str, edit) -> None:
    """Apply edit(ckpt_dict) to every shard file under ckpt_dir."""
    for dirpath, _, files in os.walk(ckpt_dir):
        if "model_optim_rng.pt" in files:
            path = os.path.join(dirpath, "model_optim_rng.pt")
            ckpt = torch.load(path, weights_only=False)
            edit(ckpt)
            torch.save(ckpt, path)


def _to_legacy(ckpt: dict) -> None:
    """Rewrite an mcore-named shard the way pre-mcore Megatron-LM saved it (nested, legacy names)."""
    encoder, lm = {}, {}
    for key, value in ckpt.pop("model").items():
        if value is None:
            continue
        if key.startswith("decoder.layers."):
            name = (key[len("decoder."):].replace("self_attention.linear_qkv", "self_attention.query_key_value")
                    .replace("linear_proj", "dense").replace("pre_mlp_layernorm", "post_attention_layernorm")
                    .replace("linear_fc1", "dense_h_to_4h").replace("linear_fc2", "dense_4h_to_h"))
            encoder[name] = value
        elif key == "decoder.final_layernorm.weight":
            encoder["final_layernorm.weight"] = value
        elif key == "embedding.word_embeddings.weight":
            lm["embedding"] = {"word_embeddings": {"weight": value}}
        elif key == "output_layer.weight":
            lm["output_layer"] = {"weight": value}
    lm["encoder"] = encoder
    ckpt["model"] = {"language_model": lm}


def test_legacy_megatron_lm_names_load(tiny_dirs, tmp_path):
    ckpt = _hf_to_megatron(tiny_dirs["llama"], str(tmp_path / "mg"), 2, 2, "--transformer-impl", "local")
    _edit_shards(ckpt, _to_legacy)
    original = AutoModelForCausalLM.from_pretrained(tiny_dirs["llama"])
    torch.testing.assert_close(_logits(load_megatron_as_hf(ckpt)), _logits(original), atol=ATOL, rtol=0)


def test_virtual_pipeline_chunks_load_in_chunk_major_order(tiny_dirs, tmp_path):
    """PP=2 x VPP=2 over 4 layers: stage p holds model0 = layer p and model1 = layer 2 + p."""
    ckpt = _hf_to_megatron(tiny_dirs["llama"], str(tmp_path / "mg"), 1, 1)
    state = torch.load(os.path.join(ckpt, "release", "mp_rank_00", "model_optim_rng.pt"), weights_only=False)
    model = state.pop("model")

    def chunk(layer: int, extra: tuple[str, ...]) -> dict:
        out = {k.replace(f"decoder.layers.{layer}.", "decoder.layers.0."): v for k, v in model.items()
               if k.startswith(f"decoder.layers.{layer}.")}
        return {**out, **{k: v for k, v in model.items() if k.startswith(extra)}}

    vpp = str(tmp_path / "vpp")
    stages = [(chunk(0, ("embedding.",)), chunk(2, ())), (chunk(1, ()), chunk(3, ("decoder.final", "output_layer")))]
    state["args"].pipeline_model_parallel_size = 2
    for p, (first, second) in enumerate(stages):
        os.makedirs(os.path.join(vpp, "release", f"mp_rank_00_{p:03d}"))
        torch.save({**state, "model0": first, "model1": second},
                   os.path.join(vpp, "release", f"mp_rank_00_{p:03d}", "model_optim_rng.pt"))
    with open(os.path.join(vpp, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("release")
    original = AutoModelForCausalLM.from_pretrained(tiny_dirs["llama"])
    torch.testing.assert_close(_logits(load_megatron_as_hf(vpp)), _logits(original), atol=ATOL, rtol=0)


@pytest.mark.parametrize("singleton_swiglu", [False, True])
def test_torch_dist_layout_without_megatron(tiny_dirs, tmp_path, singleton_swiglu):
    """A torch_dist store written with plain torch.distributed.checkpoint: stacked layers, TE names."""
    import torch.distributed.checkpoint as dcp

    ckpt = _hf_to_megatron(tiny_dirs["qwen2"], str(tmp_path / "mg"), 1)
    saved = torch.load(os.path.join(ckpt, "release", "mp_rank_00", "model_optim_rng.pt"), weights_only=False)
    flat = {k: v for k, v in saved["model"].items() if v is not None}
    stacked = {k: v for k, v in flat.items() if not k.startswith("decoder.layers.")}
    for name in {k.split(".", 3)[3] for k in flat if k.startswith("decoder.layers.")}:
        stacked[f"decoder.layers.{name}"] = torch.stack([flat[f"decoder.layers.{i}.{name}"] for i in range(2)])
    if singleton_swiglu:
        gate, up = torch.chunk(stacked.pop("decoder.layers.mlp.linear_fc1.weight"), 2, dim=1)
        stacked.update({"decoder.layers.mlp.linear_fc1.weight_w": gate, "decoder.layers.mlp.linear_fc1.weight_v": up})
    stacked["optimizer.state.exp_avg.embedding"] = torch.zeros(3)  # ignored: not a model tensor
    iter_dir = str(tmp_path / "dist" / "iter_0000003")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(stacked, checkpoint_id=iter_dir, no_dist=True)
    torch.save({"args": saved["args"]}, os.path.join(iter_dir, "common.pt"))
    assert detect_layout(iter_dir).kind == "dist" and is_megatron_checkpoint(iter_dir)
    original = AutoModelForCausalLM.from_pretrained(tiny_dirs["qwen2"])
    torch.testing.assert_close(_logits(load_megatron_as_hf(iter_dir)), _logits(original), atol=ATOL, rtol=0)


# ---------------------------------------------------------------- detection and errors

@pytest.fixture()
def tp2_ckpt(tiny_dirs, tmp_path) -> str:
    return _hf_to_megatron(tiny_dirs["qwen2"], str(tmp_path / "mg"), 2)


def test_is_megatron_checkpoint(tiny_dirs, tp2_ckpt, tmp_path):
    assert is_megatron_checkpoint(tp2_ckpt) and is_megatron_checkpoint(os.path.join(tp2_ckpt, "release"))
    assert not is_megatron_checkpoint(tiny_dirs["qwen2"])
    assert not is_megatron_checkpoint(str(tmp_path / "missing"))
    assert not is_megatron_checkpoint(os.path.join(tiny_dirs["qwen2"], "config.json"))


def test_state_dict_loader_returns_merged_weights_and_args(tp2_ckpt):
    state, args, layout = load_megatron_state_dict(tp2_ckpt)
    assert layout.tp_size == 2 and args.tensor_model_parallel_size == 2
    assert state["decoder.layers.0.self_attention.linear_qkv.weight"].shape == ((4 + 2 * 2) * 16, 64)


def test_hf_state_dict_builds_a_value_model(tp2_ckpt):
    from transformers import AutoModelForTokenClassification

    config, state = load_megatron_hf_state_dict(tp2_ckpt)
    config.num_labels = 1
    missing, unexpected = AutoModelForTokenClassification.from_config(config).load_state_dict(state, strict=False)
    assert sorted(missing) == ["score.bias", "score.weight"] and unexpected == []  # tied: no lm_head


def _expect_error(path: str, *fragments: str) -> None:
    with pytest.raises(MegatronCheckpointError) as info:
        load_megatron_as_hf(path)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_errors_for_missing_pieces(tp2_ckpt, tmp_path):
    _expect_error(str(tmp_path), "not a Megatron checkpoint", "supported")
    os.remove(os.path.join(tp2_ckpt, "latest_checkpointed_iteration.txt"))
    _expect_error(tp2_ckpt, "no latest_checkpointed_iteration.txt", "release")
    with open(os.path.join(tp2_ckpt, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("20")
    _expect_error(tp2_ckpt, "iter_0000020/", "does not exist")
    iter_dir = os.path.join(tp2_ckpt, "release")
    shutil.rmtree(os.path.join(iter_dir, "mp_rank_01"))  # leaves one shard: args still say TP=2
    _expect_error(iter_dir, "tensor_model_parallel_size=1", "say 2")


def test_errors_for_mixed_and_expert_parallel_dirs(tp2_ckpt):
    iter_dir = os.path.join(tp2_ckpt, "release")
    shutil.copytree(os.path.join(iter_dir, "mp_rank_00"), os.path.join(iter_dir, "mp_rank_00_001"))
    _expect_error(iter_dir, "mixes mp_rank_XX/ and mp_rank_XX_YYY/")
    shutil.move(os.path.join(iter_dir, "mp_rank_00_001"), os.path.join(iter_dir, "mp_rank_00_000_001"))
    _expect_error(iter_dir, "expert-parallel", "MoE")
    shutil.rmtree(os.path.join(iter_dir, "mp_rank_00_000_001"))
    shutil.copytree(os.path.join(iter_dir, "mp_rank_01"), os.path.join(iter_dir, "mp_rank_03"))
    _expect_error(iter_dir, "(2, 0)", "missing")


@pytest.mark.parametrize("change,fragment", [
    ({"num_experts": 8}, "num_experts=8"),
    ({"normalization": "LayerNorm"}, "normalization='LayerNorm'"),
    ({"position_embedding_type": "learned_absolute"}, "position_embedding_type"),
    ({"swiglu": False}, "swiglu=False"),
])
def test_errors_for_unsupported_architectures(tp2_ckpt, change, fragment):
    _edit_shards(tp2_ckpt, lambda ckpt: ckpt["args"].__dict__.update(change))
    _expect_error(tp2_ckpt, fragment, "supported")


def test_errors_for_old_checkpoint_version_and_unknown_weights(tp2_ckpt):
    _edit_shards(tp2_ckpt, lambda ckpt: ckpt["model"].update({"decoder.layers.0.mlp.linear_fc2.bias": torch.zeros(64)}))
    _expect_error(tp2_ckpt, "does not understand", "linear_fc2.bias")
    _edit_shards(tp2_ckpt, lambda ckpt: ckpt.update(checkpoint_version=1.0))
    _expect_error(tp2_ckpt, "checkpoint_version 1.0")


def test_error_for_hf_config_that_does_not_match(tp2_ckpt, tmp_path):
    LlamaConfig(vocab_size=85, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2).save_pretrained(str(tmp_path / "cfg"))
    with pytest.raises(MegatronCheckpointError, match="ffn_hidden_size: checkpoint 128 vs HF config 96"):
        load_megatron_as_hf(tp2_ckpt, hf_config_path=str(tmp_path / "cfg"))


def test_error_for_zarr_distributed_checkpoint(tmp_path):
    iter_dir = tmp_path / "iter_0000001"
    iter_dir.mkdir()
    (iter_dir / ".metadata").write_text("")
    (iter_dir / "metadata.json").write_text('{"sharded_backend": "zarr"}')
    _expect_error(str(iter_dir), "backend 'zarr'", "torch_dist")


def test_convert_cli_errors_are_one_line(tmp_path, capsys):
    phi3 = save_tiny_model_dir(str(tmp_path / "phi3"), arch="phi3")
    assert main_convert(["hf-to-megatron", "--input", phi3, "--output", str(tmp_path / "out"), "--tp", "1"]) == 1
    assert "model_type='phi3'" in capsys.readouterr().err
    assert main_convert(["megatron-to-hf", "--input", str(tmp_path), "--output", str(tmp_path / "o")]) == 1
    assert main_convert(["hf-to-megatron", "--input", phi3, "--output", str(tmp_path / "o")]) == 2  # no --tp
    qwen2 = save_tiny_model_dir(str(tmp_path / "qwen2"), arch="qwen2")
    assert main_convert(["hf-to-megatron", "--input", qwen2, "--output", str(tmp_path / "o3"), "--tp", "3"]) == 1
    assert "not divisible by the parallel size 3" in capsys.readouterr().err
