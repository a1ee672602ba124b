"""The repos of every size, generated once and cached in the work folder.

`prepared_repo(work, tenants)` gives two copies of the repo of `tenants` tenants
(benchmarks/generate.py): `repo`, committed to Git (branch `main`, and branch `pr` with the
pull request of the plan-pr stages), and `live`, whose OVN manager's `northbound:` is
`${UNET_BENCH_NORTHBOUND}` (NB_ENV) and whose reconcile policy is `repair`, for the stages
that apply to a server of the benchmark's own. A cached copy is used while the generator's
version is unchanged. `git` runs Git with a fixed author and date, so that the commits of a
size are the same on every run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from .generate import GENERATOR_VERSION, PR_BRANCH, PR_TENANT, generate_repo, pr_change

NB_ENV = "UNET_BENCH_NORTHBOUND"  # the live copy's `northbound:` is ${UNET_BENCH_NORTHBOUND}

_GIT_ENV = {"GIT_AUTHOR_NAME": "unet-bench", "GIT_AUTHOR_EMAIL": "bench@unet.invalid",
            "GIT_COMMITTER_NAME": "unet-bench", "GIT_COMMITTER_EMAIL": "bench@unet.invalid",
            "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def prepared_repo(work: Path, tenants: int) -> tuple[Path, Path, dict[str, Any]]:
    """The repo of `tenants` tenants under `work` (generated and committed, with the pull
    request's branch) and its live copy, unless cached."""
    home = work / f"tenants-{tenants}"
    meta_path = home / "meta.json"
    repo, live = home / "repo", home / "live"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("generator") == GENERATOR_VERSION and meta.get("tenants") == tenants \
                and live.is_dir():
            return repo, live, meta
    if home.exists():
        shutil.rmtree(home)
    start = time.perf_counter()
    manifests = generate_repo(repo, tenants)
    generate_s = time.perf_counter() - start
    start = time.perf_counter()
    _commit(repo)
    commit_s = time.perf_counter() - start
    generate_repo(live, tenants, northbound="${" + NB_ENV + "}", reconcile="repair")
    # Not rglob over the repo: a background `git gc --auto` may be pruning .git/objects.
    files = 1 + sum(1 for top in ("provider", "tenants") for _ in (repo / top).rglob("*.yaml"))
    meta = {"generator": GENERATOR_VERSION, "tenants": tenants, "manifests": manifests,
            "files": files, "generate_s": round(generate_s, 3), "commit_s": round(commit_s, 3)}
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return repo, live, meta


def git(repo: Path, *args: str, text: str | None = None,
        env: dict[str, str] | None = None) -> str:
    """`git ARGS` in `repo`, as the benchmark's author at a fixed date; its output."""
    result = subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=repo,
                            env={**os.environ, **_GIT_ENV, **(env or {})}, input=text,
                            capture_output=True, text=True, check=True)
    return result.stdout.strip()


def _commit(repo: Path) -> None:
    """Make the generated folder a Git repo: `main` with one commit, for `--rev HEAD`, and
    `pr` on top of it with the pull request of `plan-pr` (written with plumbing: the
    working folder stays as generated)."""
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "generated")
    index = {"GIT_INDEX_FILE": str(repo / ".git" / "bench-pr-index")}
    git(repo, "read-tree", "main", env=index)
    for path, text in pr_change().items():
        blob = git(repo, "hash-object", "-w", "--stdin", text=text)
        git(repo, "update-index", "--cacheinfo", f"100644,{blob},{path}", env=index)
    tree = git(repo, "write-tree", env=index)
    commit = git(repo, "commit-tree", tree, "-p", "main", "-m",
                 f"tenant-{PR_TENANT:05d}: one more VM, one rule changed")
    git(repo, "update-ref", f"refs/heads/{PR_BRANCH}", commit)
    Path(index["GIT_INDEX_FILE"]).unlink(missing_ok=True)
