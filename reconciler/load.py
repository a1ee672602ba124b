"""Stage `load`: read a network repo (a folder or a Git revision) into documents.

Every document keeps its file and the text it was read from, so later stages can
point at the offending field: the line of each node is found again from that text
when a diagnostic first asks, so a valid repo never maps its lines. Only safe YAML
is accepted: no tags beyond the core schema, a bound on aliases and nesting,
duplicate keys rejected, a size bound per file, and no path that leaves the repo.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.events import CollectionEndEvent, CollectionStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .diagnostics import Diagnostic, json_pointer
from .errors import UnetError

DEFAULT_MAX_FILE_BYTES = 1024 * 1024
MAX_ALIASES = 100
MAX_NODES = 250_000  # values one file may expand to, aliases included
MAX_DEPTH = 64
# libyaml composes nested collections by recursing in C, without a bound: some ten thousand
# levels (a 20 KB file of '[') overflow the stack and kill the process. Every level needs
# one of these characters, so only a file holding more of them than the bound is walked
# event by event (flat, safe) before it is composed.
_NESTING_INDICATORS = b"[{-:?"
_SAFE_INDICATORS = 1000
REPO_CONFIG_FILE = "unet.yaml"
_MANIFEST_SUFFIXES = (".yaml", ".yml")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")

try:  # libyaml when available: an order of magnitude faster than pure Python
    _BaseLoader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _BaseLoader = yaml.SafeLoader

#: Tags by (node kind, value, implicit). PyYAML resolves each node's tag with regexes in
#: Python, and manifests repeat values a lot (field names, kinds, protocols): this C-level
#: cache is called straight from libyaml's composer, without a Python frame on a hit. One
#: resolver serves every loader: without path resolvers, a tag depends on nothing else.
_resolve = functools.lru_cache(maxsize=100_000)(yaml.resolver.Resolver().resolve)


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """Resolutions are remembered (`_resolve`); path resolvers, which manifests never use,
    are switched off."""

    resolve = staticmethod(_resolve)

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        return None

    def ascend_resolver(self) -> None:
        return None

_TAG = "tag:yaml.org,2002:"
_STR = _TAG + "str"
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


class LineSource:
    """The text some documents were composed from: a file's, or one piece of it (`span`)
    when a syntax error made it be parsed document by document. Their line maps are built
    from it again on the first `Document.line_of`: only diagnostics need lines, and
    mapping every node of every file cost each run time and memory. The file's text may
    be kept as the UTF-8 bytes read (a file from the parse cache): decoded only then."""

    __slots__ = ("_maps", "file", "span", "text")

    def __init__(self, file: str, text: str | bytes,
                 span: tuple[int, int] | None = None) -> None:
        self.file = file
        self.text = text
        self.span = span
        self._maps: dict[int, dict[Path_, int]] | None = None

    def piece(self) -> str:
        """What was composed. A piece keeps its line numbers: it is parsed after as many
        empty lines as precede it."""
        text = self.text if isinstance(self.text, str) else self.text.decode("utf-8")
        if self.span is None:
            return text
        start, end = self.span
        return "\n" * text.count("\n", 0, start) + text[start:end]

    def lines(self, position: int) -> dict[Path_, int]:
        """Line of every node of the `position`th document of the text, by path."""
        if self._maps is None:
            self._maps = _line_maps(self.file, self.piece())
        return self._maps.get(position, {})


@dataclass(slots=True)
class Document:
    """One YAML document of a manifest file."""

    file: str  # posix path relative to the network repo root
    index: int  # position in the file, 0-based
    line: int  # 1-based line where the document starts
    data: Any
    tenant: str | None = None  # from the folder: tenants/<tenant>/...
    area: str = ""  # "root", "provider" or "tenants"
    # Not YAML: `data` holds only the kind and name read from its text, if they could be,
    # so that what names it is not reported again.
    broken: bool = False
    source: LineSource | None = field(default=None, compare=False, repr=False)
    position: int = field(default=0, compare=False, repr=False)  # among the source's documents
    built_lines: dict[Path_, int] | None = field(default=None, compare=False, repr=False)

    @property
    def lines(self) -> dict[Path_, int]:
        """Line of every node, by path; built from the source text on first use."""
        if self.built_lines is None:
            self.built_lines = {} if self.source is None else self.source.lines(self.position)
        return self.built_lines

    def line_of(self, path: Path_) -> int:
        """Line of the node at `path`, or of its nearest ancestor that exists."""
        lines = self.lines
        path = tuple(path)
        while path:
            line = lines.get(path)
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


class SourceError(UnetError):
    """The repo itself cannot be read (missing folder, unknown revision, ...)."""


class _Unsafe(Exception):
    code = "YAML_UNSAFE"
    hint = "manifests use plain YAML: no tags, few aliases"

    def __init__(self, message: str, node: Node | int) -> None:
        super().__init__(message)
        self.line = node if isinstance(node, int) else node.start_mark.line + 1


class _BadScalar(_Unsafe):
    """A scalar whose tag promises a type its text is not (`!!int abc`, 5000 digits)."""

    code = "YAML_SYNTAX"
    hint = "quote the value to make it text"


class _Duplicate(Exception):
    """A key seen twice in one mapping: reported by _LineBuilder, which knows paths."""


class _Builder:
    """Turns a composed YAML node tree into plain data, refusing what is not safe.

    It keeps neither paths nor lines, which only diagnostics need. A duplicate key, the
    one problem that is reported and read past, raises _Duplicate: the file is built
    again by _LineBuilder."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.aliases = 0
        self.nodes = 0

    def build(self, node: Node, depth: int = 0, aliased: bool = False) -> Any:
        """Plain data of `node`; `aliased` while inside a subtree reached through an alias."""
        self._count(node, depth)
        if node.__class__ is ScalarNode:  # the common case first: no alias bookkeeping
            return node.value if node.tag == _STR else self._scalar(node)
        aliased = self._aliased(node, aliased)
        if isinstance(node, SequenceNode):
            self._check_tag(node, "seq")
            return [self.build(item, depth + 1, aliased) for item in node.value]
        if isinstance(node, MappingNode):
            return self._mapping(node, depth + 1, aliased)
        raise _Unsafe(f"unsupported YAML node {type(node).__name__}", node)

    def _mapping(self, node: MappingNode, depth: int, aliased: bool) -> dict[str, Any]:
        self._check_tag(node, "map")
        out: dict[str, Any] = {}
        plain = depth <= MAX_DEPTH  # a string value needs no call to `build` then
        for key_node, value_node in node.value:
            key = key_node.value if key_node.__class__ is ScalarNode and \
                key_node.tag == _STR else self._key(key_node)
            if key in out:
                raise _Duplicate
            if plain and value_node.__class__ is ScalarNode and value_node.tag == _STR \
                    and self.nodes < MAX_NODES:
                self.nodes += 1  # what `build` counts
                out[key] = value_node.value
            else:
                out[key] = self.build(value_node, depth, aliased)
        return out

    def _count(self, node: Node, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise _Unsafe(f"nesting deeper than {MAX_DEPTH} levels", node)
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _Unsafe(f"the file expands to more than {MAX_NODES:,} values (alias bomb?)",
                          node)

    def _aliased(self, node: Node, aliased: bool) -> bool:
        """Whether `node`'s subtree is reached through an alias; counts the aliases."""
        if id(node) not in self.seen:
            self.seen.add(id(node))
        elif not aliased:
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise _Unsafe(f"more than {MAX_ALIASES} aliases", node)
            return True
        return aliased

    def _key(self, node: Node) -> str:
        if not isinstance(node, ScalarNode):
            raise _Unsafe("mapping keys must be plain scalars", node)
        if node.tag == _STR:
            return node.value  # type: ignore[no-any-return]
        if node.tag == _TAG + "merge":
            raise _Unsafe("merge keys (<<) are not supported; write the fields out", node)
        return str(self._scalar(node))

    def _scalar(self, node: ScalarNode) -> Any:
        builder = _SCALAR_BUILDERS.get(node.tag)
        if builder is None:
            raise _Unsafe(f"YAML tag '{node.tag}' is not allowed", node)
        try:
            return builder(node)
        except (ValueError, KeyError, IndexError) as exc:  # PyYAML's constructors trust the tag
            text = node.value if len(node.value) <= 40 else node.value[:37] + "..."
            kind = node.tag.removeprefix(_TAG)
            problem = "has too many digits" if "digits" in str(exc) else f"is not a valid {kind}"
            raise _BadScalar(f"{text!r} {problem}", node) from exc

    @staticmethod
    def _check_tag(node: Node, expected: str) -> None:
        if node.tag != _TAG + expected:
            raise _Unsafe(f"YAML tag '{node.tag}' is not allowed", node)


class _LineBuilder(_Builder):
    """The same data and checks, plus the line of every node by path: for Document.lines,
    and to report duplicate keys (each on its line, pointing at the first one)."""

    def __init__(self, file: str) -> None:
        super().__init__()
        self.file = file
        self.lines: dict[Path_, int] = {}
        self.diagnostics: list[Diagnostic] = []

    def build_at(self, node: Node, path: Path_, depth: int = 0, aliased: bool = False) -> Any:
        self._count(node, depth)
        if node.__class__ is ScalarNode:
            return node.value if node.tag == _STR else self._scalar(node)
        aliased = self._aliased(node, aliased)
        if isinstance(node, SequenceNode):
            self._check_tag(node, "seq")
            items = []
            for index, item in enumerate(node.value):
                self.lines[(*path, index)] = item.start_mark.line + 1
                items.append(self.build_at(item, (*path, index), depth + 1, aliased))
            return items
        if isinstance(node, MappingNode):
            return self._mapping(node, path, depth, aliased)
        raise _Unsafe(f"unsupported YAML node {type(node).__name__}", node)

    def _mapping(self, node: MappingNode, path: Path_, depth: int,
                 aliased: bool) -> dict[str, Any]:
        self._check_tag(node, "map")
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self._key(key_node)
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
            out[key] = self.build_at(value_node, (*path, key), depth + 1, aliased)
        return out


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
    return _parse(path, text, content, salvage=True)


def _empty(node: Node | None) -> bool:
    """An empty document between `---` separators."""
    return node is None or (isinstance(node, ScalarNode) and node.tag == _TAG + "null")


def _parse(path: str, text: str, content: bytes, salvage: bool, with_lines: bool = False,
           source: LineSource | None = None) -> tuple[list[Document], list[Diagnostic]]:
    """Documents of `text` (which is `source`'s), built without line maps unless a
    duplicate key needs them."""
    source = source or LineSource(path, text)
    documents: list[Document] = []
    builder = _LineBuilder(path) if with_lines else _Builder()
    try:
        deep = _too_deep(content)
        if deep is not None:
            raise _Unsafe(f"nesting deeper than {MAX_DEPTH} levels", deep)
        for index, node in enumerate(yaml.compose_all(text, Loader=_Loader)):
            if _empty(node):
                continue
            builder.seen.clear()
            documents.append(_document(builder, node, source, index))
    except _Duplicate:
        return _parse(path, text, content, salvage, with_lines=True, source=source)
    except yaml.MarkedYAMLError as exc:
        return _by_document(path, text) if salvage else ([], [_syntax_error(path, exc, text)])
    except yaml.YAMLError as exc:  # reader errors: control characters, bad encodings
        return [], [Diagnostic("YAML_SYNTAX", f"not valid YAML: {_reader_problem(exc)}",
                               file=path, line=_reader_line(content, exc))]
    except _Unsafe as exc:
        return [], [Diagnostic(exc.code, str(exc), file=path, line=exc.line, hint=exc.hint)]
    problems = builder.diagnostics if isinstance(builder, _LineBuilder) else []
    if not documents and not problems:
        problems.append(
            Diagnostic(
                "SCHEMA_TYPE",
                "the file holds no manifest",
                file=path,
                line=1,
                hint="delete the file, or write a manifest with apiVersion, kind and metadata",
            )
        )
    return documents, problems


def _document(builder: _Builder, node: Node, source: LineSource, index: int) -> Document:
    line = node.start_mark.line + 1
    if not isinstance(builder, _LineBuilder):
        return Document(source.file, index, line, builder.build(node), source=source,
                        position=index)
    builder.lines = {}
    data = builder.build_at(node, ())
    return Document(source.file, index, line, data, source=source, position=index,
                    built_lines=builder.lines)


def _line_maps(path: str, text: str) -> dict[int, dict[Path_, int]]:
    """Line maps of the documents of `text`, by position: `text` was parsed without error
    before, so it composes the same way again."""
    builder = _LineBuilder(path)
    maps: dict[int, dict[Path_, int]] = {}
    for position, node in enumerate(yaml.compose_all(text, Loader=_Loader)):
        if not _empty(node):
            builder.seen.clear()
            builder.lines = {}
            builder.build_at(node, ())
            maps[position] = builder.lines
    return maps


_SEPARATOR = re.compile(r"^(?:---(?:[ \t].*)?|\.\.\.[ \t]*)$", re.M)
_KIND = re.compile(r"^kind:[ \t]*[\"']?([A-Za-z]+)[\"']?[ \t]*(?:#.*)?$", re.M)
# Each line below `metadata:` (blank, or indented) matches in one way only. `[ \t]+.*\n`
# could split a line's indent between its two parts in as many ways as it has blanks: a
# broken document whose metadata held a dozen lines but no plain name took seconds, and
# each line more multiplied that.
_NAME = re.compile(r"^metadata:[ \t]*\n(?:(?:[ \t].*)?\n)*?[ \t]+name:[ \t]*[\"']?"
                   r"([a-z0-9][-a-z0-9]*)[\"']?[ \t]*(?:#.*)?$", re.M)


def _by_document(path: str, text: str) -> tuple[list[Document], list[Diagnostic]]:
    """A file with a syntax error, parsed document by document: one broken document costs
    one error, and the others are read as usual. Each piece keeps its line numbers."""
    starts = [0, *(m.start() for m in _SEPARATOR.finditer(text) if m.start() > 0)]
    documents: list[Document] = []
    diagnostics: list[Diagnostic] = []
    for index, (start, end) in enumerate(zip(starts, [*starts[1:], len(text)], strict=True)):
        source = LineSource(path, text, (start, end))
        piece = source.piece()
        docs, problems = _parse(path, piece, piece.encode(), salvage=False, source=source)
        documents += [_renumbered(doc, index) for doc in docs]
        diagnostics += [d for d in problems if d.code != "SCHEMA_TYPE" or docs]
        if any(d.code == "YAML_SYNTAX" for d in problems):
            documents.append(_broken(path, index, text.count("\n", 0, start) + 1,
                                     text[start:end]))
    return documents, diagnostics


def _renumbered(doc: Document, index: int) -> Document:
    doc.index = index
    return doc


def _broken(path: str, index: int, line: int, text: str) -> Document:
    kind, name = _KIND.search(text), _NAME.search(text)
    data = {"kind": kind.group(1), "metadata": {"name": name.group(1)}} if kind and name \
        else None
    return Document(path, index, line, data, broken=True)


def _syntax_error(path: str, exc: yaml.MarkedYAMLError, text: str) -> Diagnostic:
    """A YAML syntax error in plain words, at the mistake where it can be told from where
    the reader noticed it (a missing ':' shows only on a later line)."""
    lines = text.splitlines()
    spot = _bad_character(exc, lines) or _missing_colon(exc, lines) or _stray_colon(exc, lines)
    if spot is not None:
        line, column, message, hint = spot
        return Diagnostic("YAML_SYNTAX", message, file=path, line=line, column=column,
                          hint=hint)
    mark = exc.problem_mark or exc.context_mark
    problem = str(exc.problem or exc.context or "invalid YAML")
    message, hint = f"not valid YAML: {problem}", None
    for pattern, words, advice in _PLAIN_WORDS:
        if pattern in problem or pattern in str(exc.context or ""):
            message, hint = words, advice
            if "never closed" in words and exc.context_mark is not None:
                mark = exc.context_mark  # where it was opened, not where that was noticed
            break
    return Diagnostic("YAML_SYNTAX", message, file=path,
                      line=mark.line + 1 if mark is not None else 1,
                      column=mark.column + 1 if mark is not None else None, hint=hint)


_TAB = ("a tab character: YAML indents with spaces only",
        "replace the tab with spaces (two per level)")
_INDENT = "indent with spaces, so that the fields of one mapping line up exactly"
#: (what the reader says, what it means, how to fix it)
_PLAIN_WORDS = (
    ("tab", *_TAB),
    ("mapping values are not allowed",
     "a ':' where no key can start: this line is indented more than its block, or a value "
     "holds ': '", f"{_INDENT}; quote values that contain ': '"),
    ("expected <block end>", "this line's indentation does not match the block it is in",
     _INDENT),
    ("did not find expected key", "this line's indentation does not match the block it is in",
     _INDENT),
    ("could not find expected ':'", "a key without ':'", "write key: value"),
    ("while scanning a quoted scalar", "a quoted value is never closed",
     "close the quote on the same value"),
    ("flow sequence", "a [list] is never closed", "close it with ]"),
    ("flow mapping", "a {mapping} is never closed", "close it with }"),
)

#: (line, column, message, hint) of a syntax error, both 1-based
_Spot = tuple[int, int, str, str]
_KEY_COLON = re.compile(r":(?:\s|$)")  # a ':' that ends a key
_KEY_START = re.compile(r"^ *(?:- +)*")  # what precedes a line's key: its indent, item dashes
_COMMENT = re.compile(r"(?:^|\s+)#.*$")


def _bad_character(exc: yaml.MarkedYAMLError, lines: list[str]) -> _Spot | None:
    """A tab, or a character YAML reserves, where a key or a value should start."""
    mark = exc.problem_mark
    if mark is None or "cannot start any token" not in str(exc.problem):
        return None
    character = _line(lines, mark.line)[mark.column:mark.column + 1]
    if character == "\t":
        return (mark.line + 1, mark.column + 1, *_TAB)
    if character in ("@", "`"):
        return (mark.line + 1, mark.column + 1,
                f"a value cannot start with '{character}': YAML reserves it",
                "put the value in quotes")
    return None


#: What libyaml says on the line after a key without ':' (read as a value going on there,
#: or ended by a comment) when the next key's ':' arrives.
_NOTICED_BELOW = ("mapping values are not allowed", "did not find expected key")


def _missing_colon(exc: yaml.MarkedYAMLError, lines: list[str]) -> _Spot | None:
    """A key whose ':' is missing. libyaml notices it on a later line: where the key's
    line ended ("could not find expected ':'", the key's start being the context), or at
    the next key (_NOTICED_BELOW)."""
    problem = str(exc.problem)
    if "could not find expected ':'" in problem and exc.context_mark is not None:
        index, start = exc.context_mark.line, exc.context_mark.column
    elif any(words in problem for words in _NOTICED_BELOW) and exc.problem_mark is not None:
        found = _keyless_line_above(lines, exc.problem_mark.line)
        if found is None:
            return None
        index, start = found, _key_start(lines[found])
    else:
        return None
    return _colon_spot(index, start, _line(lines, index))


def _keyless_line_above(lines: list[str], index: int) -> int | None:
    """The line above `index` (blank lines and comments aside) when its key would line up
    with `index`'s and it has no ':'."""
    indent = _key_start(_line(lines, index))
    for above in range(index - 1, -1, -1):
        text = _COMMENT.sub("", lines[above])
        if text.strip():
            lined_up = _key_start(text) == indent
            return above if lined_up and not _KEY_COLON.search(text) else None
    return None


def _colon_spot(index: int, start: int, line: str) -> _Spot:
    """Where the ':' of the key starting at `start` of `line` belongs, and the line fixed."""
    key, _, rest = _COMMENT.sub("", line[start:]).strip().partition(" ")
    rest = rest.strip()
    if ":" in key:  # `key:value`: only a ':' followed by a space (or the end) ends a key
        name, _, value = key.partition(":")
        fixed = " ".join(part for part in (f"{name}:", value, rest) if part)
        return (index + 1, start + len(name) + 2, "a ':' without a space after it",
                f"write '{fixed}'")
    fixed = f"{key}: {rest}" if rest else f"{key}:"
    return (index + 1, start + len(key) + 1, "a key without ':'", f"write '{fixed}'")


def _stray_colon(exc: yaml.MarkedYAMLError, lines: list[str]) -> _Spot | None:
    """A ':' where no key can start, below a line with its own ':' (else _missing_colon):
    in a value that holds ': ', or on a line indented deeper than the key above it."""
    mark = exc.problem_mark
    if mark is None or "mapping values are not allowed" not in str(exc.problem):
        return None
    line = _line(lines, mark.line)
    key_colon = _KEY_COLON.search(line[:mark.column])
    if key_colon is not None:
        value = _COMMENT.sub("", line[key_colon.end():]).strip().replace("'", "''")
        return (mark.line + 1, mark.column + 1,
                "a value holds ': ', which YAML reads as the end of a key",
                f"put the value in quotes: '{value}'")
    return (mark.line + 1, _key_start(line) + 1,
            "this line is indented more than the key above it", _INDENT)


def _key_start(line: str) -> int:
    """Column (0-based) where the line's key starts, after its indent and any '- '."""
    return _KEY_START.match(line).end()  # type: ignore[union-attr]


def _line(lines: list[str], index: int) -> str:
    return lines[index] if index < len(lines) else ""


def _reader_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "reason", None)
    character = getattr(exc, "character", None)
    if problem and character is not None:
        return f"{problem} ({character!r})"
    return str(exc).splitlines()[0]


def _reader_line(content: bytes, exc: yaml.YAMLError) -> int:
    position = getattr(exc, "position", None)  # libyaml: a byte offset into the UTF-8 text
    if isinstance(position, int):
        return content.count(b"\n", 0, position) + 1
    return 1


def _too_deep(content: bytes) -> int | None:
    """Line where collections first nest deeper than MAX_DEPTH, or None."""
    if sum(content.count(char) for char in _NESTING_INDICATORS) <= _SAFE_INDICATORS:
        return None
    loader = _Loader(content)
    depth = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    return int(event.start_mark.line) + 1
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        # libyaml 0.2.6 (PyYAML 6.0.4's wheels) stops at 1,000 levels itself, and its
        # scanner reads a flow collection's brackets ahead of the events counted here:
        # deeper than MAX_DEPTH all the same, noticed where the reader stopped.
        if "nesting depth" not in str(exc.problem):
            raise
        return int(exc.problem_mark.line) + 1 if exc.problem_mark is not None else 1
    finally:
        loader.dispose()
    return None


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


def _in_scope(path: str) -> bool:
    """Whether a path is looked at at all: in the layout and not hidden."""
    if any(part.startswith(".") for part in path.split("/")):
        return False
    return path == REPO_CONFIG_FILE or _in_scope_dir(path)


def _plain_path(path: str) -> bool:
    return all(_PLAIN_NAME.match(part) for part in path.split("/"))


def _unsafe_path(path: str, problem: str, hint: str | None = None) -> Diagnostic:
    """PATH_UNSAFE on `path`, shown printable even when the name is not UTF-8 or holds '\\n'."""
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
    return Diagnostic("PATH_UNSAFE", f"'{shown}' {problem}", file=shown, line=1, hint=hint)


_NOT_PLAIN = ("is not a plain file name", "use letters, digits, '.', '_' and '-'")
_LEAVES = ("is a symlink that leaves the repo", "copy the file into the repo instead")
_LINKED_FOLDER = ("is a symlinked folder; not followed",
                  "symlinks may only point at files in the repo")
_SYMLINK_HOPS = 40
#: Another repository's files (a submodule's checkout, or a clone inside the repo) are not
#: part of a revision: folder and Git mode refuse them alike.
_REPOSITORY = ("is another Git repository (a submodule or a clone); its files are not part "
               "of this revision", "copy the manifests into the repo instead")
_INTO_REPOSITORY = ("is a symlink into another Git repository (a submodule or a clone); its "
                    "files are not part of this revision", _REPOSITORY[1])
_GITLINK = "160000"
_SUBMODULE_PATH = re.compile(r"^\s*path\s*=\s*(.+?)\s*$", re.M)


def _submodules(root: str) -> set[str]:
    """Paths, relative to `root`, of the submodules its Git work tree declares in
    .gitmodules: there whether or not they are checked out."""
    top = root
    while not os.path.lexists(os.path.join(top, ".git")):
        parent = os.path.dirname(top)
        if parent == top:
            return set()
        top = parent
    try:
        text = Path(top, ".gitmodules").read_text(errors="replace")
    except OSError:
        return set()
    out = set()
    for path in _SUBMODULE_PATH.findall(text):
        rel = os.path.relpath(os.path.join(top, path), root)
        if not rel.startswith(".."):
            out.add(Path(rel).as_posix())
    return out


def _within(path: str, folders: set[str]) -> bool:
    return any(path == f or path.startswith(f + "/") for f in folders)


STATE_DIR = ".unet"


def _state_tracked(tracked: list[str]) -> Iterator[Diagnostic]:
    """UNET_DIR_TRACKED when Git holds files of the repo's `.unet/` (`tracked`): that is one
    machine's state (its database, editor tools, caches); a commit must never supply it."""
    if tracked:
        shown = ", ".join(tracked[:3]) + (f" and {len(tracked) - 3} more"
                                          if len(tracked) > 3 else "")
        yield Diagnostic(
            "UNET_DIR_TRACKED",
            f"'{STATE_DIR}/' is tracked by Git ({shown}): it holds one machine's local state "
            "(an embedded database, caches), which no commit may supply",
            file=tracked[0], line=1,
            hint=f"git rm -r --cached {STATE_DIR} and commit; keep '{STATE_DIR}/' in "
                 ".gitignore")


def _tracked_in_checkout(root: Path) -> list[str]:
    """Files of `root`'s `.unet/` that the Git index holds, when `root` is in a checkout."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z", "--", STATE_DIR], cwd=root,
                                 capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []  # not a Git checkout (or no git): nothing can be tracked
    return sorted(os.fsdecode(path) for path in listing.split(b"\0") if path)


def folder_files(root: Path) -> Iterator[SourceFile | Diagnostic]:
    """Manifest files of a folder, refusing anything that leaves it."""
    if not root.is_dir():
        raise SourceError(f"{root} is not a folder")
    yield from _state_tracked(_tracked_in_checkout(root))
    real_root = os.path.realpath(root)
    submodules = _submodules(real_root)

    def read_file(full: str) -> Callable[[], bytes]:
        return lambda: Path(full).read_bytes()

    def walk(rel_dir: str) -> Iterator[SourceFile | Diagnostic]:
        full_dir = os.path.join(root, rel_dir)
        try:
            entries = sorted(os.scandir(full_dir), key=lambda entry: entry.name)
        except OSError as exc:
            yield _unsafe_path(rel_dir or ".", f"cannot be read: {exc.strerror}")
            return
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if _in_scope(rel):
                yield from visit(entry, rel)

    def symlink_problem(full: str) -> tuple[str, str] | None:
        target = os.path.realpath(full)
        if os.path.isabs(os.readlink(full)) or \
                os.path.commonpath([real_root, target]) != real_root:
            return _LEAVES
        if os.path.isdir(target):
            return _LINKED_FOLDER
        return _INTO_REPOSITORY if in_repository(target) else None

    def in_repository(target: str) -> bool:
        """Inside a submodule, or a folder of the repo holding its own `.git`."""
        if _within(Path(os.path.relpath(target, real_root)).as_posix(), submodules):
            return True
        folder = os.path.dirname(target)
        while folder != real_root and folder.startswith(real_root):
            if os.path.lexists(os.path.join(folder, ".git")):
                return True
            folder = os.path.dirname(folder)
        return False

    def visit(entry: os.DirEntry[str], rel: str) -> Iterator[SourceFile | Diagnostic]:
        full = entry.path
        if entry.is_symlink():
            problem = symlink_problem(full)
            if problem is not None:
                yield _unsafe_path(rel, *problem)
                return
        elif entry.is_dir():
            if rel in submodules or os.path.lexists(os.path.join(full, ".git")):
                yield _unsafe_path(rel, *_REPOSITORY)
            else:
                yield from walk(rel)
            return
        if _area_of(rel) is None:
            return
        if not _plain_path(rel):
            yield _unsafe_path(rel, *_NOT_PLAIN)
            return
        try:
            info = os.stat(full)
        except OSError as exc:
            yield _unsafe_path(rel, f"cannot be read: {exc.strerror}")
            return
        if not stat.S_ISREG(info.st_mode):
            yield _unsafe_path(rel, "is not a regular file")
        else:
            yield SourceFile(rel, info.st_size, read_file(full))

    yield from walk("")


def git_files(start: Path, rev: str,
              max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Iterator[SourceFile | Diagnostic]:
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
    folders = {".", *(posixpath.dirname(rel) for rel in entries)}
    folders |= {f.rsplit("/", n)[0] for f in list(folders) for n in range(1, f.count("/") + 1)}

    def reader(sha: str) -> Callable[[], bytes]:
        return lambda: repo.odb.stream(bytes.fromhex(sha)).read()

    gitlinks = {rel for rel, (mode, _sha, _size) in entries.items() if mode == _GITLINK}

    def resolve(rel: str) -> tuple[str, str]:
        """Follow the symlink at `rel` to ("file"|"missing", path) or ("leaves"|"folder"|
        "repository", "")."""
        path = rel
        for _ in range(_SYMLINK_HOPS):
            target = reader(entries[path][1])().decode("utf-8", "replace")
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            if target.startswith("/") or path == ".." or path.startswith("../"):
                return "leaves", ""
            if _within(path, gitlinks):
                return "repository", ""
            if path in folders:
                return "folder", ""
            if path not in entries or entries[path][0] not in ("100644", "100755", "120000"):
                return "missing", path
            if entries[path][0] != "120000":
                return "file", path
        return "missing", rel  # a symlink loop

    items: list[SourceFile | Diagnostic] = list(_state_tracked(
        sorted(rel for rel in entries if rel.startswith(f"{STATE_DIR}/"))))
    blobs = _BlobBatch(repo.working_dir)
    for rel in sorted(entries):
        mode, sha, size = entries[rel]
        if mode == _GITLINK and _in_scope(rel):
            items.append(_unsafe_path(rel, *_REPOSITORY))
            continue
        if not _in_scope(rel) or mode not in ("100644", "100755", "120000"):
            continue
        if mode == "120000":
            found, path = resolve(rel)
            problem = {"leaves": _LEAVES, "folder": _LINKED_FOLDER,
                       "repository": _INTO_REPOSITORY}.get(found)
            if problem is not None:
                items.append(_unsafe_path(rel, *problem))
                continue
        if _area_of(rel) is None:
            continue
        if not _plain_path(rel):
            items.append(_unsafe_path(rel, *_NOT_PLAIN))
            continue
        if mode == "120000":
            if found == "missing":
                items.append(_unsafe_path(rel, f"is a symlink to '{path}', which is not a file",
                                          _LINKED_FOLDER[1]))
                continue
            _mode, sha, size = entries[path]
        if size <= max_file_bytes:
            blobs.want(sha)
        items.append(SourceFile(rel, size, blobs.reader(sha), blob_id=sha))
    yield from items


class _BlobBatch:
    """Blobs read in one `git cat-file --batch` run instead of one round trip each."""

    def __init__(self, git_dir: str) -> None:
        self.git_dir = git_dir
        self.wanted: list[str] = []
        self.blobs: dict[str, bytes] = {}

    def want(self, sha: str) -> None:
        self.wanted.append(sha)

    def reader(self, sha: str) -> Callable[[], bytes]:
        return lambda: self.read(sha)

    def read(self, sha: str) -> bytes:
        if sha not in self.blobs:
            self._fetch(self.wanted if sha in self.wanted else [sha])
            self.wanted = []
        return self.blobs[sha]

    def _fetch(self, shas: list[str]) -> None:
        process = subprocess.Popen(["git", "cat-file", "--batch"], cwd=self.git_dir,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert process.stdin is not None and process.stdout is not None
        requests = "".join(f"{sha}\n" for sha in shas).encode()
        writer = threading.Thread(target=_write_and_close, args=(process.stdin, requests))
        writer.start()  # written from a thread: the pipe would fill up both ways otherwise
        for _ in shas:
            header = process.stdout.readline().split()
            if len(header) != 3:
                raise SourceError(f"git cat-file could not read {header[0].decode()}")
            self.blobs[header[0].decode()] = process.stdout.read(int(header[2]))
            process.stdout.read(1)  # the newline after each blob
        writer.join()
        process.wait()


def _write_and_close(stream: Any, data: bytes) -> None:
    stream.write(data)
    stream.close()


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
