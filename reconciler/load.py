"""Stage `load`: read manifest files into YAML documents, safely, with their lines.

Where the files come from (a folder or a Git revision, and which paths are read at all) is
`sources`. Here each file's bytes become documents. Every document keeps its file and the
text it was read from, so later stages can point at the offending field: the line of each
node is found again from that text when a diagnostic first asks, so a valid repo never
maps its lines. Only safe YAML is accepted: no tags beyond the core schema, a bound on
aliases and nesting, duplicate keys rejected, and a size bound per file. A syntax error is
reported where the mistake is, in plain words, and costs only the document holding it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.error import Mark
from yaml.events import CollectionEndEvent, CollectionStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .diagnostics import Diagnostic, json_pointer
from .sources import DEFAULT_MAX_FILE_BYTES, SourceFile, placement

MAX_ALIASES = 100
MAX_NODES = 250_000  # values one file may expand to, aliases included
MAX_DEPTH = 64
# libyaml composes nested collections by recursing in C, without a bound: some ten thousand
# levels (a 20 KB file of '[') overflow the stack and kill the process. Every level needs
# one of these characters, so only a file holding more of them than the bound is walked
# event by event (flat, safe) before it is composed.
_NESTING_INDICATORS = b"[{-:?"
_SAFE_INDICATORS = 1000

try:  # libyaml when available: an order of magnitude faster than pure Python
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as _BaseLoader

#: Tags by (node kind, value, implicit). PyYAML resolves each node's tag with regexes in
#: Python, and manifests repeat values a lot (field names, kinds, protocols): this C-level
#: cache is called straight from libyaml's composer, without a Python frame on a hit. One
#: resolver serves every loader: without path resolvers, a tag depends on nothing else.
_resolve = functools.lru_cache(maxsize=100_000)(yaml.resolver.Resolver().resolve)


# PyYAML ships no type information (no py.typed, and no stubs are installed): to mypy its
# loaders are Any, and strict mode refuses a subclass of Any.
class _Loader(_BaseLoader):  # type: ignore[misc]
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
            return self._mapping_at(node, path, depth, aliased)
        raise _Unsafe(f"unsupported YAML node {type(node).__name__}", node)

    def _mapping_at(self, node: MappingNode, path: Path_, depth: int,
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
    if spot is None:
        return _as_noticed(path, exc)
    line, column, message, hint = spot
    return Diagnostic("YAML_SYNTAX", message, file=path, line=line, column=column, hint=hint)


def _as_noticed(path: str, exc: yaml.MarkedYAMLError) -> Diagnostic:
    """A YAML syntax error where the reader noticed it, in the plain words of _PLAIN_WORDS
    when it says one of their patterns, else in its own."""
    mark: Mark | None = exc.problem_mark or exc.context_mark
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
        area, tenant = placement(item.path)
        for doc in docs:
            doc.area = area
            doc.tenant = tenant
        documents.extend(docs)
        diagnostics.extend(problems)
    return documents, diagnostics
