"""A cache of validation results, keyed by every input that can change them.

The key covers each manifest file's path and content (Git blob ids in `--rev`
mode, a hash of the bytes otherwise), the size bound, unet's own code and
schemas, the versions of Python and of the libraries that read and check
manifests, and what validation reads of the installed manager plugins (their roles,
capabilities and config schemas); any change in any of them is a miss. A hit gives the diagnostics
without parsing anything, which is what makes a repeated `unet validate` fast.
Entries live under `.unet/cache/` of the network repo (or `$UNET_CACHE_DIR`);
the newest few are kept. `unet validate --no-cache` neither reads nor writes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .diagnostics import Diagnostic
from .load import SourceFile
from .plugins import plugins_digest

KEEP_ENTRIES = 8
CACHE_DIR_ENV = "UNET_CACHE_DIR"
_CODE_ROOTS = ("reconciler", "managers", "schemas")
#: The libraries whose behaviour a parsed or validated file depends on: the YAML reader,
#: the models, and the schema validators (their messages become diagnostics).
_LIBRARIES = ("PyYAML", "pydantic", "pydantic-core", "fastjsonschema", "jsonschema")


def cache_dir(repo: Path) -> Path:
    """Where unet keeps its caches for the network repo at `repo`."""
    return Path(os.environ.get(CACHE_DIR_ENV) or repo / ".unet" / "cache")


@cache
def code_digest() -> str:
    """Of unet's own source and schemas: a new version never reads an old entry."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for top in _CODE_ROOTS:
        for path in sorted((root / top).rglob("*")):
            if path.suffix in (".py", ".json") and path.is_file():
                digest.update(path.relative_to(root).as_posix().encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


@cache
def environment_digest() -> str:
    """Of the interpreter and the libraries that read and check manifests: upgrading one
    may change what a file parses to, or a diagnostic's words."""
    from importlib.metadata import PackageNotFoundError, version

    parts = [sys.version, yaml.__with_libyaml__ and yaml._yaml.get_version_string()]
    for name in _LIBRARIES:
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            parts.append(f"{name} -")
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def inputs_digest(items: Sequence[SourceFile | Diagnostic], max_file_bytes: int) -> str:
    digest = hashlib.sha256(f"{code_digest()}\n{environment_digest()}\n{plugins_digest()}\n"
                            f"{max_file_bytes}\n".encode())
    for item in items:
        if isinstance(item, Diagnostic):
            digest.update(json.dumps(item.to_json(), sort_keys=True).encode())
        elif item.size > max_file_bytes:
            digest.update(f"{item.path}\0{item.size}\0too large\n".encode())
        else:
            content = item.blob_id or hashlib.sha256(item.read()).hexdigest()
            digest.update(f"{item.path}\0{content}\n".encode())
    return digest.hexdigest()


class ValidationCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _entry(self, key: str) -> Path:
        return self.directory / f"validate-{key}.json"

    def lookup(self, key: str) -> dict[str, Any] | None:
        try:
            entry = json.loads(self._entry(key).read_text())
        except (OSError, ValueError):
            return None
        entry["diagnostics"] = [Diagnostic(**{k: v for k, v in d.items() if k != "severity"})
                                for d in entry["diagnostics"]]
        return entry  # type: ignore[no-any-return]

    def store(self, key: str, diagnostics: Sequence[Diagnostic], files: int,
              documents: int) -> None:
        """Best effort: a cache that cannot be written is only a slower next run."""
        entry = {"files": files, "documents": documents,
                 "diagnostics": [d.to_json() for d in diagnostics]}
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            temporary = self._entry(key).with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(entry))
            temporary.replace(self._entry(key))
            self._prune()
        except OSError:
            pass

    def _prune(self) -> None:
        entries = sorted(self.directory.glob("validate-*.json"),
                         key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP_ENTRIES:]:
            old.unlink(missing_ok=True)
