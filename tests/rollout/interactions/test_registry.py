"""Interactions from verl's YAML: verl's class names map onto hybridrl's, a user's class written against verl
loads by import path, and every broken entry is a ConfigError naming the file and the entry."""

from __future__ import annotations

import asyncio
import sys
import textwrap

import pytest

from hybridrl.config import ConfigError
from hybridrl.rollout.interactions import BaseInteraction, Gsm8kInteraction, load_interactions

VERL_STYLE_USER = '''
from verl.interactions.base import BaseInteraction
from verl.utils.rollout_trace import rollout_trace_op


class EchoUser(BaseInteraction):
    """A user written for verl (collabllm's imports): repeats the assistant's words, stops after `turns`."""

    def __init__(self, config):
        super().__init__(config)
        self.turns = config["turns"]
        self.seen = {}

    async def start_interaction(self, instance_id=None, **kwargs):
        self.seen[instance_id] = 0
        return instance_id

    @rollout_trace_op
    async def generate_response(self, instance_id, messages, **kwargs):
        self.seen[instance_id] += 1
        done = self.seen[instance_id] >= self.turns
        return done, "you said: " + messages[-1]["content"], 0.5, {"turn": self.seen[instance_id]}

    async def finalize_interaction(self, instance_id, **kwargs):
        del self.seen[instance_id]
'''


def write(path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    package = tmp_path / "my_users"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "echo.py").write_text(VERL_STYLE_USER)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_users.echo.EchoUser"
    for name in ("my_users", "my_users.echo"):
        sys.modules.pop(name, None)


def test_verls_example_yaml_gives_the_builtin_gsm8k_interaction(tmp_path):
    path = write(tmp_path / "gsm8k_interaction_config.yaml", """\
        interaction:
          - name: "gsm8k"
            class_name: "verl.interactions.gsm8k_interaction.Gsm8kInteraction"
            config: {}
        """)
    interactions = load_interactions(path)
    assert list(interactions) == ["gsm8k"]
    assert type(interactions["gsm8k"]) is Gsm8kInteraction and interactions["gsm8k"].name == "gsm8k"


def test_a_user_class_written_against_verl_loads_by_import_path(tmp_path, user_package):
    path = write(tmp_path / "users.yaml", f"""\
        interaction:
          - class_name: {user_package}
            config: {{turns: 2}}
          - name: plain
            class_name: verl.interactions.base.BaseInteraction
        """)
    interactions = load_interactions(path)
    assert sorted(interactions) == ["echouser", "plain"]  # verl's default name: the class name, lower-cased
    echo = interactions["echouser"]
    assert isinstance(echo, BaseInteraction) and echo.config == {"turns": 2, "name": "echouser"}
    asyncio.run(echo.start_interaction("t"))
    answer = asyncio.run(echo.generate_response("t", [{"role": "assistant", "content": "hi"}]))
    assert answer == (False, "you said: hi", 0.5, {"turn": 1})
    assert "verl" not in sys.modules  # the verl names exist only while the file is imported


@pytest.mark.parametrize(("content", "phrases"), [
    ("interaction: [\n  - {class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n",
     ["is not valid YAML"]),
    ("tools: []\n", ["`interaction:`, a list of {name, class_name, config}"]),
    ("interaction:\n  - {name: a, class_name: Gsm8kInteraction}\n", ["interaction[0]", "must be an import path"]),
    ("interaction:\n  - {name: a, class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction}\n"
     "  - {name: a, class_name: verl.interactions.base.BaseInteraction}\n",
     ["interaction[1]", "name 'a' is already used by interaction[0]"]),
    ("interaction:\n  - {name: a, class_name: no_such_pkg.users.User}\n",
     ["interaction[0]", "cannot import module 'no_such_pkg.users'", "PYTHONPATH"]),
    ("interaction:\n  - {name: a, class_name: hybridrl.rollout.interactions.gsm8k.NoSuchUser}\n",
     ["interaction[0]", "has no class 'NoSuchUser'"]),
    ("interaction:\n  - {name: a, class_name: verl.interactions.weather_interaction.WeatherInteraction}\n",
     ["interaction[0]", "weather demo interaction is not shipped"]),
    ("interaction:\n  - {name: a, class_name: verl.interactions.base.BaseInteraction, config: [1]}\n",
     ["interaction[0]", "config must be a mapping"]),
    ("interaction:\n  - {name: a, class_name: verl.interactions.base.BaseInteraction, kwargs: {}}\n",
     ["interaction[0]", "unknown field(s) ['kwargs']"]),
])
def test_a_broken_file_names_the_file_and_the_entry(tmp_path, content, phrases):
    path = write(tmp_path / "broken.yaml", content)
    with pytest.raises(ConfigError) as error:
        load_interactions(path)
    message = str(error.value)
    assert "broken.yaml" in message
    for phrase in phrases:
        assert phrase in message, message


def test_a_class_that_is_not_an_interaction_is_refused(tmp_path):
    path = write(tmp_path / "wrong.yaml", "interaction:\n  - {name: a, class_name: collections.OrderedDict}\n")
    with pytest.raises(ConfigError, match=r"wrong.yaml: interaction\[0\]: collections.OrderedDict lacks"):
        load_interactions(path)


def test_no_file_means_no_interactions():
    assert load_interactions(None) == {}
