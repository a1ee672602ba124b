"""Where manifest files come from: a folder, or a Git revision read without a checkout.

Two walkers list a repo's paths, each its own way: `folder_files` a folder on disk, depth
first and name by name; `git_files` a revision, in the order of Git's recursive tree
listing. What is read of them is decided in one place, `admit`, which asks each path the
same questions in the same order, whichever walker found it:

1. Is it in scope? Only `unet.yaml` and what lies under `provider/` and `tenants/` are,
   and nothing hidden (no part of the path starts with '.'). Others are skipped unseen.
2. Is it another Git repository (a submodule, checked out or not, or a clone: a folder
   holding its own `.git`)? Its files are not part of this revision: PATH_UNSAFE.
3. Is it a symlink? One that leaves the repo, points at a folder or into another
   repository is refused (PATH_UNSAFE); one to a file of the repo stands for that file.
4. Is it a folder? It is walked.
5. Is it a manifest of the layout (`unet.yaml`, or a `.yaml` / `.yml` file under
   `provider/` or `tenants/`)? If not, it is skipped.
6. Is its name plain (letters, digits, '.', '_' and '-' in every part)? If not,
   PATH_UNSAFE.
7. Can it be read as a regular file? The walker says why not, in its own words.

A walker answers these questions about one path as an `Entry`; only what `admit` asks is
looked up. Files Git holds in the repo's `.unet/` (one machine's state) are refused in
both modes (UNET_DIR_TRACKED). A file's size is bounded when it is read (`load`), not
here: a revision's walker only leaves blobs over the bound out of its batched read.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal, NamedTuple, Protocol

from .diagnostics import Diagnostic
from .errors import UnetError
from .state import STATE_DIR

if TYPE_CHECKING:
    import git

DEFAULT_MAX_FILE_BYTES = 1024 * 1024
REPO_CONFIG_FILE = "unet.yaml"
_AREAS = ("provider", "tenants")
_MANIFEST_SUFFIXES = (".yaml", ".yml")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


@dataclass(slots=True)
class SourceFile:
    """One manifest file a walker admitted: its path (posix, relative to the repo root),
    its size when listed, how to read its bytes, and its Git blob when it has one."""

    path: str
    size: int
    read: Callable[[], bytes]
    blob_id: str | None = None


class SourceError(UnetError):
    """The repo itself cannot be read (missing folder, unknown revision, ...)."""


# --- the layout -------------------------------------------------------------------------------


def area_of(path: str) -> str | None:
    """Which part of the repo layout a file belongs to, or None when it is ignored."""
    if path == REPO_CONFIG_FILE:
        return "root"
    top = path.split("/", 1)[0]
    if top in _AREAS and path.endswith(_MANIFEST_SUFFIXES):
        return top
    return None


def placement(path: str) -> tuple[str, str | None]:
    """The area a manifest file's path puts it in ("" outside the layout), and its tenant
    when it is under `tenants/<tenant>/`."""
    area = area_of(path) or ""
    parts = path.split("/")
    return area, parts[1] if area == "tenants" and len(parts) >= 3 else None


def _in_scope(path: str) -> bool:
    """Whether a path is looked at at all: in the layout and not hidden."""
    if any(part.startswith(".") for part in path.split("/")):
        return False
    return path in (REPO_CONFIG_FILE, *_AREAS) or path.startswith(("provider/", "tenants/"))


def _plain_path(path: str) -> bool:
    return all(_PLAIN_NAME.match(part) for part in path.split("/"))


# --- the policy -------------------------------------------------------------------------------


class Refusal(NamedTuple):
    """Why a path is not read, as PATH_UNSAFE says it after the path, and what to do."""

    problem: str
    hint: str | None = None


NOT_PLAIN = Refusal("is not a plain file name", "use letters, digits, '.', '_' and '-'")
LEAVES = Refusal("is a symlink that leaves the repo", "copy the file into the repo instead")
LINKED_FOLDER = Refusal("is a symlinked folder; not followed",
                        "symlinks may only point at files in the repo")
#: Another repository's files (a submodule's checkout, or a clone inside the repo) are not
#: part of a revision: folder and Git mode refuse them alike.
REPOSITORY = Refusal("is another Git repository (a submodule or a clone); its files are not "
                     "part of this revision", "copy the manifests into the repo instead")
INTO_REPOSITORY = Refusal("is a symlink into another Git repository (a submodule or a clone); "
                          "its files are not part of this revision", REPOSITORY.hint)


class Step(Enum):
    """What a walker does with a path `admit` neither reads nor refuses."""

    SKIP = "skip"  # out of scope, or not a manifest of the layout
    WALK = "walk"  # a folder in scope: list what it holds


class Entry(Protocol):
    """One path as a walker found it. `admit` asks only what its decision needs, so a
    walker may look each answer up when asked."""

    @property
    def path(self) -> str:
        """Posix, relative to the repo root."""

    def is_repository(self) -> bool:
        """The root of another Git repository: a gitlink, a declared submodule's folder, or a
        folder holding its own `.git`. Never a symlink."""

    def is_symlink(self) -> bool: ...

    def link_problem(self) -> Refusal | None:
        """Of a symlink: why where it leads is refused (LEAVES, LINKED_FOLDER,
        INTO_REPOSITORY), or None."""

    def is_folder(self) -> bool:
        """A folder (not a symlink's) whose paths the walker lists next."""

    def open(self) -> SourceFile | Refusal:
        """The file to read, or why it cannot be read (asked of plain manifests only)."""


def admit(entry: Entry) -> SourceFile | Diagnostic | Step:
    """The one path policy: a path's file to read, its PATH_UNSAFE, or what the walker
    does with it instead (the questions of the module's docstring, in their order)."""
    path = entry.path
    if not _in_scope(path):
        return Step.SKIP
    if entry.is_repository():
        return unsafe_path(path, REPOSITORY)
    if entry.is_symlink():
        problem = entry.link_problem()
        if problem is not None:
            return unsafe_path(path, problem)
    elif entry.is_folder():
        return Step.WALK
    if area_of(path) is None:
        return Step.SKIP
    if not _plain_path(path):
        return unsafe_path(path, NOT_PLAIN)
    opened = entry.open()
    return opened if isinstance(opened, SourceFile) else unsafe_path(path, opened)


def unsafe_path(path: str, refusal: Refusal) -> Diagnostic:
    """PATH_UNSAFE on `path`, shown printable even when the name is not UTF-8 or holds '\\n'."""
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
    return Diagnostic("PATH_UNSAFE", f"'{shown}' {refusal.problem}", file=shown, line=1,
                      hint=refusal.hint)


def state_tracked(tracked: list[str]) -> Iterator[Diagnostic]:
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


def _within(path: str, folders: set[str]) -> bool:
    return any(path == f or path.startswith(f + "/") for f in folders)


# --- a folder ---------------------------------------------------------------------------------

_SUBMODULE_PATH = re.compile(r"^\s*path\s*=\s*(.+?)\s*$", re.M)


#: Which paths of a repo a run reads at all (a shard's: the provider's, then its tenants');
#: asked of folders and files alike, before `admit`. None: every path.
Keep = Callable[[str], bool] | None


def folder_files(root: Path, keep: Keep = None) -> Iterator[SourceFile | Diagnostic]:
    """Manifest files of a folder, refusing anything that leaves it."""
    if not root.is_dir():
        raise SourceError(f"{root} is not a folder")
    yield from state_tracked(_tracked_in_checkout(root))
    yield from _Folder(root, keep).walk("")


def _tracked_in_checkout(root: Path) -> list[str]:
    """Files of `root`'s `.unet/` that the Git index holds, when `root` is in a checkout."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z", "--", STATE_DIR], cwd=root,
                                 capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []  # not a Git checkout (or no git): nothing can be tracked
    return sorted(os.fsdecode(path) for path in listing.split(b"\0") if path)


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


class _Folder:
    """A folder on disk, walked depth first with each folder's names sorted."""

    def __init__(self, root: Path, keep: Keep = None) -> None:
        self.root = root
        self.keep = keep
        self.real_root = os.path.realpath(root)
        self.submodules = _submodules(self.real_root)

    def walk(self, rel_dir: str) -> Iterator[SourceFile | Diagnostic]:
        """What `admit` makes of each path in the folder `rel_dir`, its folders walked."""
        try:
            listed = sorted(os.scandir(os.path.join(self.root, rel_dir)),
                            key=lambda dirent: dirent.name)
        except OSError as exc:
            yield unsafe_path(rel_dir or ".", Refusal(f"cannot be read: {exc.strerror}"))
            return
        for dirent in listed:
            rel = f"{rel_dir}/{dirent.name}" if rel_dir else dirent.name
            if self.keep is not None and not self.keep(rel):
                continue
            verdict = admit(_FolderEntry(rel, dirent, self))
            if verdict is Step.WALK:
                yield from self.walk(rel)
            elif not isinstance(verdict, Step):
                yield verdict

    def link_problem(self, full: str) -> Refusal | None:
        """Why the symlink at `full` is refused, or None when it leads to a file."""
        target = os.path.realpath(full)
        if os.path.isabs(os.readlink(full)) or \
                os.path.commonpath([self.real_root, target]) != self.real_root:
            return LEAVES
        if os.path.isdir(target):
            return LINKED_FOLDER
        return INTO_REPOSITORY if self.in_repository(target) else None

    def in_repository(self, target: str) -> bool:
        """Inside a submodule, or a folder of the repo holding its own `.git`."""
        if _within(Path(os.path.relpath(target, self.real_root)).as_posix(), self.submodules):
            return True
        folder = os.path.dirname(target)
        while folder != self.real_root and folder.startswith(self.real_root):
            if os.path.lexists(os.path.join(folder, ".git")):
                return True
            folder = os.path.dirname(folder)
        return False


@dataclass(slots=True)
class _FolderEntry:
    """A path of a folder, answered from its directory entry (types cached by scandir)."""

    path: str
    dirent: os.DirEntry[str]
    folder: _Folder

    def is_repository(self) -> bool:
        return not self.dirent.is_symlink() and self.dirent.is_dir() and (
            self.path in self.folder.submodules
            or os.path.lexists(os.path.join(self.dirent.path, ".git")))

    def is_symlink(self) -> bool:
        return self.dirent.is_symlink()

    def link_problem(self) -> Refusal | None:
        return self.folder.link_problem(self.dirent.path)

    def is_folder(self) -> bool:
        return self.dirent.is_dir()

    def open(self) -> SourceFile | Refusal:
        full = self.dirent.path
        try:
            info = os.stat(full)
        except OSError as exc:
            return Refusal(f"cannot be read: {exc.strerror}")
        if not stat.S_ISREG(info.st_mode):
            return Refusal("is not a regular file")
        return SourceFile(self.path, info.st_size, lambda: Path(full).read_bytes())


# --- a Git revision ---------------------------------------------------------------------------

_FILE_MODES = ("100644", "100755")
_SYMLINK = "120000"
_GITLINK = "160000"
_FOLLOWED = (*_FILE_MODES, _SYMLINK)  # what a symlink may lead through, or to
_SYMLINK_HOPS = 40
#: Where a revision's symlink leads: a file of the tree, a path that is none, out of the
#: repo, to a folder, or into a submodule.
_Leads = Literal["file", "missing", "leaves", "folder", "repository"]


def git_files(start: Path, rev: str, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
              keep: Keep = None) -> Iterator[SourceFile | Diagnostic]:
    """Manifest files of a Git revision, read from Git objects without a checkout. Blobs of
    at most `max_file_bytes` are read together, in one batch, when the first is read."""
    revision = _Revision.of(start, rev, max_file_bytes)
    items: list[SourceFile | Diagnostic] = list(state_tracked(
        sorted(rel for rel in revision.entries if rel.startswith(f"{STATE_DIR}/"))))
    listed = (*_FOLLOWED, _GITLINK)
    for rel in sorted(revision.entries):
        if keep is not None and not keep(rel):
            continue
        if revision.entries[rel].mode in listed:
            verdict = admit(_GitEntry(rel, revision))
            if not isinstance(verdict, Step):
                items.append(verdict)
    yield from items  # every blob is wanted before the first is read


class _Listed(NamedTuple):
    """A path of a revision's tree, as `git ls-tree -r -l` lists it."""

    mode: str
    sha: str
    size: int


@dataclass
class _Revision:
    """A revision's tree under the repo's folder, listed once; paths relative to it."""

    repo: git.Repo
    entries: dict[str, _Listed]
    max_file_bytes: int
    folders: set[str] = field(init=False)
    gitlinks: set[str] = field(init=False)
    blobs: _BlobBatch = field(init=False)

    def __post_init__(self) -> None:
        folders = {".", *(posixpath.dirname(rel) for rel in self.entries)}
        self.folders = folders | {f.rsplit("/", n)[0] for f in folders
                                  for n in range(1, f.count("/") + 1)}
        self.gitlinks = {rel for rel, listed in self.entries.items() if listed.mode == _GITLINK}
        self.blobs = _BlobBatch(self.repo.working_dir)

    @classmethod
    def of(cls, start: Path, rev: str, max_file_bytes: int) -> _Revision:
        """The revision `rev` of the repository holding `start`, listed under `start`."""
        import git  # imported here: folder mode never needs it

        try:
            repo = git.Repo(start, search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise SourceError(f"{start} is not inside a Git repository") from exc
        try:
            commit = repo.commit(rev)
        except (git.BadName, ValueError) as exc:
            raise SourceError(f"revision '{rev}' does not exist in {repo.working_dir}") from exc
        prefix = os.path.relpath(os.path.realpath(start), os.path.realpath(repo.working_dir))
        prefix = "" if prefix == "." else Path(prefix).as_posix()
        listing = repo.git.ls_tree("-r", "-l", "-z", commit.hexsha, "--", prefix or ".")
        return cls(repo, _entries(listing, prefix), max_file_bytes)

    def resolve(self, rel: str) -> tuple[_Leads, str]:
        """Follow the symlink at `rel` to ("file"|"missing", path) or ("leaves"|"folder"|
        "repository", "")."""
        path = rel
        for _ in range(_SYMLINK_HOPS):
            target = self.read(self.entries[path].sha).decode("utf-8", "replace")
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            if target.startswith("/") or path == ".." or path.startswith("../"):
                return "leaves", ""
            if _within(path, self.gitlinks):
                return "repository", ""
            if path in self.folders:
                return "folder", ""
            if path not in self.entries or self.entries[path].mode not in _FOLLOWED:
                return "missing", path
            if self.entries[path].mode != _SYMLINK:
                return "file", path
        return "missing", rel  # a symlink loop

    def read(self, sha: str) -> bytes:
        """A blob, read at once (a symlink's target)."""
        blob: bytes = self.repo.odb.stream(bytes.fromhex(sha)).read()  # gitdb is untyped
        return blob

    def open(self, rel: str, target: str) -> SourceFile:
        """`rel`'s file, read from the blob of `target` (`rel` itself, or its symlink's)."""
        _mode, sha, size = self.entries[target]
        if size <= self.max_file_bytes:
            self.blobs.want(sha)
        return SourceFile(rel, size, self.blobs.reader(sha), blob_id=sha)


def _entries(listing: str, prefix: str) -> dict[str, _Listed]:
    """The paths of `git ls-tree -r -l -z` output, made relative to the folder `prefix`."""
    entries: dict[str, _Listed] = {}
    for record in listing.split("\0"):
        if not record:
            continue
        meta, path = record.split("\t", 1)
        mode, _type, sha, size = meta.split()
        rel = path[len(prefix) + 1:] if prefix else path
        entries[rel] = _Listed(mode, sha, int(size) if size != "-" else 0)
    return entries


_LINK_PROBLEMS: dict[_Leads, Refusal] = {
    "leaves": LEAVES, "folder": LINKED_FOLDER, "repository": INTO_REPOSITORY}


@dataclass(slots=True)
class _GitEntry:
    """A path of a revision, answered from its listing (a symlink is followed once)."""

    path: str
    revision: _Revision
    resolved: tuple[_Leads, str] | None = None

    def is_repository(self) -> bool:
        return self.revision.entries[self.path].mode == _GITLINK

    def is_symlink(self) -> bool:
        return self.revision.entries[self.path].mode == _SYMLINK

    def link_problem(self) -> Refusal | None:
        return _LINK_PROBLEMS.get(self.resolve()[0])

    def is_folder(self) -> bool:
        return False  # the listing is recursive: folders are not listed

    def open(self) -> SourceFile | Refusal:
        if not self.is_symlink():
            return self.revision.open(self.path, self.path)
        found, target = self.resolve()
        if found == "missing":
            return Refusal(f"is a symlink to '{target}', which is not a file",
                           LINKED_FOLDER.hint)
        return self.revision.open(self.path, target)

    def resolve(self) -> tuple[_Leads, str]:
        if self.resolved is None:
            self.resolved = self.revision.resolve(self.path)
        return self.resolved


class _BlobBatch:
    """Blobs read in one `git cat-file --batch` run instead of one round trip each."""

    def __init__(self, work_tree: str | os.PathLike[str]) -> None:
        self.work_tree = work_tree
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
        process = subprocess.Popen(["git", "cat-file", "--batch"], cwd=self.work_tree,
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


def _write_and_close(stream: IO[bytes], data: bytes) -> None:
    stream.write(data)
    stream.close()
