"""A run's new files parsed in worker processes (reconciler/parse_workers.py) give what
one process gives: the same documents, manifests and diagnostics, in the same order,
files two revisions share still shared; and a worker that dies or raises costs time,
never the answer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.generate import PR_BRANCH, generate_repo, pr_change
from unet.reconciler import parse_workers
from unet.reconciler import validate as validate_module
from unet.reconciler.cli import main
from unet.reconciler.models import KINDS
from unet.reconciler.parse_cache import ParseCache
from unet.reconciler.plan_io import plan_to_json
from unet.reconciler.planner import plan_between
from unet.reconciler.processes import process_alive
from unet.reconciler.sources import SourceFile
from unet.reconciler.validate import (
    ParsedFiles,
    Validation,
    repo_files,
    validate_files,
    validate_repo,
)

from .conftest import ROOT

BOUND = 16 * 1024  # the size bound of these runs: the generated files are well under it
API = "apiVersion: network.osac.io/v1alpha1\n"
#: Files of every kind of trouble a parse reports, added to a generated repo's first tenant.
ODD_FILES: dict[str, bytes] = {
    "pieces.yaml": (f"{API}kind: SecurityGroup\nmetadata:\n  name: one\nspec: {{network: prod}}\n"
                    f"---\nkind: [\n---\n{API}kind: SecurityGroup\nmetadata:\n  name: three\n"
                    "spec:\n  network: prod\n  colour: blue\n").encode(),
    "twice.yaml": (f"{API}kind: SecurityGroup\nmetadata:\n  name: twice\n  name: again\n"
                   "spec:\n  network: prod\n").encode(),
    "unknown.yaml": f"{API}kind: Routr\nmetadata:\n  name: r\nspec: {{}}\n".encode(),
    "not-a-mapping.yaml": b"- just\n- a list\n",
    "tagged.yaml": f"{API}kind: !!python/object:os.system x\n".encode(),
    "latin1.yaml": f"{API}kind: SecurityGroup\n# caf\xe9\n".encode("latin-1"),
    "empty.yaml": b"",
    "huge.yaml": b"# padding\n" * (BOUND // 10 + 10),
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated repo of three tenants (`main`), a pull request that changes two of the
    first tenant's files (`pr`), and checked out: `main` with the odd files."""
    root = tmp_path_factory.mktemp("workers") / "repo"
    generate_repo(root, 3)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    _git(root, "checkout", "-qb", PR_BRANCH)
    for rel, text in pr_change().items():
        (root / rel).write_text(text)
    _git(root, "commit", "-qam", "a tenant's pull request")
    _git(root, "checkout", "-qb", "odd", "main")
    for name, content in ODD_FILES.items():
        (root / "tenants" / "tenant-00001" / name).write_bytes(content)
    return root


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


@pytest.fixture
def parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers for any number of new files: the test repos are small."""
    monkeypatch.setattr(parse_workers, "PARALLEL_FROM", 1)


Parses = Callable[[], list[tuple[int, str]]]


@pytest.fixture
def parsers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Parses:
    """Which process parsed which file, in the order they did (a worker's parse is seen
    through a file: it writes nothing the test can read else)."""
    log = tmp_path / "parsers.log"
    log.touch()
    real = validate_module.load_documents

    def logged(files: Iterator[SourceFile], max_file_bytes: int) -> Any:
        [item] = files
        with open(log, "a") as out:
            out.write(f"{os.getpid()} {item.path}\n")
        return real(iter([item]), max_file_bytes)

    # A worker's parse reads the YAML with it, as this process's does: not the function a
    # worker is sent, which must be had by its name (pickled).
    monkeypatch.setattr(validate_module, "load_documents", logged)
    return lambda: [(int(pid), path) for pid, path in
                    (line.split(" ", 1) for line in log.read_text().splitlines())]


def _here(parses: list[tuple[int, str]]) -> list[str]:
    """The files of `parses` this process parsed."""
    return [path for pid, path in parses if pid == os.getpid()]


def _validated(repo: Path, processes: int, rev: str | None = None,
               parsed: ParsedFiles | None = None) -> Validation:
    memo = parsed or ParsedFiles(processes=processes)
    return validate_files(repo_files(repo, rev, BOUND), BOUND, memo)


def _shown(result: Validation) -> str:
    """Everything a validation says of its files, as text (a `.nan` is not equal to itself):
    documents with their data and line maps, manifests, diagnostics, in order."""
    return repr(([(d.file, d.index, d.line, d.data, d.tenant, d.area, d.broken, d.lines)
                  for d in result.documents],
                 [(m.ref, m.doc.file, m.doc.index, m.data()) for m in result.manifests],
                 [d.to_json() for d in result.diagnostics], result.files))


def test_workers_parse_what_one_process_parses(template: Path, parallel: None,
                                               parsers: Parses) -> None:
    serial = _validated(template, processes=1)
    files = sorted(path for _pid, path in parsers())
    assert _here(parsers()) == [path for _pid, path in parsers()]
    found = {(d.code, d.file) for d in serial.diagnostics}
    odd = "tenants/tenant-00001/"
    assert {("YAML_SYNTAX", odd + "pieces.yaml"), ("SCHEMA_UNKNOWN_FIELD", odd + "pieces.yaml"),
            ("YAML_DUPLICATE_KEY", odd + "twice.yaml"), ("UNKNOWN_KIND", odd + "unknown.yaml"),
            ("SCHEMA_TYPE", odd + "not-a-mapping.yaml"), ("YAML_UNSAFE", odd + "tagged.yaml"),
            ("YAML_SYNTAX", odd + "latin1.yaml"), ("SCHEMA_TYPE", odd + "empty.yaml"),
            ("FILE_TOO_LARGE", odd + "huge.yaml")} <= found
    before = len(parsers())

    shared = _validated(template, processes=2)
    assert _shown(shared) == _shown(serial)
    parsed = parsers()[before:]
    assert sorted(path for _pid, path in parsed) == files  # each once, by one process
    assert _here(parsed) == [HUGE]  # never read, so not sent either: the rest, by workers


def test_few_new_files_are_parsed_in_this_process(template: Path, parsers: Parses) -> None:
    _validated(template, processes=2)
    assert _here(parsers()) == [path for _pid, path in parsers()]


HUGE = "tenants/tenant-00001/huge.yaml"
OVER_THE_BOUND = [(os.getpid(), HUGE)]  # never read: not kept


def test_files_already_parsed_are_not_parsed_again(template: Path, parallel: None,
                                                   parsers: Parses) -> None:
    parsed = ParsedFiles(processes=2)
    first = _validated(template, 2, parsed=parsed)
    before = len(parsers())
    again = _validated(template, 2, parsed=parsed)
    assert parsers()[before:] == OVER_THE_BOUND
    assert [id(m) for m in again.manifests] == [id(m) for m in first.manifests]


def test_a_pull_request_shares_the_files_both_revisions_hold(
        template: Path, parallel: None) -> None:
    """The planner tells unchanged manifests by identity: parsed by workers, a file both
    revisions hold is still one set of objects, and the plan is the one process's."""
    plans, shared = [], []
    for processes in (1, 2):
        parsed = ParsedFiles(processes=processes)
        base = validate_repo(template, "main", BOUND, parsed)
        head = validate_repo(template, PR_BRANCH, BOUND, parsed)
        changed = set(pr_change())
        in_base = {m.ref: m for m in base.manifests if m.doc.file not in changed}
        unchanged = [m for m in head.manifests if m.doc.file not in changed]
        shared.append(len(unchanged))
        assert all(in_base[m.ref] is m for m in unchanged)
        plans.append(plan_to_json(plan_between(base, head, {})))
    assert shared[0] > 100 and shared[0] == shared[1]
    assert plans[0] == plans[1]


def test_the_parse_cache_holds_what_the_workers_parsed(
        template: Path, tmp_path: Path, parallel: None, parsers: Parses) -> None:
    cache = tmp_path / "cache"
    parsed = ParsedFiles(ParseCache(cache, BOUND), processes=2)
    first = _shown(_validated(template, 2, parsed=parsed))
    parsed.save()
    before = len(parsers())
    again = _validated(template, 2, parsed=ParsedFiles(ParseCache(cache, BOUND), processes=2))
    assert parsers()[before:] == OVER_THE_BOUND
    assert _shown(again) == first


def test_the_cli_says_the_same_with_workers_and_without(
        template: Path, parallel: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    said = []
    for workers in ("1", "2"):
        monkeypatch.setenv("UNET_PARSE_WORKERS", workers)
        for command in (["validate", str(template)],
                        ["plan", str(template), "--base", "main", "--head", PR_BRANCH]):
            main([*command, "--format", "json", "--no-cache"])
            out, err = capsys.readouterr()
            said.append((out, err))
    assert said[:2] == said[2:]
    assert json.loads(said[0][0])["summary"]["errors"] > 0


@pytest.mark.parametrize("setting,expected", [
    ("1", 1), ("5", 5), ("0", 1), ("-2", 1), ("many", None), ("", None)])
def test_unet_parse_workers_sets_how_many_processes_parse(
        setting: str, expected: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A number of processes, the run's own among them; anything else: the default, one per
    processor (three here)."""
    monkeypatch.setenv("UNET_PARSE_WORKERS", setting)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.setattr(parse_workers, "_cpu_limit", lambda: None)
    assert parse_workers.parse_processes() == (3 if expected is None else expected)


def test_a_document_a_model_refuses_is_said_where_one_process_says_it(
        template: Path, parallel: None, monkeypatch: pytest.MonkeyPatch,
        parsers: Parses) -> None:
    """Workers build no models: their entries have every document the schema passes become
    a manifest. Should a model refuse one (the schema and the models disagree), its file
    is parsed again here, and its problem is where one process puts it."""
    model = KINDS["SecurityGroup"]
    real = model.model_validate

    def picky(data: Any, **options: Any) -> Any:
        if data["metadata"]["name"] == "web":  # as if the model wanted what the schema did not
            return real({**data, "spec": {**data["spec"], "ingress": "none"}}, **options)
        return real(data, **options)

    monkeypatch.setattr(model, "model_validate", picky)
    expected = _validated(template, processes=1)
    assert [d.code for d in expected.diagnostics
            if d.file == "tenants/tenant-00002/security-groups.yaml"] == ["SCHEMA_TYPE"]
    before = len(parsers())
    assert _shown(_validated(template, processes=2)) == _shown(expected)
    refused = [f"tenants/tenant-0000{n}/security-groups.yaml" for n in (1, 2, 3)]
    assert sorted(_here(parsers()[before:])) == sorted([*refused, HUGE])


@pytest.mark.parametrize("v2,v1,expected", [
    ("max 100000\n", None, 8), ("400000 100000\n", None, 4), ("150000 100000\n", None, 1),
    (None, ("-1\n", "100000\n"), 8), (None, ("200000\n", "100000\n"), 2), (None, None, 8)])
def test_a_containers_cpu_limit_bounds_how_many_processes_parse(
        v2: str | None, v1: tuple[str, str] | None, expected: int, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The processors a process may run on are the host's, whatever CPU time its container
    may use (cgroup v2's cpu.max, v1's CFS quota)."""
    monkeypatch.delenv("UNET_PARSE_WORKERS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(parse_workers, "CPU_MAX", tmp_path / "cpu.max")
    monkeypatch.setattr(parse_workers, "CFS_QUOTA", (tmp_path / "quota", tmp_path / "period"))
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2)
    if v1 is not None:
        (tmp_path / "quota").write_text(v1[0])
        (tmp_path / "period").write_text(v1[1])
    assert parse_workers.parse_processes() == expected


# --- workers that fail ----------------------------------------------------------------------

#: A file in the middle of a revision: the workers have given some files before it.
VICTIM = "tenants/tenant-00002/network.yaml"


def _failing(monkeypatch: pytest.MonkeyPatch, fail: Callable[[], None],
             log: Path) -> Callable[[], list[str]]:
    """`fail` in whichever worker parses VICTIM, said in `log`; this process parses it as
    ever. What the workers that failed were."""
    real, parent = validate_module.load_documents, os.getpid()
    log.touch()

    def load(files: Iterator[SourceFile], max_file_bytes: int) -> Any:
        [item] = files
        if item.path == VICTIM and os.getpid() != parent:
            with open(log, "a") as out:
                out.write(f"{os.getpid()}\n")
            fail()
        return real(iter([item]), max_file_bytes)

    monkeypatch.setattr(validate_module, "load_documents", load)
    return lambda: log.read_text().split()


def _killed() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _raising() -> None:
    raise RuntimeError("a bug in a worker")


@pytest.mark.parametrize("fail", [_killed, _raising])
def test_a_worker_that_fails_leaves_the_rest_to_this_process(
        template: Path, parallel: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        parsers: Parses, fail: Callable[[], None]) -> None:
    expected = _shown(_validated(template, processes=1))
    before = len(parsers())
    failed = _failing(monkeypatch, fail, tmp_path / "failed.log")
    assert _shown(_validated(template, processes=2)) == expected
    assert len(failed()) == 1
    here = _here(parsers()[before:])
    assert VICTIM in here
    if fail is _raising:  # the pool still works: what the workers parsed before is kept
        assert len(here) < len(parsers()[before:])


def test_workers_that_cannot_start_leave_it_all_to_this_process(
        template: Path, parallel: None, monkeypatch: pytest.MonkeyPatch,
        parsers: Parses) -> None:
    expected = _shown(_validated(template, processes=1))
    before = len(parsers())

    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    assert _shown(_validated(template, processes=2)) == expected
    assert _here(parsers()[before:]) == [path for _pid, path in parsers()[before:]]


FAILING_RUN = """
import os, signal, sys
from unet.reconciler import parse_workers, validate
from unet.reconciler.cli import entry

parse_workers.PARALLEL_FROM = 1
real, parent = validate.load_documents, os.getpid()
victim, how, log = sys.argv[1:4]

def load(files, max_file_bytes):
    [item] = files
    if item.path == victim and os.getpid() != parent:
        with open(log, "a") as out:
            out.write(f"{os.getpid()}\\n")
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("a bug in a worker")
    return real(iter([item]), max_file_bytes)

validate.load_documents = load
sys.argv = ["unet", *sys.argv[4:]]
entry()
"""


@pytest.mark.parametrize("how", ["kill", "raise"])
def test_a_failed_worker_neither_hangs_nor_changes_what_unet_says(
        template: Path, tmp_path: Path, how: str) -> None:
    """The whole program, as a user runs it: a worker killed (the kernel's OOM killer
    would) or raising in the middle of a cold PR plan; the plan is the one of a single
    process, and so is all it says."""
    said, failed = [], tmp_path / "failed.log"
    failed.touch()
    for workers in ("1", "2"):
        env = {**os.environ, "UNET_PARSE_WORKERS": workers,
               "UNET_CACHE_DIR": str(tmp_path / f"cache-{workers}")}
        done = subprocess.run(
            [sys.executable, "-c", FAILING_RUN, VICTIM, how, str(failed), "plan",
             str(template), "--base", "main", "--head", PR_BRANCH, "--format", "json"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        said.append((done.returncode, done.stdout, done.stderr))
    assert len(failed.read_text().split()) == 1
    assert said[0] == said[1]
    assert said[1][0] == 0


STALLED_RUN = """
import os, sys, time
from unet.reconciler import parse_workers, validate
from unet.reconciler.cli import entry

parse_workers.PARALLEL_FROM = 1
parent, log = os.getpid(), sys.argv[1]

def load(files, max_file_bytes):
    if os.getpid() != parent:
        with open(log, "a") as out:
            out.write(f"{os.getpid()}\\n")
        time.sleep(600)

validate.load_documents = load
sys.argv = ["unet", *sys.argv[2:]]
entry()
"""


def test_workers_end_with_a_killed_run(template: Path, tmp_path: Path) -> None:
    """A run killed in the middle of a parse (SIGKILL: it can do nothing) leaves no worker
    waiting for work for good."""
    log = tmp_path / "workers.log"
    log.touch()
    run = subprocess.Popen([sys.executable, "-c", STALLED_RUN, str(log), "validate",
                            str(template), "--no-cache"],
                           env={**os.environ, "UNET_PARSE_WORKERS": "2"}, cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = _within(30, lambda: set(map(int, log.read_text().split())))
    run.kill()
    run.wait()
    try:
        assert _within(30, lambda: not any(map(process_alive, workers)))
    finally:
        for pid in filter(process_alive, workers):
            os.kill(pid, signal.SIGKILL)


def _within(seconds: float, found: Callable[[], Any]) -> Any:
    """What `found` gives first that is not empty or false, asked until `seconds` passed."""
    deadline = time.monotonic() + seconds
    while not (value := found()):
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)
    return value


UNSENDABLE = """
from unet.reconciler import parse_workers

print(list(parse_workers.mapped(lambda task: task, range(40), 2)))
"""


def test_work_the_workers_cannot_be_sent_ends_their_part() -> None:
    """Work that cannot be pickled (a lambda) fails when it is sent: the workers' part ends
    at once, with no result (every task is the caller's), and nothing waits for the
    workers (Python 3.11's pool did at shutdown). unet sends
    only text, bytes and numbers, and a function of its own; the thread that sends them
    may say on standard error what it could not send."""
    done = subprocess.run([sys.executable, "-c", UNSENDABLE], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "[]\n")
