"""unet's local state folder, `.unet/`: one machine's state, never committed — the
embedded Northbound database, the reconcile daemon's clone and history, schemas written
for an editor, and the caches when `$UNET_CACHE_DIR` puts them there (by default they
live in the user's cache folder, cache.py).

Every folder unet makes there is made by `state_folder`, which also writes a
`.gitignore` of `*` into the `.unet/` it lies in, as pytest, ruff and mypy do with their
caches: `git status` stays clean in a network repo that ignores nothing, and `git add -A`
cannot pick the state up. The file is written whenever it is missing (so a `.unet/` made
by an earlier unet gets it too), and never replaced: a `.gitignore` someone wrote there
is theirs.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

STATE_DIR = ".unet"
GITIGNORE = "# Created by unet: local state of this machine, never committed.\n*\n"


def state_folder(path: Path, mode: int = 0o777) -> Path:
    """Make the folder `path` (with its parents; `mode` for the folder itself) and return
    it; when it lies in a `.unet/`, that folder ignores itself."""
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    top = next((folder for folder in (path, *path.parents) if folder.name == STATE_DIR), None)
    if top is not None:
        _ignore_everything(top)
    return path


def repo_state_folder(repo: Path, *parts: str) -> Path:
    """`repo/.unet/<parts>`, made as `state_folder` makes it."""
    return state_folder(repo.joinpath(STATE_DIR, *parts))


def _ignore_everything(folder: Path) -> None:
    ignore = folder / ".gitignore"
    if ignore.exists():
        return
    temporary = folder / f".gitignore.{os.getpid()}.tmp"
    temporary.write_text(GITIGNORE)
    try:
        with contextlib.suppress(FileExistsError):
            os.link(temporary, ignore)  # whole or not at all, and never over another's
    finally:
        temporary.unlink(missing_ok=True)
