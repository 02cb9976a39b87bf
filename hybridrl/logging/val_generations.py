"""verl's `trainer.log_val_generations`: N (input, output, score) samples of each validation, to the console and
every tracker (W&B table, TensorBoard text, MLflow artifact, SwanLab table, the JSONL file); and verl's
`trainer.validation_data_dir`: every validation sample as `<step>.jsonl`.

The samples are chosen as verl's `_maybe_log_val_generations` chooses them: sorted by input text, shuffled with
`np.random.RandomState(42)`, the first N; so the same prompts are shown at every validation and their outputs can
be compared across steps.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

Sample = tuple[str, str, float]
CONSOLE_TEXT_LIMIT = 500  # characters of one input/output on the console; the trackers get the whole text


class GenerationsTracker(Protocol):
    def log_generations(self, samples: list[Sample], step: int) -> None: ...


def select_val_generations(inputs: Sequence[str], outputs: Sequence[str], scores: Sequence[float],
                           count: int) -> list[Sample]:
    """verl's choice of `count` samples: sort by input, shuffle with RandomState(42), take the first `count`."""
    if not len(inputs) == len(outputs) == len(scores):
        raise ValueError(f"validation generations need one input, output and score per sample, got "
                         f"{len(inputs)}, {len(outputs)}, {len(scores)}")
    samples = [(str(i), str(o), float(s)) for i, o, s in zip(inputs, outputs, scores)]
    samples.sort(key=lambda sample: sample[0])
    np.random.RandomState(42).shuffle(samples)  # type: ignore[arg-type]  # a list shuffles in place like an array
    return samples[:count]


def _shorten(text: str) -> str:
    """`text` up to CONSOLE_TEXT_LIMIT characters, with the number left out said (never cut silently)."""
    if len(text) <= CONSOLE_TEXT_LIMIT:
        return text
    return f"{text[:CONSOLE_TEXT_LIMIT]}... (+{len(text) - CONSOLE_TEXT_LIMIT} characters; whole in the trackers)"


def format_generations(samples: list[Sample], step: int) -> str:
    """The console block: one numbered sample per paragraph, input and output indented under their score."""
    lines = [f"validation generations at step {step} ({len(samples)} samples, trainer.log_val_generations):"]
    for number, (prompt, output, score) in enumerate(samples, start=1):
        lines.append(f"  [{number}] score {score:.4g}")
        lines.append("      input:  " + _shorten(prompt).replace("\n", "\n              "))
        lines.append("      output: " + _shorten(output).replace("\n", "\n              "))
    return "\n".join(lines)


def markdown_generations(samples: list[Sample], step: int) -> str:
    """verl's TensorBoard text: a heading per sample with its input, output and score."""
    parts = [f"**Generation Results - Step {step}**\n"]
    for number, (prompt, output, score) in enumerate(samples, start=1):
        parts.append(f"### Sample {number}\n**Input:** {prompt}\n\n**Output:** {output}\n\n**Score:** {score}\n\n---\n")
    return "\n".join(parts)


def records(samples: list[Sample], step: int) -> list[dict[str, Any]]:
    """One JSON-ready dict per sample: step, input, output, score."""
    return [{"step": step, "input": prompt, "output": output, "score": score} for prompt, output, score in samples]


def log_val_generations(trackers: Any, count: int, inputs: Sequence[str], outputs: Sequence[str],
                        scores: Sequence[float], step: int) -> list[Sample]:
    """Choose `count` samples (verl's rule) and hand them to every tracker that logs generations; none when 0."""
    if count <= 0:
        return []
    samples = select_val_generations(inputs, outputs, scores, count)
    trackers.log_generations(samples, step)
    return samples


def wants_validation_texts(trainer_cfg: Any) -> bool:
    """Whether validation must decode its prompts and responses (`trainer.*` keys: either feature is on)."""
    return trainer_cfg.log_val_generations > 0 or bool(trainer_cfg.validation_data_dir)


def record_validation_samples(trackers: Any, trainer_cfg: Any, texts: dict[str, list], scores: Sequence[float],
                              extra: dict[str, list], step: int) -> None:
    """`texts` (inputs, outputs, gts: one per sample) to the trackers (log_val_generations) and to
    `<validation_data_dir>/<step>.jsonl` with the scores and the reward's extra keys, as verl dumps them."""
    if trainer_cfg.log_val_generations > 0:
        log_val_generations(trackers, trainer_cfg.log_val_generations, texts["inputs"], texts["outputs"], scores,
                            step)
    if trainer_cfg.validation_data_dir:
        from hybridrl.logging.rollout_dump import dump_rollout_jsonl

        fixed = ("input", "output", "score", "step", "gts")
        dump_rollout_jsonl(trainer_cfg.validation_data_dir, step, texts["inputs"], texts["outputs"], list(scores),
                           {"gts": texts["gts"], **{k: v for k, v in extra.items() if k not in fixed}})
