"""The documentation builds with mkdocs in strict mode (a broken link or a page missing from the nav fails) and
holds no development history."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_docs_build_strictly(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "gsm8k" / "index.html").is_file()


def test_docs_hold_no_development_history():
    for page in (REPO / "docs").glob("*.md"):
        text = page.read_text().lower()
        for phrase in ("session 1", "session 2", "work period", "device call", "was lent"):
            assert phrase not in text, f"{page.name} mentions {phrase!r}: history belongs in benchmarks/README.md"
