"""Tokenizer and external-library loading for `actor_rollout_ref.model` (verl's custom_chat_template,
external_lib)."""

from __future__ import annotations

import sys

import pytest

from hybridrl.config import load_config
from hybridrl.models.hf import ModelLoadError, import_external_lib
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
