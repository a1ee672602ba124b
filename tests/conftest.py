from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "network-repo"


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    """A writable copy of the example repo."""
    target = tmp_path / "repo"
    shutil.copytree(EXAMPLE, target)
    return target
