from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _validation_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep unet's caches, and the secret that seals them, out of the user's home while
    tests run."""
    os.environ["UNET_CACHE_DIR"] = str(tmp_path_factory.mktemp("unet-cache"))
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
EXAMPLE = ROOT / "examples" / "network-repo"


def copy_checkout(source: Path, target: Path) -> Path:
    """Copy what Git has of the folder `source` of this checkout (tracked files, and new
    ones not ignored), never what is ignored: no test may depend on a working tree's local
    state (a demo's `.unet/` database and caches, say). Symlinks are copied as links."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=source, capture_output=True, check=True).stdout
    target.mkdir(parents=True)
    for name in sorted({os.fsdecode(n) for n in listing.split(b"\0") if n}):
        origin, copy = source / name, target / name
        if not origin.is_symlink() and not origin.exists():
            continue  # deleted in the working tree, not yet in the index
        copy.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_symlink():
            copy.symlink_to(os.readlink(origin))
        else:
            shutil.copy2(origin, copy)
    return target


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    """A writable copy of the example repo."""
    return copy_checkout(EXAMPLE, tmp_path / "repo")


@pytest.fixture
def lab(tmp_path: Path):
    """A running OVN control plane (NB, SB, northd) for one test."""
    from .support.ovnlab import OvnLab

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


#: Tenants of the generated repo the fault tests apply: a few thousand rows, several waves.
BENCH_TENANTS = 100


@pytest.fixture(scope="session")
def bench_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from benchmarks.generate import generate_repo

    target = tmp_path_factory.mktemp("bench") / "repo"
    generate_repo(target, BENCH_TENANTS)
    return target


@pytest.fixture(scope="session")
def bench_desired(bench_template: Path) -> dict[str, set[str]]:
    """Per table, the keys of the rows the bench repo needs (rendered without a backend)."""
    from .support.ovnrun import desired_keys

    return desired_keys(bench_template)


@pytest.fixture
def bench(bench_template: Path, lab, tmp_path: Path) -> Path:
    """A repo of BENCH_TENANTS tenants, pointed at the lab."""
    target = tmp_path / "bench"
    shutil.copytree(bench_template, target)
    use_northbound(target, lab.nb_remote)
    return target


#: Tenants of the generated repo the cluster tests apply: about 2,500 rows in four waves,
#: each apply a few seconds, so that a dozen leader kills stay within a minute or two.
CLUSTER_TENANTS = 16


@pytest.fixture
def cluster(tmp_path: Path):
    """Three ovsdb-servers of one OVN_Northbound Raft cluster, on unix sockets."""
    from .support.ovncluster import OvnCluster

    with OvnCluster(tmp_path / "cl") as running:
        yield running


@pytest.fixture(scope="session")
def cluster_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from benchmarks.generate import generate_repo

    target = tmp_path_factory.mktemp("cluster") / "repo"
    generate_repo(target, CLUSTER_TENANTS)
    return target
