"""unet as users install it: a wheel carries the schemas, and finds and validates with them.

The wheel is built from a copy of the tree with pip (build isolation: setuptools comes
from the package index or pip's cache) and installed with `pip install --target`, so that
the copy of `unet` that runs is the installed one; its dependencies come from the
environment running the tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .conftest import EXAMPLE, ROOT

#: What building the wheel reads.
BUILD_INPUTS = ("pyproject.toml", "README.md", "unet", "reconciler", "managers", "schemas")


def _source_packages() -> set[str]:
    """Every folder of reconciler/ and managers/ holding files to ship (Python or data)."""
    found: set[str] = set()
    for top in ("reconciler", "managers"):
        for folder in (ROOT / top, *(ROOT / top).rglob("*")):
            if (folder.is_dir() and folder.name != "__pycache__"
                    and any(f.is_file() and f.suffix != ".pyc" for f in folder.iterdir())):
                found.add(".".join(("unet", *folder.relative_to(ROOT).parts)))
    return found


def test_every_package_of_the_tree_is_listed_for_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert sorted(config["packages"]) == sorted(
        _source_packages() | {"unet", "unet.reconciler.schemas"})
    assert config["package-dir"] == {"unet.reconciler": "reconciler", "unet.managers": "managers",
                                     "unet.reconciler.schemas": "schemas"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """unet installed from a freshly built wheel: the folder holding its packages."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    _run([*pip, "wheel", "--no-deps", "-w", str(work / "dist"), str(source)], work)
    wheel = next((work / "dist").glob("unet-*.whl"))
    _run([*pip, "install", "--no-deps", "--target", str(work / "site"), str(wheel)], work)
    return work / "site"


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"


def _unet(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed `unet` script, run outside the source tree."""
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([str(site / "bin" / "unet"), *args], cwd=site.parent, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_wheel_installs_one_package_unet(installed: Path) -> None:
    """Generic names such as `reconciler` or `managers` would collide with other
    distributions' in site-packages."""
    top = {p.name for p in installed.iterdir()
           if p.name not in ("bin", "__pycache__") and not p.name.endswith(".dist-info")}
    assert top == {"unet"}
    assert (installed / "unet" / "py.typed").is_file()
    done = subprocess.run([sys.executable, "-m", "unet", "--version"], cwd=installed.parent,
                          env={**os.environ, "PYTHONPATH": str(installed)}, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr


def test_the_wheel_ships_the_schemas_and_says_where(installed: Path) -> None:
    shipped = installed / "unet" / "reconciler" / "schemas"
    done = _unet(installed, "schema", "--path")
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == shipped
    assert sorted(p.name for p in shipped.iterdir()) == sorted(
        p.name for p in (ROOT / "schemas").iterdir())
    assert _unet(installed, "schema", "--check").returncode == 0


def test_an_installed_unet_never_writes_into_itself(installed: Path, tmp_path: Path) -> None:
    shipped = installed / "unet" / "reconciler" / "schemas"
    before = {p.name: p.stat().st_mtime_ns for p in shipped.iterdir()}
    done = _unet(installed, "schema")
    assert done.returncode == 1 and "--out DIR" in done.stderr, done.stderr
    assert {p.name: p.stat().st_mtime_ns for p in shipped.iterdir()} == before
    assert _unet(installed, "schema", "--out", str(tmp_path / "out")).returncode == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(before)
    printed = _unet(installed, "schema", "--print")
    assert json.loads(printed.stdout)["title"] == "unet manifest"


def test_an_installed_unet_validates_with_the_shipped_schemas(installed: Path) -> None:
    assert _unet(installed, "validate", "--no-cache", str(EXAMPLE)).returncode == 0
    broken = ROOT / "examples" / "broken" / "mtu-invalid"
    done = _unet(installed, "validate", "--no-cache", str(broken))
    assert done.returncode == 1 and "MTU_INVALID" in done.stdout, done.stdout
    # Prove it reads the shipped file: a tampered one changes the verdict.
    tampered = installed / "unet" / "reconciler" / "schemas" / "VirtualNetwork.schema.json"
    original = tampered.read_text()
    try:
        tampered.write_text(json.dumps({"required": ["shippedSchemaWasRead"]}))
        done = _unet(installed, "validate", "--no-cache", str(EXAMPLE))
        assert "'shippedSchemaWasRead' is missing" in done.stdout, done.stdout
    finally:
        tampered.write_text(original)
