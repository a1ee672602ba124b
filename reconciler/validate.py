"""The validation pipeline: load → schema → check, for a folder or a Git revision."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .check import Context, check
from .diagnostics import Diagnostic
from .load import (
    DEFAULT_MAX_FILE_BYTES,
    Document,
    SourceError,
    SourceFile,
    folder_files,
    git_files,
    load_documents,
)
from .models import KINDS
from .plugins import installed_plugins
from .schema import Manifest, validate_documents


@dataclass
class Validation:
    documents: list[Document]
    manifests: list[Manifest]
    context: Context | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0
    _by_ref: dict[str, Manifest] | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)

    def by_ref(self) -> dict[str, Manifest]:
        """The manifests by reference (computed once)."""
        if self._by_ref is None:
            self._by_ref = {m.ref: m for m in self.manifests}
        return self._by_ref


def repo_files(path: Path, rev: str | None,
               max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Iterator[SourceFile | Diagnostic]:
    """The manifest files of the repo at `path`: the folder itself, or a Git revision of it."""
    return git_files(path, rev, max_file_bytes) if rev else folder_files(path)


@dataclass(slots=True)
class _ParsedFile:
    documents: list[Document]
    manifests: list[Manifest]
    load_problems: list[Diagnostic]
    schema_problems: list[Diagnostic]


class ParsedFiles:
    """Files parsed and schema-checked once per path and content (the Git blob id, or a
    hash of the file's bytes).

    Revisions that share a file (a pull request's base and head) share its
    documents and manifests too, so the planner can tell unchanged manifests
    by identity; a reconcile daemon parses only the files that changed since
    its last run.
    """

    def __init__(self) -> None:
        self._files: dict[tuple[str, str], _ParsedFile] = {}
        self._used: set[tuple[str, str]] = set()

    def parse(self, item: SourceFile, max_file_bytes: int) -> _ParsedFile:
        if item.blob_id is None and item.size <= max_file_bytes:
            content = item.read()
            item = SourceFile(item.path, len(content), lambda: content,
                              hashlib.sha1(content).hexdigest())
        key = (item.path, item.blob_id) if item.blob_id is not None else None
        found = self._files.get(key) if key is not None else None
        if found is None:
            found = _parse(item, max_file_bytes)
            if key is not None:
                self._files[key] = found
        if key is not None:
            self._used.add(key)
        return found

    def forget_unused(self) -> None:
        """Keep only the files parsed or reused since the last call (all of them when none
        was: the daemon did not validate an unchanged revision again)."""
        if not self._used:
            return
        self._files = {key: found for key, found in self._files.items() if key in self._used}
        self._used = set()


def _parse(item: SourceFile, max_file_bytes: int) -> _ParsedFile:
    documents, load_problems = load_documents(iter([item]), max_file_bytes)
    manifests, schema_problems = validate_documents(documents)
    return _ParsedFile(documents, manifests, load_problems, schema_problems)


def validate_files(files: Iterator[SourceFile | Diagnostic],
                   max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                   parsed: ParsedFiles | None = None) -> Validation:
    items = list(files)
    memo = parsed or ParsedFiles()
    documents: list[Document] = []
    manifests: list[Manifest] = []
    diagnostics: list[Diagnostic] = []
    schema_problems: list[Diagnostic] = []
    for item in items:
        if isinstance(item, Diagnostic):
            diagnostics.append(item)
            continue
        result = memo.parse(item, max_file_bytes)
        documents += result.documents
        manifests += result.manifests
        diagnostics += result.load_problems
        schema_problems += result.schema_problems
    diagnostics += schema_problems
    context, problems = check(manifests, installed_plugins(),
                              _unreadable(documents, manifests))
    diagnostics += problems
    n_files = sum(1 for item in items if isinstance(item, SourceFile))
    return Validation(documents, manifests, context, diagnostics, n_files)


def _unreadable(documents: list[Document],
                manifests: list[Manifest]) -> set[tuple[str, str | None, str]]:
    """Identities of the documents that did not become manifests, where they can be read."""
    valid = {id(m.doc) for m in manifests}
    found: set[tuple[str, str | None, str]] = set()
    for doc in documents:
        if id(doc) in valid or not isinstance(doc.data, dict):
            continue
        kind, metadata = doc.data.get("kind"), doc.data.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if isinstance(kind, str) and kind in KINDS and isinstance(name, str):
            found.add((kind, doc.tenant if KINDS[kind].scope == "tenant" else None, name))
    return found


def revision_info(path: Path, rev: str | None) -> dict[str, object]:
    """What a plan records of its input: the folder, or the revision and its commit."""
    info: dict[str, object] = {"path": path.as_posix(), "rev": rev}
    if rev:
        import git

        try:
            repo = git.Repo(path, search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise SourceError(f"{path} is not inside a Git repository, so it has no "
                              f"revision '{rev}'") from exc
        try:
            commit = repo.commit(rev)
            commit.tree  # noqa: B018  (reads the object: a shallow clone names absent parents)
            info["commit"] = commit.hexsha
        except (git.BadName, ValueError) as exc:
            shallow = Path(repo.git_dir, "shallow").exists()
            hint = (" This clone is shallow: fetch the whole history (actions/checkout with "
                    "fetch-depth: 0, or git fetch --unshallow).") if shallow else ""
            raise SourceError(f"revision '{rev}' does not exist in {repo.working_dir}.{hint}") \
                from exc
    return info


def validate_repo(path: Path, rev: str | None = None,
                  max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                  parsed: ParsedFiles | None = None) -> Validation:
    return validate_files(repo_files(path, rev, max_file_bytes), max_file_bytes, parsed)
