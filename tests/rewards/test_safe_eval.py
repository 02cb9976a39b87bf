"""safe_eval: arithmetic and list literals only; code is refused."""

from __future__ import annotations

import pytest

from hybridrl.rewards.safe_eval import safe_eval


def test_arithmetic_and_lists():
    assert safe_eval("2*3.5 - -1") == 8.0
    assert safe_eval("(1+2)**2 % 5") == 4
    assert safe_eval("[[1, 2], [3, 4/2]]") == [[1, 2], [3, 2.0]]
    assert safe_eval("(1, 2)") == (1, 2)


@pytest.mark.parametrize("text", ["__import__('os')", "x + 1", "[].__class__", "True", "'s'", "2**10**10", "lambda: 1"])
def test_refused(text):
    with pytest.raises((ValueError, SyntaxError)):
        safe_eval(text)
