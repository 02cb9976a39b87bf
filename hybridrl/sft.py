"""A small supervised fine-tuning entry point (`hybridrl sft`), used for the quickstart's warm start.

Rows are verl-format prompts; the target response is a column (default `reward_model.ground_truth`).
The loss is next-token cross-entropy on the response tokens and the EOS token only.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import sys

import torch

from hybridrl.data.dataset import RLDataset
from hybridrl.errors import run_with_actionable_errors
from hybridrl.logging.log import get_logger
from hybridrl.models.hf import load_causal_lm, load_tokenizer

log = get_logger("hybridrl.sft")
NO_PROMPT_LIMIT = sys.maxsize  # max_prompt_length=None: every prompt is kept whole


def _response_text(row: dict, response_key: str) -> str:
    value = row
    for part in response_key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"row has no {response_key!r} (missing {part!r}); set --response-key to the column "
                           f"holding the target response")
        value = value[part]
    return str(value)


def build_examples(dataset: RLDataset, tokenizer, response_key: str) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, response ids + EOS) for every row."""
    examples = []
    for i in range(len(dataset)):
        row = dataset[i]
        response = tokenizer(_response_text(row, response_key), add_special_tokens=False).input_ids
        examples.append((row["input_ids"].tolist(), response + [tokenizer.eos_token_id]))
    return examples


def collate_sft(examples, pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded input ids, attention mask, and labels (-100 on prompt and padding)."""
    width = max(len(p) + len(r) for p, r in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for row, (prompt, response) in enumerate(examples):
        seq = prompt + response
        ids[row, :len(seq)] = torch.tensor(seq)
        labels[row, len(prompt):len(seq)] = torch.tensor(response)
        mask[row, :len(seq)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def run_sft(model_path: str, train_files: list[str | Path], out_dir: str, *, epochs: float = 1.0, lr: float = 1e-3,
            batch_size: int = 64, response_key: str = "reward_model.ground_truth", seed: int = 0,
            max_prompt_length: int | None = None, truncation: str = "error") -> dict[str, float]:
    """Train and save an HF model directory to `out_dir`; returns {'loss_first', 'loss_last', 'steps'}.

    `max_prompt_length` None keeps every prompt whole; a limit applies `truncation` as `data.truncation` does
    (error: one DatasetError listing every longer prompt before training starts).
    """
    torch.manual_seed(seed)
    tokenizer = load_tokenizer(model_path)
    model = load_causal_lm(model_path)
    limit = NO_PROMPT_LIMIT if max_prompt_length is None else max_prompt_length
    dataset = RLDataset(train_files, tokenizer, max_prompt_length=limit, truncation=truncation)
    examples = build_examples(dataset, tokenizer, response_key)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    num_steps = max(1, int(epochs * len(examples) / batch_size))
    generator = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for step in range(num_steps):
        idx = torch.randint(len(examples), (batch_size,), generator=generator).tolist()
        loss = model(**collate_sft([examples[i] for i in idx], tokenizer.pad_token_id)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if step % max(1, num_steps // 5) == 0:
            log.info(f"sft step {step + 1}/{num_steps} loss {losses[-1]:.4f}")
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {"loss_first": losses[0], "loss_last": losses[-1], "steps": float(num_steps)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hybridrl sft", description=__doc__)
    parser.add_argument("--model", required=True, help="HF model directory to start from")
    parser.add_argument("--train-files", nargs="+", required=True, help="verl-format parquet/jsonl files")
    parser.add_argument("--out", required=True, help="output HF model directory")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--response-key", default="reward_model.ground_truth")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-prompt-length", type=int, default=None,
                        help="prompt tokens kept (default: no limit, every prompt whole)")
    parser.add_argument("--truncation", default="error", choices=["error", "left", "right", "middle"],
                        help="a prompt over --max-prompt-length: error lists them all before training (default), or "
                             "cut it as data.truncation does")
    args = parser.parse_args(argv)

    def train() -> None:
        result = run_sft(args.model, args.train_files, args.out, epochs=args.epochs, lr=args.lr,
                         batch_size=args.batch_size, response_key=args.response_key, seed=args.seed,
                         max_prompt_length=args.max_prompt_length, truncation=args.truncation)
        log.info(f"sft done: {result}; the model is in {args.out}")

    return run_with_actionable_errors(train)
