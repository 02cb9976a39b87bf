"""Run a benchmark script's `main` at --quick size and read its report (benchmarks/ holds scripts, not a package)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def quick_report(main: Callable[[list[str]], object], out: Path, capsys, *args: str) -> dict:
    """`main(["--quick", *args, "--out", out])`; its stdout must be exactly the JSON object it wrote to `out`."""
    main(["--quick", *args, "--out", str(out)])
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads(out.read_text())
    return report
