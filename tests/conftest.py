from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _validation_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep the validation cache out of the working tree while tests run."""
    os.environ["UNET_CACHE_DIR"] = str(tmp_path_factory.mktemp("unet-cache"))
EXAMPLE = ROOT / "examples" / "network-repo"


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    """A writable copy of the example repo."""
    target = tmp_path / "repo"
    shutil.copytree(EXAMPLE, target)
    return target


@pytest.fixture
def lab(tmp_path: Path):
    """A running OVN control plane (NB, SB, northd) for one test."""
    from .ovnlab import OvnLab

    with OvnLab(tmp_path / "ovn") as running:
        yield running


@pytest.fixture
def repo(example_copy: Path, lab) -> Path:
    """The example repo, pointed at the lab's Northbound database."""
    use_northbound(example_copy, lab.nb_remote)
    return example_copy


def use_northbound(repo: Path, remote: str) -> None:
    """Point the repo's ovn NetworkManager at `remote` instead of the embedded database."""
    managers = repo / "provider" / "managers.yaml"
    text = managers.read_text()
    assert "northbound: embedded" in text
    managers.write_text(text.replace("northbound: embedded", f"northbound: {remote}"))
