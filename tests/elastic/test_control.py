"""ElasticController's signal handlers: what a closed controller leaves behind."""

from __future__ import annotations

import signal

from hybridrl.elastic.control import ElasticController, _ignored


def test_closing_leaves_the_ignore_line_not_an_earlier_trainers_handler(tmp_path):
    """A trainer built and never closed (an exception in a notebook, an earlier test) must not take requests
    after a later run's trainer closes: its handler would say "applied at the next step boundary" forever."""
    before = signal.getsignal(signal.SIGUSR1)
    earlier, later = ElasticController(str(tmp_path / "a")), ElasticController(str(tmp_path / "b"))
    try:
        assert earlier.install() is not None and later.install() is not None
        later.close()
        assert signal.getsignal(signal.SIGUSR1) is _ignored and signal.getsignal(signal.SIGUSR2) is _ignored
    finally:
        earlier.close()
        signal.signal(signal.SIGUSR1, before)
