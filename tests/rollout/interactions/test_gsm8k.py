"""The built-in GSM8K interaction on hand-written turns: verl's strict `#### N` check, its replies and
termination, one record per trajectory."""

from __future__ import annotations

import asyncio

import pytest

from hybridrl.rollout.interactions import Gsm8kInteraction
from hybridrl.rollout.interactions.gsm8k import CORRECT, INCORRECT


def reply(interaction: Gsm8kInteraction, instance_id: str, answer: str):
    messages = [{"role": "user", "content": "Natalia sold 48 clips..."}, {"role": "assistant", "content": answer}]
    return asyncio.run(interaction.generate_response(instance_id, messages, name="gsm8k"))


@pytest.mark.parametrize(("answer", "expected"), [
    ("She sold 48 + 24 = 72 clips.\n#### 72", (True, CORRECT, 1.0, {})),
    ("#### 72.0", (False, INCORRECT, 0.0, {})),  # compared as strings, as verl's gsm8k rule does
    ("The answer is 72.", (False, INCORRECT, 0.0, {})),  # strict: no `#### ` marker, no answer
    ("#### 1,072", (False, INCORRECT, 0.0, {})),  # the comma is removed: 1072 != 72
])
def test_the_last_assistant_answer_is_scored_strictly(answer, expected):
    interaction = Gsm8kInteraction({"name": "gsm8k"})
    instance = asyncio.run(interaction.start_interaction("t0", ground_truth="72"))
    assert instance == "t0"
    assert reply(interaction, instance, answer) == expected


def test_the_latest_assistant_turn_counts_and_finalize_forgets_the_trajectory():
    interaction = Gsm8kInteraction({"name": "gsm8k"})
    asyncio.run(interaction.start_interaction("a", ground_truth="5"))
    asyncio.run(interaction.start_interaction("b", ground_truth="7"))
    messages = [{"role": "assistant", "content": "#### 5"}, {"role": "user", "content": INCORRECT},
                {"role": "assistant", "content": "#### 7"}]
    assert asyncio.run(interaction.generate_response("a", messages))[2] == 0.0  # "a" expects 5, last answer is 7
    assert asyncio.run(interaction.generate_response("b", messages))[:3] == (True, CORRECT, 1.0)
    asyncio.run(interaction.finalize_interaction("a"))
    with pytest.raises(KeyError):
        asyncio.run(interaction.calculate_score("a"))
    assert asyncio.run(interaction.calculate_score("b")) == 1.0


def test_a_row_without_ground_truth_is_refused_with_where_to_put_it():
    with pytest.raises(ValueError, match="extra_info.interaction_kwargs.ground_truth"):
        asyncio.run(Gsm8kInteraction({"name": "gsm8k"}).start_interaction("x", query="q"))
