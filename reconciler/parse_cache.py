"""A cache of parsed files for one-shot runs (`unet validate`, `plan`, `apply`,
`reconcile --once`): a file whose path and content were parsed before skips the YAML
reader and the schema checks.

An entry holds what `ParsedFiles` keeps of one file: its documents (their data, and
what part of the file's text their line maps are built from on demand), which of them
became manifests, and its load and schema problems. Entries are keyed by the file's
path and a SHA-256 of its bytes, so that a run on a checkout and a run on a revision
(`--rev`, `plan --base`) share them. A manifest's model is validated again from its
data when it is read: pydantic does that faster than pickle restores one, and the
schema check it passed is not run again.

The entries of one run are kept together in one pack file, under the repo's cache
folder (`cache_dir`, beside the validation results). A pack is named by, and only read
under, the digest of everything else a parse depends on: unet's code and schemas, the
versions of Python and the libraries that read and check manifests, the installed
plugins, and the size bound. It is written again, with the entries this run used (so
files no longer present drop out), only when the run parsed a file it did not hold;
the newest `KEEP_PACKS` are kept. Everything is best effort: a pack that cannot be read
or written makes the run slower, never wrong.

A pack is trusted only when this user on this machine wrote it: it carries a MAC under
the user's cache secret (`cache.seal`), over its whole index and body, so that a pack
committed to a repo, restored from elsewhere or edited gives nothing, and a torn or
damaged one is caught as well. Packs are pickles, and unpickling runs whatever code a
pickle names. So, further: a pack is read only when it is a regular file owned by the
user running unet and writable by nobody else; and it is unpickled by
`_PlainUnpickler`, which refuses any class or function, so that even a pack someone
else wrote could never run code. Entries hold only containers, text and numbers for
that reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cache import code_digest, environment_digest, is_sealed, read_own_file, seal
from .diagnostics import Diagnostic
from .load import Document, LineSource
from .plugins import plugins_digest
from .schema import Manifest, manifest_of
from .state import state_folder

KEEP_PACKS = 2
_MAGIC = b"unet parse cache 2\n"
_HEADER = struct.Struct("<QQ")  # index length, body length
_TAG_BYTES = 32  # after the header: the MAC of the header, index and body
_PREFIX, _SUFFIX = "parse-", ".pack"
FileKey = tuple[str, str]  # (path, content id)
_Index = dict[FileKey, tuple[int, int]]  # where each entry is in a pack's body


@dataclass(slots=True)
class ParsedFile:
    """What one manifest file gave: its documents, the manifests among them, and the
    problems of reading it and of its documents' shapes."""

    documents: list[Document]
    manifests: list[Manifest]
    load_problems: list[Diagnostic]
    schema_problems: list[Diagnostic]


def content_id(content: bytes) -> str:
    """Of a file's bytes, whether they come from disk or from a revision. Not the Git blob
    id, whose SHA-1 Git checks against collisions while Python's does not: a crafted twin
    of a reviewed file must not be served the reviewed file's parse."""
    return hashlib.sha256(content).hexdigest()


def pack_key(max_file_bytes: int) -> str:
    """Of every input of a parse but the file itself."""
    text = f"{code_digest()}\n{environment_digest()}\n{plugins_digest()}\n{max_file_bytes}\n"
    return hashlib.sha256(text.encode()).hexdigest()


class ParseCache:
    """The packs of one cache folder, for runs with one size bound."""

    def __init__(self, directory: Path, max_file_bytes: int) -> None:
        self.directory = directory
        self.max_file_bytes = max_file_bytes
        self._key: str | None = None
        self._body = memoryview(b"")
        self._index: _Index | None = None
        self._new: dict[FileKey, bytes] = {}

    @property
    def key(self) -> str:
        if self._key is None:
            self._key = pack_key(self.max_file_bytes)
        return self._key

    @property
    def path(self) -> Path:
        return self.directory / f"{_PREFIX}{self.key[:32]}{_SUFFIX}"

    def get(self, key: FileKey, content: bytes) -> ParsedFile | None:
        """The file (its bytes: `content`) as parsed before, or None."""
        if self._index is None:
            self._index, self._body = _read_pack(self.path, self.key)
        where = self._index.get(key)
        if where is None:
            return None
        try:
            start, length = where
            return decode(self._body[start:start + length], key[0], content)
        except Exception:  # a damaged entry is a miss, whatever it raises
            del self._index[key]
            return None

    def put(self, key: FileKey, parsed: ParsedFile) -> None:
        """Remember a file parsed now (encoded now: later stages may add to its objects)."""
        self.put_entry(key, encode(parsed))

    def put_entry(self, key: FileKey, entry: bytes) -> None:
        """Remember a file parsed now, as `encode` gave it (a parse worker's result)."""
        self._new[key] = entry

    def save(self, used: Iterable[FileKey]) -> None:
        """Write the entries of `used` as the new pack, if this run parsed any new file."""
        if not self._new:
            return
        index: _Index = {}
        blobs: list[bytes | memoryview] = []
        offset = 0
        for key in sorted(used):
            blob = self._blob(key)
            if blob is not None:
                index[key] = (offset, len(blob))
                blobs.append(blob)
                offset += len(blob)
        self._new = {}
        with contextlib.suppress(OSError):
            _write_pack(self.path, self.key, index, blobs)
            _prune(self.directory)

    def _blob(self, key: FileKey) -> bytes | memoryview | None:
        new = self._new.get(key)
        if new is not None:
            return new
        where = self._index.get(key) if self._index else None
        return self._body[where[0]:where[0] + where[1]] if where else None


# --- entries ------------------------------------------------------------------------------


def encode(parsed: ParsedFile) -> bytes:
    """One file's entry: plain tuples, lists and dicts, so that reading it builds only
    those. Not the file's text, which whoever reads the entry holds already (it is keyed
    by its hash): only which part of it each document was composed from."""
    return encode_parts(parsed.documents, [m.doc for m in parsed.manifests],
                        parsed.load_problems, parsed.schema_problems)


def encode_parts(documents: list[Document], manifests: list[Document],
                 load_problems: list[Diagnostic], schema_problems: list[Diagnostic]) -> bytes:
    """The entry of a file parsed into `documents`, of which `manifests` became manifests
    (`decode` builds their models)."""
    spans: list[tuple[int, int] | None] = []
    numbers: dict[int, int] = {}  # id(source) -> its position in spans
    entries = []
    for doc in documents:
        source = None
        if doc.source is not None:
            source = numbers.setdefault(id(doc.source), len(spans))
            if source == len(spans):
                spans.append(doc.source.span)
        entries.append((doc.index, doc.line, doc.data, doc.tenant, doc.area, doc.broken,
                        doc.position, source))
    position = {id(doc): n for n, doc in enumerate(documents)}
    problems = [[_fields(d) for d in ds] for ds in (load_problems, schema_problems)]
    return pickle.dumps((spans, entries, [position[id(doc)] for doc in manifests], *problems),
                        protocol=pickle.HIGHEST_PROTOCOL)


def decode(blob: bytes | memoryview, path: str, content: bytes) -> ParsedFile:
    """The entry of the file at `path` whose bytes are `content`."""
    spans, entries, manifests, load_problems, schema_problems = _loads(blob)
    sources = [LineSource(path, content, span) for span in spans]
    documents = [Document(path, index, line, data, tenant, area, broken,
                          None if source is None else sources[source], position)
                 for index, line, data, tenant, area, broken, position, source in entries]
    return ParsedFile(documents, [manifest_of(documents[n]) for n in manifests],
                      [_diagnostic(fields) for fields in load_problems],
                      [_diagnostic(fields) for fields in schema_problems])


def _fields(d: Diagnostic) -> tuple[Any, ...]:
    """A diagnostic's arguments; its severity comes from the catalogue when it is built."""
    return d.code, d.message, d.file, d.line, d.path, d.hint, d.column


def _diagnostic(fields: tuple[Any, ...]) -> Diagnostic:
    code, message, file, line, path, hint, column = fields
    return Diagnostic(code, message, file, line, path, hint, column=column)


class _PlainUnpickler(pickle.Unpickler):
    """Reads what `encode` and `_write_pack` write: containers, text and numbers. A
    pickle that names a class or a function, the only way one can run code, is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}: a pack holds plain data only")


def _loads(data: bytes | memoryview) -> Any:
    return _PlainUnpickler(io.BytesIO(data)).load()


# --- packs --------------------------------------------------------------------------------


def _read_pack(path: Path, key: str) -> tuple[_Index, memoryview]:
    """The index and body of the pack at `path`; empty unless this user wrote it, whole,
    under `key`."""
    data = read_own_file(path)
    if data is None or not data.startswith(_MAGIC):
        return {}, memoryview(b"")
    view = memoryview(data)[len(_MAGIC):]
    if len(view) < _HEADER.size + _TAG_BYTES:
        return {}, memoryview(b"")
    header, tag = view[:_HEADER.size], view[_HEADER.size:_HEADER.size + _TAG_BYTES]
    index_length, body_length = _HEADER.unpack(header)
    payload = view[_HEADER.size + _TAG_BYTES:]
    if len(payload) != index_length + body_length or \
            not is_sealed(tag, _MAGIC, header, payload):
        return {}, memoryview(b"")
    try:
        found_key, index = _loads(payload[:index_length])
    except Exception:  # unreadable is a miss, whatever it raises
        return {}, memoryview(b"")
    if found_key != key or not isinstance(index, dict):
        return {}, memoryview(b"")
    return index, payload[index_length:]


def _write_pack(path: Path, key: str, index: _Index,
                blobs: list[bytes | memoryview]) -> None:
    """Write the pack whole to a file of its own, then put it in place; nothing when
    there is no secret to seal it with (it could not be read back)."""
    head = pickle.dumps((key, index), protocol=pickle.HIGHEST_PROTOCOL)
    header = _HEADER.pack(len(head), sum(len(blob) for blob in blobs))
    tag = seal(_MAGIC, header, head, *blobs)
    if tag is None:
        return
    state_folder(path.parent, mode=0o700)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(_MAGIC + header + tag + head)
            out.writelines(blobs)
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise


def _prune(directory: Path) -> None:
    packs = sorted(directory.glob(f"{_PREFIX}*{_SUFFIX}"), key=lambda p: p.stat().st_mtime,
                   reverse=True)
    for old in packs[KEEP_PACKS:]:
        old.unlink(missing_ok=True)
