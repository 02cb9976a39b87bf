"""The optional-import module: install hints for missing libraries, one warning for a fallback."""

from __future__ import annotations

import logging

import pytest

from hybridrl.rewards import optional


def test_missing_module_names_the_hint_and_the_need(monkeypatch):
    monkeypatch.setitem(optional.INSTALL_HINTS, "no_such_pkg_hybridrl", "pip install no-such-pkg")
    with pytest.raises(ImportError, match="the frobnicator needs the no_such_pkg_hybridrl package.*pip install "
                                          "no-such-pkg"):
        optional.require("no_such_pkg_hybridrl", "the frobnicator")
    assert not optional.available("no_such_pkg_hybridrl")


def test_a_fallback_warns_once(monkeypatch, caplog):
    monkeypatch.setitem(optional.INSTALL_HINTS, "no_such_pkg_hybridrl", "pip install no-such-pkg")
    monkeypatch.setattr(optional, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="hybridrl.rewards.optional"):
        assert optional.optional("no_such_pkg_hybridrl", "answers are compared as text") is None
        assert optional.optional("no_such_pkg_hybridrl", "answers are compared as text") is None
    records = {id(record): record.getMessage() for record in caplog.records}  # a record may reach caplog twice
    assert len(records) == 1
    message = next(iter(records.values()))
    assert "answers are compared as text" in message and "no-such-pkg" in message
    assert optional.optional("json", "unused").dumps([]) == "[]"
