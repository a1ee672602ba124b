"""The validation pipeline: load → schema → check, for a folder or a Git revision."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pydantic

from . import parse_workers
from .cache import cache_dir
from .check import Context, check
from .diagnostics import Diagnostic
from .load import Document, load_documents
from .models import KINDS
from .parse_cache import (
    FileKey,
    ParseCache,
    ParsedFile,
    content_id,
    decode,
    encode,
    encode_parts,
)
from .plugins import installed_plugins
from .schema import Manifest, release_data, shape_checked, validate_documents
from .sources import (
    DEFAULT_MAX_FILE_BYTES,
    Keep,
    SourceError,
    SourceFile,
    folder_files,
    git_files,
)

if TYPE_CHECKING:
    from .guardrails import Violation
    from .shard import Ownership, Shard


@dataclass
class Validation:
    documents: list[Document]
    manifests: list[Manifest]
    context: Context | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0
    #: What the revision's Guardrails forbid (their diagnostics are among `diagnostics`)
    violations: list[Violation] = field(default_factory=list)
    #: Of a shard's share (shard.py): whose each owner is; None for the whole repo.
    ownership: Ownership | None = None
    _by_ref: dict[str, Manifest] | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)

    def by_ref(self) -> dict[str, Manifest]:
        """The manifests by reference (computed once)."""
        if self._by_ref is None:
            self._by_ref = {m.ref: m for m in self.manifests}
        return self._by_ref


def repo_files(path: Path, rev: str | None, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
               keep: Keep = None) -> Iterator[SourceFile | Diagnostic]:
    """The manifest files of the repo at `path`: the folder itself, or a Git revision of it
    (with `keep`, only the paths it keeps)."""
    return git_files(path, rev, max_file_bytes, keep) if rev else folder_files(path, keep)


class ParsedFiles:
    """Files parsed and schema-checked once per path and content (a SHA-256 of the bytes,
    the same on disk and in any revision).

    Revisions that share a file (a pull request's base and head, or the files on disk
    and a revision) share its documents and manifests too, so the planner can tell
    unchanged manifests by identity; a reconcile daemon parses only the files that
    changed since its last run. With a ParseCache (one-shot commands), files an earlier
    run parsed are read from it, and `save` leaves this run's for the next. With
    `processes` over 1, many new files are parsed by that many workers (parse_workers.py).
    """

    def __init__(self, cache: ParseCache | None = None, processes: int = 1) -> None:
        self._files: dict[FileKey, ParsedFile] = {}
        self._used: set[FileKey] = set()
        self._cache = cache
        self.processes = processes

    def parse(self, item: SourceFile, max_file_bytes: int) -> ParsedFile:
        return self.parse_all([item], max_file_bytes)[0]

    def parse_all(self, items: list[SourceFile], max_file_bytes: int) -> list[ParsedFile]:
        """Each file parsed, in order. The files within the bound are all read first, so
        that those neither this run nor the parse cache parsed before are parsed together."""
        files = [_Read.of(item) if item.size <= max_file_bytes else item for item in items]
        cache = self._cache if self._cache and self._cache.max_file_bytes == max_file_bytes \
            else None
        new = {f.key: f for f in files if isinstance(f, _Read) and not self._recalled(f, cache)}
        self._parse_new(list(new.values()), max_file_bytes, cache)
        # A file over the bound is not read at all: nothing to remember.
        return [self._files[f.key] if isinstance(f, _Read) else _parse(f, max_file_bytes)
                for f in files]

    def _recalled(self, read: _Read, cache: ParseCache | None) -> bool:
        """Whether the file is held: in memory, or in `cache` (and from now on in memory)."""
        self._used.add(read.key)
        if read.key in self._files:
            return True
        found = cache.get(read.key, read.content) if cache is not None else None
        if found is not None:
            self._hold(read.key, found)
        return found is not None

    def _parse_new(self, new: list[_Read], max_file_bytes: int,
                   cache: ParseCache | None) -> None:
        for read, found, entry in self._parsed(new, max_file_bytes):
            if cache is not None:
                cache.put_entry(read.key, entry if entry is not None else encode(found))
            self._hold(read.key, found)

    def _parsed(self, new: list[_Read], max_file_bytes: int
                ) -> Iterator[tuple[_Read, ParsedFile, bytes | None]]:
        """Each new file with its parse, and its parse cache entry when a worker gave it.
        When the workers fail, this process parses the files they did not give."""
        given = 0
        if self.processes > 1 and len(new) >= parse_workers.PARALLEL_FROM:
            tasks = [(read.item.path, read.content, max_file_bytes) for read in new]
            for entry in parse_workers.mapped(_worker_entry, tasks, self.processes):
                yield new[given], *_read_back(new[given], entry, max_file_bytes)
                given += 1
        for read in new[given:]:
            yield read, _parse(read.item, max_file_bytes), None

    def _hold(self, key: FileKey, found: ParsedFile) -> None:
        release_data(found.manifests)  # the parse cache encoded them already
        self._files[key] = found

    def save(self) -> None:
        """Leave the files used so far in the parse cache, and let go of it: later runs
        of a daemon are served from memory."""
        if self._cache is not None:
            self._cache.save(self._used)
            self._cache = None

    def forget_unused(self) -> None:
        """Keep only the files parsed or reused since the last call (all of them when none
        was: the daemon did not validate an unchanged revision again)."""
        if not self._used:
            return
        self._files = {key: found for key, found in self._files.items() if key in self._used}
        self._used = set()


@dataclass(frozen=True, slots=True)
class _Read:
    """A file within the size bound, read once: its bytes, and its key."""

    item: SourceFile  # reads `content`, not the disk or Git again
    content: bytes
    key: FileKey

    @classmethod
    def of(cls, item: SourceFile) -> _Read:
        content = item.read()
        held = SourceFile(item.path, len(content), lambda: content, item.blob_id)
        return cls(held, content, (item.path, content_id(content)))


def parsed_files(repo: Path, max_file_bytes: int, use_cache: bool = True,
                 processes: int | None = None) -> ParsedFiles:
    """ParsedFiles for a command on the repo at `repo`: with the repo's parse cache,
    unless `use_cache` is off, and parsed by as many processes as `parse_processes()` says,
    unless `processes` does."""
    cache = ParseCache(cache_dir(repo), max_file_bytes) if use_cache else None
    if processes is None:
        processes = parse_workers.parse_processes()
    return ParsedFiles(cache, processes)


def _parse(item: SourceFile, max_file_bytes: int) -> ParsedFile:
    documents, load_problems = load_documents(iter([item]), max_file_bytes)
    manifests, schema_problems = validate_documents(documents)
    return ParsedFile(documents, manifests, load_problems, schema_problems)


def _worker_entry(task: tuple[str, bytes, int]) -> bytes:
    """A worker's parse of one file (path, bytes, size bound), as its parse cache entry.
    The manifests' models are not built: reading the entry builds them again anyway. So
    the entry has every document whose shape passes the schema become a manifest, as it
    does unless a model refuses what the schema let through (`_read_back`)."""
    path, content, max_file_bytes = task
    item = SourceFile(path, len(content), lambda: content)
    documents, load_problems = load_documents(iter([item]), max_file_bytes)
    shaped, shape_problems = shape_checked(documents)
    return encode_parts(documents, shaped, load_problems, shape_problems)


def _read_back(read: _Read, entry: bytes,
               max_file_bytes: int) -> tuple[ParsedFile, bytes | None]:
    """A worker's parse of the file `read`, and its entry for the parse cache; parsed again
    here when a model refuses one of its documents (the entry was wrong to have it a
    manifest): then the model's problems are diagnostics, where one process puts them."""
    try:
        return decode(entry, read.item.path, read.content), entry
    except pydantic.ValidationError:
        return _parse(read.item, max_file_bytes), None


def revision_files(path: Path, rev: str | None, max_file_bytes: int, parsed: ParsedFiles,
                   shard: Shard | None = None) -> list[SourceFile | Diagnostic]:
    """The files a run reads of the repo at `path` (`rev`): all of them, or a shard's
    share (its provider's files are parsed into `parsed` to find its tenants)."""
    if shard is None:
        return list(repo_files(path, rev, max_file_bytes))
    from .shard import share_files

    return share_files(shard, lambda keep: repo_files(path, rev, max_file_bytes, keep),
                       lambda item: parsed.parse(item, max_file_bytes).manifests).items


def validate_files(files: Iterator[SourceFile | Diagnostic],
                   max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                   parsed: ParsedFiles | None = None, shard: Shard | None = None,
                   usage_warnings: bool = True) -> Validation:
    """The revision's files validated; with `shard`, they are its share (revision_files)
    and the validation says whose each owner is. Without `usage_warnings`, how full its
    pools are is not worked out (no POOL_NEARLY_FULL): for a revision whose warnings
    nobody reads."""
    items = list(files)
    memo = parsed or ParsedFiles()
    results = iter(memo.parse_all([item for item in items if isinstance(item, SourceFile)],
                                  max_file_bytes))
    documents: list[Document] = []
    manifests: list[Manifest] = []
    diagnostics: list[Diagnostic] = []
    schema_problems: list[Diagnostic] = []
    for item in items:
        if isinstance(item, Diagnostic):
            diagnostics.append(item)
            continue
        result = next(results)
        documents += result.documents
        manifests += result.manifests
        diagnostics += result.load_problems
        schema_problems += result.schema_problems
    diagnostics += schema_problems
    context, problems = check(manifests, installed_plugins(),
                              _unreadable(documents, manifests))
    diagnostics += problems
    n_files = sum(1 for item in items if isinstance(item, SourceFile))
    validation = _guarded(Validation(documents, manifests, context, diagnostics, n_files))
    if usage_warnings:
        validation = _usage_warned(validation)
    if shard is not None:
        from .shard import Ownership

        validation.ownership = Ownership.of(shard, manifests)
    return validation


def _guarded(validation: Validation) -> Validation:
    """The revision judged by its Guardrails, once it has no other error (and only when it
    declares one: the reachability is built for them alone)."""
    ctx = validation.context
    if ctx is None or not ctx.kind("Guardrail") or not validation.ok:
        return validation
    from .guardrails import diagnostics, evaluate

    validation.violations = evaluate(ctx)
    validation.diagnostics += diagnostics(validation.violations, validation.by_ref())
    return validation


def _usage_warned(validation: Validation) -> Validation:
    """POOL_NEARLY_FULL for the pools, subnets and segment ranges the revision itself fills
    to 90 % (usage.py, `demanded`), once it has no error (the spaces are then known)."""
    ctx = validation.context
    if ctx is None or not validation.ok:
        return validation
    from .model import Model
    from .usage import demanded, nearly_full

    validation.diagnostics += nearly_full(demanded(Model(ctx)))
    return validation


def against_base(head: Validation, base: Validation) -> Validation:
    """`head` with its guardrail diagnostics said at what `base` lacks (a pull request's
    plan): the rule added, the group joined, the external IP attached."""
    if not head.violations or not base.ok:
        return head
    from .guardrails import CODES, diagnostics

    kept = [d for d in head.diagnostics if d.code not in CODES]
    return replace(head, diagnostics=kept + diagnostics(head.violations, head.by_ref(),
                                                        base.by_ref()))


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
                  parsed: ParsedFiles | None = None, shard: Shard | None = None,
                  usage_warnings: bool = True) -> Validation:
    """The repo at `path` (`rev`) validated: all of it, or a shard's share (`usage_warnings`:
    as validate_files)."""
    if shard is None:
        return validate_files(repo_files(path, rev, max_file_bytes), max_file_bytes, parsed,
                              usage_warnings=usage_warnings)
    memo = parsed or ParsedFiles()
    items = revision_files(path, rev, max_file_bytes, memo, shard)
    return validate_files(iter(items), max_file_bytes, memo, shard, usage_warnings)
