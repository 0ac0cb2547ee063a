"""bench/iso_golden.py (the golden-output check kept for speed work on the iso19139 mapper)
runs: it saves digests and finds them unchanged when nothing changed, and says so when one
did."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "iso_golden.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), "--limit", "40", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_golden_digests_saved_then_checked(tmp_path: Path) -> None:
    saved = tmp_path / "golden.json"
    assert run("--save", str(saved)).returncode == 0
    digests = json.loads(saved.read_text(encoding="utf-8"))
    assert len(digests) == 40 and len(set(digests.values())) == 40
    same = run("--check", str(saved))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "40 records mapped, 0 changed" in same.stdout
    name = sorted(digests)[0]
    digests[name] = "0" * 64  # as if the mapper's output for that record had changed
    saved.write_text(json.dumps(digests), encoding="utf-8")
    changed = run("--check", str(saved))
    assert changed.returncode == 1
    assert f"CHANGED {name}" in changed.stdout and "1 changed" in changed.stdout
