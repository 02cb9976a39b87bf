"""Tokenizer and external-library loading for `actor_rollout_ref.model` (verl's custom_chat_template,
external_lib)."""

from __future__ import annotations

import sys

import pytest

from hybridrl.config import load_config
from hybridrl.models.hf import ModelLoadError, import_external_lib, load_value_model
from hybridrl.trainer.setup import build_tokenizer

TEMPLATE = "{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"


def test_custom_chat_template_replaces_the_tokenizers(tiny_model_dir):
    messages = [{"role": "user", "content": "hi"}]
    own = build_tokenizer(load_config([f"actor_rollout_ref.model.path={tiny_model_dir}"]))
    custom = build_tokenizer(load_config([f"actor_rollout_ref.model.path={tiny_model_dir}",
                                          f"actor_rollout_ref.model.custom_chat_template={TEMPLATE!r}"]))
    assert custom.apply_chat_template(messages, tokenize=False) == "<<hi>>"
    assert own.apply_chat_template(messages, tokenize=False) != "<<hi>>"


def test_external_lib_is_imported_before_the_tokenizer_loads(tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "my_arch_plugin.py").write_text("import builtins\nbuiltins._my_arch_plugin_loaded = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_arch_plugin", raising=False)
    build_tokenizer(load_config([f"actor_rollout_ref.model.path={tiny_model_dir}",
                                 "actor_rollout_ref.model.external_lib=my_arch_plugin"]))
    import builtins

    assert getattr(builtins, "_my_arch_plugin_loaded", False)
    monkeypatch.delattr(builtins, "_my_arch_plugin_loaded")


def test_a_missing_external_lib_names_the_key():
    import_external_lib(None, "critic.model.external_lib")  # unset: nothing to import
    with pytest.raises(ModelLoadError, match="critic.model.external_lib='no_such_plugin' could not be imported"):
        import_external_lib("no_such_plugin", "critic.model.external_lib")


def test_tokenizer_code_is_trusted_by_data_or_model_trust_remote_code(tiny_model_dir, tmp_path):
    """verl loads the tokenizer with data.trust_remote_code; hybridrl honours it or the model's key. Without
    either, transformers quietly falls back to its generic tokenizer class."""
    import json
    import shutil

    model_dir = shutil.copytree(tiny_model_dir, tmp_path / "remote_tok")
    (model_dir / "tokenization_marked.py").write_text(
        "from transformers import PreTrainedTokenizerFast\n\n\n"
        "class MarkedTokenizer(PreTrainedTokenizerFast):\n    remote_code_ran = True\n")
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.update(tokenizer_class="MarkedTokenizer", auto_map={"AutoTokenizer": [None, "tokenization_marked.MarkedTokenizer"]})
    config_path.write_text(json.dumps(config))
    base = [f"actor_rollout_ref.model.path={model_dir}"]
    assert not getattr(build_tokenizer(load_config(base)), "remote_code_ran", False)
    assert build_tokenizer(load_config(base + ["data.trust_remote_code=true"])).remote_code_ran
    assert build_tokenizer(load_config(base + ["actor_rollout_ref.model.trust_remote_code=true"])).remote_code_ran


def test_batch_decode_takes_the_rust_batch_path_and_gives_transformers_strings(monkeypatch):
    """The fast path (the backend's decode_batch, GIL released) is taken for a plain fast tokenizer and gives
    exactly `batch_decode`'s strings, special tokens skipped; a tokenizer that cleans up spaces keeps
    transformers' own decode."""
    from hybridrl.models.hf import batch_decode
    from hybridrl.models.tiny import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    rows = [tokenizer("12+3=15")["input_ids"] + [tokenizer.eos_token_id], [tokenizer.pad_token_id] * 2
            + tokenizer("7 x 8 = 56")["input_ids"], []]
    want = tokenizer.batch_decode(rows, skip_special_tokens=True)
    assert want[0] == "12+3=15" and want[2] == ""
    calls = []
    backend = tokenizer.backend_tokenizer
    monkeypatch.setattr(type(tokenizer), "backend_tokenizer", property(lambda self: _Recording(backend, calls)))
    assert batch_decode(tokenizer, rows) == want and calls == ["decode_batch"]
    calls.clear()
    tokenizer.clean_up_tokenization_spaces = True
    assert batch_decode(tokenizer, rows) == tokenizer.batch_decode(rows, skip_special_tokens=True)
    assert "decode_batch" not in calls


class _Recording:
    """The backend tokenizer, recording which of its decode methods run."""

    def __init__(self, backend, calls: list[str]) -> None:
        self._backend, self._calls = backend, calls

    def __getattr__(self, name: str):
        if name.startswith("decode"):
            self._calls.append(name)
        return getattr(self._backend, name)


@pytest.mark.parametrize("keys,named", [
    (["actor_rollout_ref.model.path={missing}"], "actor_rollout_ref.model.path="),
    (["actor_rollout_ref.model.path={model}", "actor_rollout_ref.model.tokenizer_path={missing}"],
     "actor_rollout_ref.model.tokenizer_path="),
])
def test_a_tokenizer_that_cannot_load_names_the_key_the_user_set(tiny_model_dir, tmp_path, keys, named):
    """tokenizer_path null falls back to model.path: the error then names model.path, which the user wrote."""
    missing = str(tmp_path / "no_such_model")
    cfg = load_config([k.format(missing=missing, model=tiny_model_dir) for k in keys])
    with pytest.raises(ModelLoadError, match=f"could not load the tokenizer from {named}") as err:
        build_tokenizer(cfg)
    assert f"Point {named[:-1]} at a local HF model directory" in str(err.value)


def test_a_critic_from_a_causal_lm_reports_its_fresh_head_in_one_line(tiny_model_dir, capfd, caplog):
    """transformers' load report would print the new score head as MISSING (in colour, once per rank)."""
    with caplog.at_level("INFO", logger="hybridrl.models"):
        model = load_value_model(tiny_model_dir)
    assert model.score.out_features == 1
    assert "LOAD REPORT" not in capfd.readouterr().err
    assert any("score head (score.bias, score.weight) starts freshly initialised" in r.getMessage()
               for r in caplog.records)


def test_a_reward_model_without_a_trained_head_is_a_warning_naming_its_key(tiny_model_dir, caplog):
    with caplog.at_level("WARNING", logger="hybridrl.models"):
        load_value_model(tiny_model_dir, key="reward_model.model.path")
    assert any(r.levelname == "WARNING" and f"reward_model.model.path={tiny_model_dir} has no trained score head"
               in r.getMessage() and "its rewards are random" in r.getMessage() for r in caplog.records)
