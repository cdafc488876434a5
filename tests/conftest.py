"""Shared fixtures: tiny models and the optional real data."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from tiny import make_tiny_model_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    """Real data: $LAYERWISE_DATA, else ../shared/data beside the repository."""
    return Path(os.environ.get("LAYERWISE_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def real_data() -> Path:
    path = data_dir()
    if not (path / "senteval").is_dir():
        pytest.skip(f"real data not found at {path} (set LAYERWISE_DATA to ../shared/data)")
    return path


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_bert"), "bert")


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_roberta"), "roberta")


@pytest.fixture(scope="session")
def tiny_electra(tmp_path_factory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_electra"), "electra")
