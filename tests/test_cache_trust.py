"""Nothing a pull request commits may change what unet believes: a parse-cache pack or a
validation entry that this machine did not write is never read, wherever it lies, and a
repo whose `.unet/` is tracked by Git is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_plan_cli import SSH_OPEN, SSH_RULE, commit, git
from .test_plan_golden import edit_text

SG_FILE = "tenants/acme/security-groups.yaml"
WORLD_SSH = "opens tcp port 22 from 0.0.0.0/0"

#: Run as the attacker: the pack entry of `path` parsed from other content is re-keyed to
#: the path and SHA-256 of the file the repo really holds (through unet's own pack code,
#: sealed, where packs are sealed, with the attacker's own secret).
_REKEY = """
import hashlib, sys
from pathlib import Path
from unet.reconciler import parse_cache as pc
from unet.reconciler.sources import DEFAULT_MAX_FILE_BYTES
folder, path, forged, real = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
cache = pc.ParseCache(folder, DEFAULT_MAX_FILE_BYTES)
index, body = pc._read_pack(cache.path, cache.key)
assert (path, forged) in index, "the attacker's own run left no entry"
start, length = index.pop((path, forged))
index[(path, real)] = (start, length)
pc._write_pack(cache.path, cache.key, index, [body])
"""

#: Run as the attacker: a validation entry listing no diagnostics, under the key of the
#: (invalid) repo at argv[1], written into argv[2].
_CLEAN_ENTRY = """
import sys
from pathlib import Path
from unet.reconciler.cache import ValidationCache, inputs_digest
from unet.reconciler.cli import _read_once
from unet.reconciler.sources import DEFAULT_MAX_FILE_BYTES
from unet.reconciler.validate import repo_files
repo, folder = Path(sys.argv[1]), Path(sys.argv[2])
items = [_read_once(i, DEFAULT_MAX_FILE_BYTES) for i in repo_files(repo, None)]
ValidationCache(folder).store(inputs_digest(items, DEFAULT_MAX_FILE_BYTES), [], 20, 40)
"""


def _env(home: Path, cache: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "UNET_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(home)
    if cache is not None:
        env["UNET_CACHE_DIR"] = str(cache)
    return env


def _python(env: dict[str, str], *args: str, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _unet(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = _python(env, "-m", "unet.reconciler.cli", *args)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    return done


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _forge_pack(repo: Path, attacker: Path) -> Path:
    """Leave in `repo/.unet/cache` a pack that parses the security groups, unchanged on
    disk, as if they opened SSH to the world. Returns the pack's folder."""
    folder = repo / ".unet" / "cache"
    real = _sha(repo / SG_FILE)
    edit_text(repo, SG_FILE, SSH_RULE, SSH_OPEN)
    forged = _sha(repo / SG_FILE)
    done = _unet(_env(attacker, folder), "validate", str(repo))
    assert done.returncode == 0, done.stdout + done.stderr
    edit_text(repo, SG_FILE, SSH_OPEN, SSH_RULE)
    assert _sha(repo / SG_FILE) == real
    rekeyed = _python(_env(attacker, folder), "-c", _REKEY, str(folder), SG_FILE, forged, real,
                      cwd=Path(__file__).resolve().parent.parent)
    assert rekeyed.returncode == 0, rekeyed.stderr
    return folder


@pytest.fixture
def repo(example_copy: Path) -> Path:
    """The example repo; its plans and applies run against the embedded Northbound of its
    own `.unet/`, with the OVN manager only."""
    return example_copy


@pytest.fixture
def runner(tmp_path: Path) -> Path:
    """The home cache folder of the CI runner's user: never the attacker's."""
    return tmp_path / "runner-home"


def test_a_committed_pack_is_refused_and_never_read(repo: Path, runner: Path,
                                                    tmp_path: Path) -> None:
    git(repo, "init", "-q")
    commit(repo, "base")
    _forge_pack(repo, tmp_path / "attacker-home")
    git(repo, "add", "-f", ".unet/cache")
    commit(repo, "an innocent-looking pull request")
    assert ".unet/cache/" in git(repo, "ls-files", ".unet")

    for argv in (["plan", str(repo), "--format", "json"],
                 ["apply", str(repo), "--auto-approve"],
                 ["apply", str(repo), "--rev", "HEAD", "--auto-approve"]):
        done = _unet(_env(runner), *argv, "--manager", "ovn")
        assert done.returncode == 1, (argv, done.stdout, done.stderr)
        assert "UNET_DIR_TRACKED" in done.stdout + done.stderr, (argv, done.stdout)
        assert WORLD_SSH not in done.stdout
    done = _unet(_env(runner), "validate", str(repo), "--format", "json")
    assert done.returncode == 1
    [tracked] = [d for d in json.loads(done.stdout)["diagnostics"]
                 if d["code"] == "UNET_DIR_TRACKED"]
    assert tracked["file"].startswith(".unet/cache/") and "git rm -r --cached" in tracked["hint"]


def test_a_pack_this_user_did_not_write_is_never_read(repo: Path, runner: Path,
                                                      tmp_path: Path) -> None:
    """A cache folder restored from elsewhere (another machine, another user's run) holds a
    forged pack: the plan is made from the files, and the rule in no file is not in it."""
    folder = _forge_pack(repo, tmp_path / "attacker-home")
    plan = ["plan", str(repo), "--manager", "ovn"]
    done = _unet(_env(runner, folder), *plan)
    assert done.returncode == 0, done.stdout + done.stderr
    assert WORLD_SSH not in done.stdout
    edit_text(repo, SG_FILE, SSH_RULE, SSH_OPEN)  # the rule is shown when a file has it
    assert WORLD_SSH in _unet(_env(runner, folder), *plan).stdout


def test_a_validation_entry_this_user_did_not_write_is_never_read(
        example_copy: Path, runner: Path, tmp_path: Path) -> None:
    edit_text(example_copy, SG_FILE, "portTo: 22", "portTo: 70000")
    folder = tmp_path / "restored-cache"
    forged = _python(_env(tmp_path / "attacker-home"), "-c", _CLEAN_ENTRY, str(example_copy),
                     str(folder), cwd=Path(__file__).resolve().parent.parent)
    assert forged.returncode == 0, forged.stderr
    assert list(folder.glob("validate-*.json"))
    done = _unet(_env(runner, folder), "validate", str(example_copy))
    assert done.returncode == 1 and "RULE_PORTS_INVALID" in done.stdout, done.stdout


def test_caches_live_outside_the_checkout_and_are_private(example_copy: Path,
                                                          runner: Path) -> None:
    """By default a checkout holds no cache at all (so it cannot offer one), and the secret
    the entries are sealed with is readable by its user alone."""
    for _ in range(2):
        assert _unet(_env(runner), "validate", str(example_copy)).returncode == 0
    assert not (example_copy / ".unet" / "cache").exists()
    key = runner / "unet" / "cache.key"
    assert key.stat().st_mode & 0o077 == 0 and len(key.read_bytes()) == 32
    [folder] = (runner / "unet" / "repos").iterdir()
    assert list(folder.glob("validate-*.json")) and list(folder.glob("parse-*.pack"))


def test_a_secret_others_may_read_turns_caching_off(example_copy: Path,
                                                    runner: Path) -> None:
    """A key that others could read could be used to forge entries: it is not used, and
    nothing is cached (answers stay right, only slower)."""
    key = runner / "unet" / "cache.key"
    key.parent.mkdir(parents=True)
    key.write_bytes(os.urandom(32))
    key.chmod(0o644)
    assert _unet(_env(runner), "validate", str(example_copy)).returncode == 0
    assert not (runner / "unet" / "repos").exists()


