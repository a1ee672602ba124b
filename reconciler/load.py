"""Stage `load`: read a network repo (a folder or a Git revision) into documents.

Every document keeps its file and the line of every node, so later stages can
point at the offending field. Only safe YAML is accepted: no tags beyond the
core schema, a bound on aliases and nesting, duplicate keys rejected, a size
bound per file, and no path that leaves the repo.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .diagnostics import Diagnostic, json_pointer

DEFAULT_MAX_FILE_BYTES = 1024 * 1024
MAX_ALIASES = 100
MAX_DEPTH = 64
REPO_CONFIG_FILE = "unet.yaml"
_MANIFEST_SUFFIXES = (".yaml", ".yml")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")

try:  # libyaml when available: an order of magnitude faster than pure Python
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader

_TAG = "tag:yaml.org,2002:"
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_SCALAR_BUILDERS: dict[str, Callable[[ScalarNode], Any]] = {
    _TAG + "str": lambda node: node.value,
    _TAG + "int": _CONSTRUCTOR.construct_yaml_int,
    _TAG + "float": _CONSTRUCTOR.construct_yaml_float,
    _TAG + "bool": _CONSTRUCTOR.construct_yaml_bool,
    _TAG + "null": lambda node: None,
    # Dates stay text: no field of the API is a date, and text keeps errors readable.
    _TAG + "timestamp": lambda node: node.value,
}


Path_ = tuple[str | int, ...]


@dataclass(slots=True)
class Document:
    """One YAML document of a manifest file."""

    file: str  # posix path relative to the network repo root
    index: int  # position in the file, 0-based
    line: int  # 1-based line where the document starts
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    tenant: str | None = None  # from the folder: tenants/<tenant>/...
    area: str = ""  # "root", "provider" or "tenants"

    def line_of(self, path: Path_) -> int:
        """Line of the node at `path`, or of its nearest ancestor that exists."""
        path = tuple(path)
        while path:
            line = self.lines.get(path)
            if line is not None:
                return line
            path = path[:-1]
        return self.line


@dataclass(slots=True)
class SourceFile:
    path: str
    size: int
    read: Callable[[], bytes]
    blob_id: str | None = None


class SourceError(Exception):
    """The repo itself cannot be read (missing folder, unknown revision, ...)."""


class _Unsafe(Exception):
    def __init__(self, message: str, node: Node) -> None:
        super().__init__(message)
        self.line = node.start_mark.line + 1


class _Builder:
    """Turns a composed YAML node tree into plain data plus a line map."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.seen: set[int] = set()
        self.aliases = 0
        self.lines: dict[Path_, int] = {}
        self.diagnostics: list[Diagnostic] = []

    def build(self, node: Node, path: Path_, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise _Unsafe(f"nesting deeper than {MAX_DEPTH} levels", node)
        if id(node) in self.seen:
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise _Unsafe(f"more than {MAX_ALIASES} aliases (alias bomb?)", node)
        else:
            self.seen.add(id(node))
        if isinstance(node, ScalarNode):
            return self._scalar(node)
        if isinstance(node, SequenceNode):
            self._check_tag(node, "seq")
            items = []
            for index, item in enumerate(node.value):
                self.lines[(*path, index)] = item.start_mark.line + 1
                items.append(self.build(item, (*path, index), depth + 1))
            return items
        if isinstance(node, MappingNode):
            return self._mapping(node, path, depth)
        raise _Unsafe(f"unsupported YAML node {type(node).__name__}", node)

    def _mapping(self, node: MappingNode, path: Path_, depth: int) -> dict[str, Any]:
        self._check_tag(node, "map")
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise _Unsafe("mapping keys must be plain scalars", key_node)
            if key_node.tag == _TAG + "merge":
                raise _Unsafe("merge keys (<<) are not supported; write the fields out", key_node)
            key = str(self._scalar(key_node))
            key_line = key_node.start_mark.line + 1
            if key in out:
                self.diagnostics.append(
                    Diagnostic(
                        "YAML_DUPLICATE_KEY",
                        f"key '{key}' appears more than once in this mapping "
                        f"(first on line {self.lines[(*path, key)]})",
                        file=self.file,
                        line=key_line,
                        path=json_pointer((*path, key)),
                        hint="remove one of them; YAML keeps only one value",
                    )
                )
                continue
            self.lines[(*path, key)] = key_line
            out[key] = self.build(value_node, (*path, key), depth + 1)
        return out

    def _scalar(self, node: ScalarNode) -> Any:
        builder = _SCALAR_BUILDERS.get(node.tag)
        if builder is None:
            raise _Unsafe(f"YAML tag '{node.tag}' is not allowed", node)
        return builder(node)

    @staticmethod
    def _check_tag(node: Node, expected: str) -> None:
        if node.tag != _TAG + expected:
            raise _Unsafe(f"YAML tag '{node.tag}' is not allowed", node)


def parse_manifest_file(path: str, content: bytes) -> tuple[list[Document], list[Diagnostic]]:
    """Parse one file into documents; any problem becomes a diagnostic, never an exception."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = content[: exc.start].count(b"\n") + 1
        return [], [
            Diagnostic(
                "YAML_SYNTAX",
                f"the file is not UTF-8 text (byte 0x{content[exc.start]:02x} at offset "
                f"{exc.start})",
                file=path,
                line=line,
                hint="save the file as UTF-8",
            )
        ]
    builder = _Builder(path)
    documents: list[Document] = []
    try:
        for index, node in enumerate(yaml.compose_all(text, Loader=_Loader)):
            if node is None or (isinstance(node, ScalarNode) and node.tag == _TAG + "null"):
                continue  # an empty document between `---` separators
            builder.seen.clear()
            builder.lines = {}
            data = builder.build(node, ())
            documents.append(
                Document(path, index, node.start_mark.line + 1, data, builder.lines)
            )
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        problem = exc.problem or exc.context or "invalid YAML"
        return [], [Diagnostic("YAML_SYNTAX", f"not valid YAML: {problem}", file=path, line=line)]
    except yaml.YAMLError as exc:  # reader errors: control characters, bad encodings
        return [], [Diagnostic("YAML_SYNTAX", f"not valid YAML: {_reader_problem(exc)}",
                               file=path, line=_reader_line(text, exc))]
    except _Unsafe as exc:
        return [], [
            Diagnostic(
                "YAML_UNSAFE",
                str(exc),
                file=path,
                line=exc.line,
                hint="manifests use plain YAML: no tags, few aliases",
            )
        ]
    if not documents and not builder.diagnostics:
        builder.diagnostics.append(
            Diagnostic(
                "SCHEMA_TYPE",
                "the file holds no manifest",
                file=path,
                line=1,
                hint="delete the file, or write a manifest with apiVersion, kind and metadata",
            )
        )
    return documents, builder.diagnostics


def _reader_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "reason", None)
    character = getattr(exc, "character", None)
    if problem and character is not None:
        return f"{problem} ({character!r})"
    return str(exc).splitlines()[0]


def _reader_line(text: str, exc: yaml.YAMLError) -> int:
    position = getattr(exc, "position", None)
    if isinstance(position, int):
        return text.count("\n", 0, position) + 1
    return 1


# --- sources --------------------------------------------------------------------------------


def _area_of(path: str) -> str | None:
    """Which part of the repo layout a file belongs to, or None when it is ignored."""
    if path == REPO_CONFIG_FILE:
        return "root"
    top = path.split("/", 1)[0]
    if top in ("provider", "tenants") and path.endswith(_MANIFEST_SUFFIXES):
        return top
    return None


def _in_scope_dir(path: str) -> bool:
    return path in ("provider", "tenants") or path.startswith(("provider/", "tenants/"))


def folder_files(root: Path) -> Iterator[SourceFile | Diagnostic]:
    """Manifest files of a folder, refusing anything that leaves it."""
    if not root.is_dir():
        raise SourceError(f"{root} is not a folder")
    real_root = os.path.realpath(root)

    def read_file(full: str) -> Callable[[], bytes]:
        return lambda: Path(full).read_bytes()

    def walk(rel_dir: str) -> Iterator[SourceFile | Diagnostic]:
        full_dir = os.path.join(root, rel_dir)
        try:
            entries = sorted(os.scandir(full_dir), key=lambda entry: entry.name)
        except OSError as exc:
            yield Diagnostic("PATH_UNSAFE", f"cannot read folder: {exc.strerror}",
                             file=rel_dir or ".")
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if not _in_scope_dir(rel) and rel != REPO_CONFIG_FILE:
                continue
            if not _PLAIN_NAME.match(entry.name):
                yield Diagnostic("PATH_UNSAFE", f"'{rel}' is not a plain file name",
                                 file=rel, hint="use letters, digits, '.', '_' and '-'")
                continue
            yield from visit(entry, rel)

    def visit(entry: os.DirEntry[str], rel: str) -> Iterator[SourceFile | Diagnostic]:
        full = entry.path
        if entry.is_symlink():
            target = os.path.realpath(full)
            if os.path.commonpath([real_root, target]) != real_root:
                yield Diagnostic("PATH_UNSAFE", f"'{rel}' is a symlink that leaves the repo",
                                 file=rel, hint="copy the file into the repo instead")
                return
            if os.path.isdir(target):
                yield Diagnostic("PATH_UNSAFE", f"'{rel}' is a symlinked folder; not followed",
                                 file=rel, hint="symlinks may only point at files in the repo")
                return
        try:
            info = os.stat(full)
        except OSError as exc:
            yield Diagnostic("PATH_UNSAFE", f"'{rel}' cannot be read: {exc.strerror}", file=rel)
            return
        if stat.S_ISDIR(info.st_mode):
            yield from walk(rel)
        elif _area_of(rel) is None:
            return
        elif not stat.S_ISREG(info.st_mode):
            yield Diagnostic("PATH_UNSAFE", f"'{rel}' is not a regular file", file=rel)
        else:
            yield SourceFile(rel, info.st_size, read_file(full))

    yield from walk("")


def git_files(start: Path, rev: str) -> Iterator[SourceFile | Diagnostic]:
    """Manifest files of a Git revision, read from Git objects without a checkout."""
    import git  # imported here: folder mode never needs it

    try:
        repo = git.Repo(start, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise SourceError(f"{start} is not inside a Git repository") from exc
    try:
        commit = repo.commit(rev)
    except (git.BadName, ValueError) as exc:
        raise SourceError(
            f"revision '{rev}' does not exist in {repo.working_dir}",
        ) from exc
    prefix = os.path.relpath(os.path.realpath(start), os.path.realpath(repo.working_dir))
    prefix = "" if prefix == "." else Path(prefix).as_posix()
    listing = repo.git.ls_tree("-r", "-l", "-z", commit.hexsha, "--", prefix or ".")
    entries: dict[str, tuple[str, str, int]] = {}
    for record in listing.split("\0"):
        if not record:
            continue
        meta, path = record.split("\t", 1)
        mode, _type, sha, size = meta.split()
        rel = path[len(prefix) + 1:] if prefix else path
        entries[rel] = (mode, sha, int(size) if size != "-" else 0)

    def reader(sha: str) -> Callable[[], bytes]:
        return lambda: repo.odb.stream(bytes.fromhex(sha)).read()

    for rel in sorted(entries):
        mode, sha, size = entries[rel]
        area = _area_of(rel)
        if area is None:
            continue
        if any(not _PLAIN_NAME.match(part) for part in rel.split("/")):
            if not any(part.startswith(".") for part in rel.split("/")):
                yield Diagnostic("PATH_UNSAFE", f"'{rel}' is not a plain file name", file=rel,
                                 hint="use letters, digits, '.', '_' and '-'")
            continue
        if mode == "120000":
            target = reader(sha)().decode("utf-8", "replace")
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
            if target.startswith("/") or resolved.startswith("../") or resolved == "..":
                yield Diagnostic("PATH_UNSAFE", f"'{rel}' is a symlink that leaves the repo",
                                 file=rel, hint="copy the file into the repo instead")
                continue
            if resolved not in entries or entries[resolved][0] not in ("100644", "100755"):
                yield Diagnostic("PATH_UNSAFE",
                                 f"'{rel}' is a symlink to '{resolved}', which is not a file",
                                 file=rel, hint="symlinks may only point at files in the repo")
                continue
            _mode, sha, size = entries[resolved]
        elif mode not in ("100644", "100755"):
            continue  # submodules and the like hold no manifests
        yield SourceFile(rel, size, reader(sha), blob_id=sha)


def load_documents(
    files: Iterator[SourceFile | Diagnostic],
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> tuple[list[Document], list[Diagnostic]]:
    """Read and parse every manifest file; reports problems instead of raising."""
    documents: list[Document] = []
    diagnostics: list[Diagnostic] = []
    for item in files:
        if isinstance(item, Diagnostic):
            diagnostics.append(item)
            continue
        if item.size > max_file_bytes:
            diagnostics.append(
                Diagnostic(
                    "FILE_TOO_LARGE",
                    f"the file has {item.size:,} bytes; the bound is {max_file_bytes:,}",
                    file=item.path,
                    line=1,
                    hint="split it into several files",
                )
            )
            continue
        content = item.read()
        if len(content) > max_file_bytes:  # the size may change between listing and reading
            diagnostics.append(Diagnostic("FILE_TOO_LARGE", "the file grew above the bound",
                                          file=item.path, line=1))
            continue
        docs, problems = parse_manifest_file(item.path, content)
        area = _area_of(item.path) or ""
        parts = item.path.split("/")
        tenant = parts[1] if area == "tenants" and len(parts) >= 3 else None
        for doc in docs:
            doc.area = area
            doc.tenant = tenant
        documents.extend(docs)
        diagnostics.extend(problems)
    return documents, diagnostics
