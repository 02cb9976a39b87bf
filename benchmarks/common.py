"""Shared benchmark helpers: the Qwen2.5-0.5B-shaped config, GSM8K prompts tokenized offline, timing, JSON out.

Benchmarks run on machines without hub access, so prompts use a deterministic stand-in tokenizer
(`hash_tokenize`) and models get random weights of the real shape.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from hybridrl.data.preprocess.gsm8k import INSTRUCTION
from hybridrl.utils import memory

DATA_DIR = Path(__file__).resolve().parent / "data"
GSM8K_64 = DATA_DIR / "gsm8k_train_64.jsonl"
H200_BANDWIDTH = 4.3e12  # B/s, device copy measured on an H200 (DESIGN.md §10)
H200_BF16_FLOPS = 790e12
# Qwen2.5-Instruct's chat template around one user turn, as text: the stand-in tokenizer turns it into
# ~38 tokens, so prompts come out ~110 tokens long like real GSM8K prompts (verl logs: mean ~105).
QWEN_CHAT = ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
             "<|im_end|>\n<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n")
QWEN_EOS_ID = 151645  # <|im_end|>
QWEN_PAD_ID = 151643  # <|endoftext|>

QWEN25_05B = dict(
    vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, intermediate_size=4864, max_position_embeddings=32768, rope_theta=1e6,
    rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=QWEN_EOS_ID,
    pad_token_id=QWEN_PAD_ID,
)
# CPU smoke-test shape (--quick): same architecture and GQA ratio (14 / 2 heads of dim 16), toy sizes.
QUICK = dict(QWEN25_05B, vocab_size=1024, hidden_size=224, num_hidden_layers=2, num_attention_heads=14,
             num_key_value_heads=2, intermediate_size=256, max_position_embeddings=2048,
             bos_token_id=1, eos_token_id=2, pad_token_id=0)


def qwen2_config(quick: bool = False, **overrides: Any):
    """A transformers Qwen2Config: Qwen2.5-0.5B's shape, or a toy one with `quick`."""
    from transformers import Qwen2Config

    return Qwen2Config(**{**(QUICK if quick else QWEN25_05B), **overrides})


def model_shapes(quick: bool) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of the model (tied lm_head once, as the actor's gather yields them)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(qwen2_config(quick))
    return {name: tuple(param.shape) for name, param in model.named_parameters()}


def build_random_model(config, dtype: torch.dtype, device: str, seed: int = 0) -> torch.nn.Module:
    """A randomly initialised causal LM of `config`, built directly on `device`, in eval mode, attending as
    hybridrl's loaded models do (`hybridrl.models.attention`)."""
    from transformers import AutoModelForCausalLM

    from hybridrl.models.attention import use_shape_agnostic_sdpa

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    use_shape_agnostic_sdpa(model)
    return model.eval().requires_grad_(False)


def load_gsm8k_questions(path: str | Path = GSM8K_64, limit: int = 64) -> list[str]:
    """The first `limit` questions of a GSM8K jsonl file (rows with a "question" field)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"GSM8K file {path} not found; pass --gsm8k PATH to a jsonl with 'question' rows")
    questions = []
    with path.open() as f:
        for line in f:
            if line.strip():
                questions.append(json.loads(line)["question"])
            if len(questions) == limit:
                break
    if len(questions) < limit:
        raise ValueError(f"{path} has {len(questions)} questions, the benchmark needs {limit}")
    return questions


def hash_tokenize(text: str, vocab_size: int, chars_per_token: int = 4, reserved: int = 0) -> list[int]:
    """Stand-in tokenizer: each run of `chars_per_token` characters -> crc32 mod the vocab.

    Deterministic across processes (unlike `hash`); ids land in [reserved, vocab_size). Real BPE gives
    ~4 characters per token on English text, so lengths are realistic; the ids themselves are not.
    """
    span = vocab_size - reserved
    return [reserved + zlib.crc32(text[i:i + chars_per_token].encode()) % span
            for i in range(0, len(text), chars_per_token)]


def gsm8k_prompts(vocab_size: int, num_prompts: int = 64, path: str | Path = GSM8K_64,
                  chat: bool = True) -> list[list[int]]:
    """verl's GSM8K prompts (question + " " + instruction, in Qwen's chat template) as stand-in token ids."""
    prompts = []
    for question in load_gsm8k_questions(path, num_prompts):
        content = question + " " + INSTRUCTION
        prompts.append(hash_tokenize(QWEN_CHAT.format(content=content) if chat else content, vocab_size,
                                     reserved=min(16, vocab_size // 8)))
    return prompts


def sync(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def timed(device: str | torch.device, into: dict[str, float], key: str) -> Iterator[None]:
    """Wall-clock seconds of the block (device synchronised on both ends) stored in `into[key]`."""
    sync(device)
    start = time.perf_counter()
    yield
    sync(device)
    into[key] = time.perf_counter() - start


def reset_peak_memory(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        memory.reset_peak(torch.device(device))


def peak_memory_gb(device: str | torch.device) -> float | None:
    """PyTorch's peak allocated memory plus the KV cache mapped outside its allocator (hybridrl.utils.memory)."""
    if torch.device(device).type != "cuda":
        return None
    return memory.peak_allocated_bytes(torch.device(device)) / 2**30


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes of the distinct parameters (tied embeddings counted once: read once per decode step, as the LM head)."""
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())


def kv_bytes_per_token(config, dtype: torch.dtype) -> int:
    """K and V of every layer for one token: 2 * L * Hkv * head_dim * itemsize (12,288 B for Qwen2.5-0.5B bf16)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * itemsize


def environment(device: str) -> dict[str, Any]:
    """What ran the benchmark: versions and the device name."""
    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__, "device": device,
                            "cpu_count": os.cpu_count()}
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if torch.device(device).type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    return info


def fill_defaults(args: Any, quick: dict[str, Any], full: dict[str, Any]) -> None:
    """Set each option the user left at None to its value for the run's size (`args.quick` or not)."""
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def print_tables(paths: list[str], markdown_table: Callable[[list[dict[str, Any]]], str]) -> dict[str, Any]:
    """`--table`: print `markdown_table` of the reports (JSON files this script wrote) and return them."""
    reports = []
    for path in paths:
        with open(path) as f:
            reports.append(json.load(f))
    print(markdown_table(reports))
    return {"reports": reports}


def emit(result: dict[str, Any], out: str | None = None) -> None:
    """Print the result as one JSON object on stdout (and write it to `out` when given)."""
    text = json.dumps(result, indent=2, sort_keys=False, default=float)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def graph_us(call: Callable[[int], Any], copies: int, reps: int = 5) -> float:
    """Microseconds per call of `call(i)` for i in range(copies), replayed from one CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(copies):
            call(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(copies):
            call(i)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (reps * copies)
