"""The code style the repository keeps (pyproject's [tool.ruff]): pyflakes errors, pycodestyle, 120 columns."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (it comes with the test extras: pip install -e '.[test]')")
    command = [sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests", "benchmarks"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
