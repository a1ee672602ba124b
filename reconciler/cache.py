"""Where unet's caches live and how they are trusted, and the cache of validation results.

A cache is an optimisation: nothing in it may change an answer. So its entries are
trusted only when this user on this machine wrote them. Every entry carries a MAC
(HMAC-SHA256) keyed by a secret that is made on first use and kept in the user's cache
folder (`$XDG_CACHE_HOME/unet/cache.key`, readable by the user alone), never in a network
repo; an entry whose MAC does not verify is a miss. The caches themselves live beside the
secret by default, one folder per network repo (`$XDG_CACHE_HOME/unet/repos/<id>/`), so a
checkout, and so a pull request, cannot even offer one; `$UNET_CACHE_DIR` puts them
elsewhere, where the MAC still decides.

The validation cache's key covers each manifest file's path and content (Git blob ids
in `--rev` mode, a hash of the bytes otherwise), the size bound, unet's own code and
schemas, the versions of Python and of the libraries that read and check
manifests, and what validation reads of the installed manager plugins (their roles,
capabilities and config schemas); any change in any of them is a miss. A hit gives the
diagnostics without parsing anything, which is what makes a repeated `unet validate`
fast. The newest few entries are kept. `--no-cache` neither reads nor writes any cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import stat
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .diagnostics import Diagnostic
from .plugins import plugins_digest
from .sources import SourceFile
from .state import state_folder

KEEP_ENTRIES = 8
CACHE_DIR_ENV = "UNET_CACHE_DIR"
_CODE_ROOTS = ("reconciler", "managers", "schemas")
#: The libraries whose behaviour a parsed or validated file depends on: the YAML reader,
#: the models, and the schema validators (their messages become diagnostics).
_LIBRARIES = ("PyYAML", "pydantic", "pydantic-core", "fastjsonschema", "jsonschema")


KEY_FILE = "cache.key"
_KEY_BYTES = 32


def user_cache_root() -> Path:
    """The user's own folder for unet's caches and their secret (XDG's cache folder)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "unet"


def cache_dir(repo: Path) -> Path:
    """Where unet keeps its caches for the network repo at `repo`: outside the checkout,
    one folder per repo (so that two repos do not evict each other's entries)."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override)
    repo_id = hashlib.sha256(os.path.realpath(repo).encode()).hexdigest()[:16]
    return user_cache_root() / "repos" / repo_id


def read_own_file(path: Path, private: bool = False) -> bytes | None:
    """The bytes of `path` if it is a regular file of this user that nobody else may write
    (with `private`, nor read), checked on the open file so that it cannot be swapped in
    between; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    others = stat.S_IRWXG | stat.S_IRWXO if private else stat.S_IWGRP | stat.S_IWOTH
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() \
                or info.st_mode & others:
            return None
        try:
            return file.read()
        except OSError:
            return None


@cache
def cache_secret() -> bytes | None:
    """This user's key for the caches' MACs, made on first use; None when it can be
    neither read nor made (the caches are then neither read nor written)."""
    try:
        path = user_cache_root() / KEY_FILE
    except RuntimeError:  # no home folder to keep it in
        return None
    secret = read_own_file(path, private=True)
    if secret is None and not path.exists():
        with contextlib.suppress(OSError):
            _make_secret(path)
        secret = read_own_file(path, private=True)
    return secret if secret is not None and len(secret) == _KEY_BYTES else None


def _make_secret(path: Path) -> None:
    """Write a new secret whole, and put it in place unless another process did first."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(os.urandom(_KEY_BYTES))
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)  # atomic, and never replaces a secret in use
    finally:
        temporary.unlink(missing_ok=True)


def seal(*parts: bytes | memoryview) -> bytes | None:
    """The MAC of the concatenated `parts` (whose framing the caller makes unambiguous)
    under this user's secret; None when there is no secret."""
    secret = cache_secret()
    if secret is None:
        return None
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(part)
    return mac.digest()


def is_sealed(tag: bytes | memoryview, *parts: bytes | memoryview) -> bool:
    """Whether `tag` is the MAC of `parts`: this user wrote them, and they are whole."""
    expected = seal(*parts)
    return expected is not None and hmac.compare_digest(expected, bytes(tag))


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


_ENTRY = b"unet validation entry\n"


class ValidationCache:
    """Entries `validate-<key>.json`: a line with the entry's MAC (hex), then its JSON."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _entry(self, key: str) -> Path:
        return self.directory / f"validate-{key}.json"

    def lookup(self, key: str) -> dict[str, Any] | None:
        data = read_own_file(self._entry(key))
        tag, _, text = (data or b"").partition(b"\n")
        try:
            if not is_sealed(bytes.fromhex(tag.decode()), _ENTRY, key.encode(), b"\n", text):
                return None
            entry = json.loads(text)
            entry["diagnostics"] = [
                Diagnostic(**{k: v for k, v in d.items() if k != "severity"})
                for d in entry["diagnostics"]]
        except (ValueError, TypeError, KeyError):
            return None
        return entry  # type: ignore[no-any-return]

    def store(self, key: str, diagnostics: Sequence[Diagnostic], files: int,
              documents: int) -> None:
        """Best effort: a cache that cannot be written is only a slower next run."""
        text = json.dumps({"files": files, "documents": documents,
                           "diagnostics": [d.to_json() for d in diagnostics]}).encode()
        tag = seal(_ENTRY, key.encode(), b"\n", text)
        if tag is None:
            return
        try:
            state_folder(self.directory, mode=0o700)
            temporary = self._entry(key).with_suffix(f".{os.getpid()}.tmp")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(tag.hex().encode() + b"\n" + text)
            temporary.replace(self._entry(key))
            self._prune()
        except OSError:
            pass

    def _prune(self) -> None:
        entries = sorted(self.directory.glob("validate-*.json"),
                         key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP_ENTRIES:]:
            old.unlink(missing_ok=True)
