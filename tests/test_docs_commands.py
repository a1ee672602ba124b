"""Every command block of the README and docs/ is either run here or says why it cannot be.

The convention (docs/decisions.md, "Docs that run"): a command
block is a fenced block whose info string is `sh`, `bash`, `shell` or `console`, or whose
first line starts with `$ ` (a transcript: each `$ command` line is followed by the output
it prints). The line before each one's fence is an HTML comment, invisible on GitHub:

    <!-- docs-test: run SCENE -->      run it here, in the named scene (below)
    <!-- docs-test: skip REASON -->    cannot run here (a real cluster, the network, ...)

A block without either fails this test, so a new command cannot go unchecked by
accident. A transcript's output must match what the commands print now, after
normalising what differs from run to run (commit ids, durations, timestamps, the
scene's temporary folder, runs of spaces); a line `...` in the shown output stands for
any number of lines left out. Any other command block marked `run` must exit 0.

Re-baselining (after an intended change of output): `UNET_UPDATE_DOCS=1 pytest
tests/test_docs_commands.py` writes the new output into each transcript that leaves no
lines out; for one with `...`, the failure shows the whole output to cut down by hand.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .conftest import EXAMPLE, ROOT, copy_checkout
from .support.gitops import break_repo, ovn_only_repo
from .test_plan_golden import edit_text

DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
COMMAND_INFO = frozenset({"sh", "bash", "shell", "console"})
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<verb>run|skip)\b\s*(?P<rest>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<info>[^\s`]*)")
UPDATE = bool(os.environ.get("UNET_UPDATE_DOCS"))


@dataclass
class Block:
    document: Path
    line: int  # 1-based line of the opening fence
    info: str
    body: list[str]  # without the fences' indentation
    marker: tuple[str, str] | None  # (run|skip, scene or reason)
    indent: str = ""

    @property
    def where(self) -> str:
        shown = self.document.relative_to(ROOT) if self.document.is_relative_to(ROOT) \
            else self.document
        return f"{shown}:{self.line}"

    @property
    def is_transcript(self) -> bool:
        first = next((line for line in self.body if line.strip()), "")
        return first.startswith("$ ")

    @property
    def is_command(self) -> bool:
        return self.info in COMMAND_INFO or self.is_transcript


def blocks_of(document: Path) -> list[Block]:
    lines = document.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        end = next((j for j in range(index + 1, len(lines))
                    if lines[j].strip().startswith(fence)), len(lines))
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip()
                for line in lines[index + 1:end]]
        before = next((lines[j] for j in range(index - 1, -1, -1) if lines[j].strip()), "")
        marked = MARKER.match(before)
        found.append(Block(document, index + 1, opening["info"], body,
                           (marked["verb"], marked["rest"]) if marked else None, indent))
        index = end + 1
    return found


def command_blocks_of(document: Path) -> list[Block]:
    return [block for block in blocks_of(document) if block.is_command]


def command_blocks() -> list[Block]:
    return [block for document in DOCUMENTS for block in command_blocks_of(document)]


# --- scenes: where a block runs ------------------------------------------------------------


def _example(tmp: Path) -> Path:
    """A copy of the example network repo; commands run in it."""
    return copy_checkout(EXAMPLE, tmp / "network-repo")


def _git_commit(repo: Path) -> None:
    for args in (("init", "-q", "-b", "main"), ("add", "-A"),
                 ("-c", "user.name=docs", "-c", "user.email=docs@example.org", "commit",
                  "-qm", "base")):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _four_mistakes(tmp: Path) -> Path:
    """The README's `unet validate repo`: four mistakes in acme's manifests, beside the
    example's pending attachment and its ICMP rule a hosting cluster cannot express.
    Commands run in the folder holding `repo`."""
    repo = copy_checkout(EXAMPLE, tmp / "repo")
    edit_text(repo, "tenants/acme/network.yaml", "ipv4Cidr: 10.10.8.0/22",
              "ipv4Cidr: 10.10.2.0/23")
    edit_text(repo, "tenants/acme/security-groups.yaml",
              "      portTo: 22\n      cidr: 192.0.2.0/24", "      cidr: 192.0.2.7/24")
    edit_text(repo, "tenants/acme/security-groups.yaml", "securityGroup: web",
              "securityGroup: wbe")
    return tmp


def _pull_request(tmp: Path) -> Path:
    """The README's `unet plan --base HEAD`: the example committed, then a change that
    trades the office's SSH for port 8443 open to the world, adds the VM web-3 and moves
    the cluster nodes' subnet. Commands run in the repo."""
    repo = _example(tmp)
    _git_commit(repo)
    edit_text(repo, "tenants/acme/security-groups.yaml",
              "    - protocol: tcp          # SSH from the office only\n"
              "      portFrom: 22\n      portTo: 22\n      cidr: 192.0.2.0/24",
              "    - protocol: tcp          # the new API\n"
              "      portFrom: 8443\n      portTo: 8443\n      cidr: 0.0.0.0/0")
    with (repo / "tenants" / "acme" / "compute.yaml").open("a") as out:
        out.write("---\napiVersion: network.osac.io/v1alpha1\nkind: ComputeInstance\n"
                  "metadata:\n  name: web-3\nspec:\n  networkAttachments:\n"
                  "    - subnet: web\n      securityGroups: [web]\n")
    edit_text(repo, "tenants/acme/network.yaml", "ipv4Cidr: 10.10.8.0/22",
              "ipv4Cidr: 10.10.12.0/22")
    return repo


def _ci_checkout(tmp: Path) -> Path:
    """A pull request's job as docs/gitops.md runs it: the checkout of a pull request that
    changes nothing, its base branch fetched as `origin/$BASE_REF`."""
    repo = _example(tmp)
    _git_commit(repo)
    subprocess.run(["git", "update-ref", "refs/remotes/origin/main", "HEAD"], cwd=repo,
                   check=True)
    return repo


def _daemon_runs(tmp: Path) -> Path:
    """docs/gitops.md's `unet reconcile history`: two runs of `unet reconcile --once` on a
    Git repo (the example with the OVN manager alone, on the embedded database), the first
    applying it, the second refusing a commit that breaks it. Commands run where the runs
    did, beside their `.unet/reconcile`."""
    repo = ovn_only_repo(tmp / "network")
    _git_commit(repo)
    shell = Shell.make(tmp, tmp)
    for attempt in ("first", "broken"):
        if attempt == "broken":
            break_repo(repo)
            subprocess.run(["git", "-c", "user.name=docs", "-c", "user.email=docs@example.org",
                            "commit", "-qam", "overlap"], cwd=repo, check=True)
        done = shell.run(f"unet reconcile --once --repo {repo} --branch main")
        assert done.returncode in (0, 1), done.stdout
    return tmp


def _unreachable_cluster(tmp: Path) -> Path:
    """docs/hosting-clusters.md's first plan: the example repo (its OVN manager on the
    embedded database) and a kubeconfig whose only context, hosting-a1, points at a
    port where nothing listens. Commands run in the repo."""
    repo = _example(tmp)
    (repo / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: a1, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: unet, user: {token: not-a-token}}]\n"
        "contexts: [{name: hosting-a1, context: {cluster: a1, user: unet}}]\n"
        "current-context: hosting-a1\n")
    return repo


def _hand_built(tmp: Path) -> Path:
    """docs/import.md's refused network: in the example's embedded Northbound, a router,
    a switch and two ports built with ovn-nbctl as an operator would, without unet's
    filtering (no port groups, no port security). Commands run in the repo."""
    repo = _example(tmp)
    commands = ["lr-add shop", "ls-add shop-web",
                "lrp-add shop shop-gw 0a:00:00:00:07:01 10.77.1.1/24",
                "lsp-add shop-web shop-web-rtr", "lsp-set-type shop-web-rtr router",
                "lsp-set-addresses shop-web-rtr router",
                "lsp-set-options shop-web-rtr router-port=shop-gw",
                "lsp-add shop-web www1", "lsp-set-addresses www1 '0a:00:00:00:07:0a 10.77.1.10'",
                "lsp-add shop-web www2", "lsp-set-addresses www2 '0a:00:00:00:07:0b 10.77.1.11'"]
    built = Shell.make(tmp, repo).run("unet nb -- " + " -- ".join(commands))
    assert built.returncode == 0, built.stdout
    return repo


SCENES: dict[str, Callable[[Path], Path]] = {
    "hand-built": _hand_built,
    "example": _example,
    "four-mistakes": _four_mistakes,
    "pull-request": _pull_request,
    "ci-checkout": _ci_checkout,
    "daemon-runs": _daemon_runs,
    "unreachable-cluster": _unreachable_cluster,
}
#: Environment variables a scene's commands see.
SCENE_ENV = {"ci-checkout": {"BASE_REF": "main"}}


# --- running and comparing ---------------------------------------------------------------


@dataclass
class Shell:
    """bash with `unet` being this checkout's command line, in a scene's folder."""

    cwd: Path
    bin: Path
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, tmp: Path, cwd: Path) -> Shell:
        folder = tmp / "bin"
        folder.mkdir(exist_ok=True)
        unet = folder / "unet"
        unet.write_text(f'#!/bin/sh\nexec {sys.executable} -m unet.reconciler.cli "$@"\n')
        unet.chmod(unet.stat().st_mode | stat.S_IXUSR)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GITHUB_", "UNET_DEBUG", "FORCE_COLOR"))}
        env.update(PATH=f"{folder}:{env['PATH']}", PYTHONPATH=str(ROOT), NO_COLOR="1",
                   COLUMNS="200", TZ="UTC")
        return cls(cwd, folder, env)

    def run(self, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", script], cwd=self.cwd, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=300, check=False)


_HASH = re.compile(r"(?<![\w:.-])(?=[0-9a-f]*\d)[0-9a-f]{7,64}(?![\w:.-])")
_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s)\b")
_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\b")


def normalised(line: str, tmp: Path) -> str:
    line = line.replace(f"{tmp}/", "").replace(str(tmp), "")
    line = _TIME.sub("<time>", _DURATION.sub("<duration>", _HASH.sub("<hash>", line)))
    return " ".join(line.split())


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line, where a line `...` stands for any number of lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(matches(expected[1:], actual[skip:]) for skip in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and matches(expected[1:], actual[1:])


def first_difference(expected: list[str], actual: list[str]) -> str:
    """The first shown line that is not printed where the lines before it are."""
    agree = max((k for k in range(len(expected) + 1)
                 if matches([*expected[:k], "..."], actual)), default=0)
    if agree == len(expected):
        return "more lines printed than shown (end the output shown with ... to leave them out)"
    return f"shown line {agree + 1} is not printed there: {expected[agree]!r}"


def transcript(body: list[str]) -> list[tuple[str, list[str]]]:
    """(command, output shown) of each `$ ` line."""
    steps: list[tuple[str, list[str]]] = []
    for line in body:
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


def _rewrite(block: Block, outputs: list[list[str]]) -> None:
    """Write `outputs` as the output shown under each command of the block."""
    lines = block.document.read_text().splitlines(keepends=True)
    start = _where_now(block, lines)
    body: list[str] = []
    for (command, _), output in zip(transcript(block.body), outputs, strict=True):
        body += [f"$ {command}", *output]
    lines[start:start + len(block.body)] = [f"{block.indent}{line}".rstrip() + "\n"
                                            for line in body]
    block.document.write_text("".join(lines))


def _where_now(block: Block, lines: list[str]) -> int:
    """The first line of the block's body in the document as it is now: an earlier block of
    the same document re-baselined in this run may have moved it."""
    body = [f"{block.indent}{line}".rstrip() for line in block.body]
    found = [start for start in range(len(lines) - len(body) + 1)
             if [line.rstrip() for line in lines[start:start + len(body)]] == body]
    assert found, f"{block.where}: the block is no longer in the document"
    return min(found, key=lambda start: abs(start - block.line))


def run_block(block: Block, tmp: Path) -> None:
    scene = block.marker[1] if block.marker else ""
    assert scene in SCENES, f"{block.where}: unknown scene {scene!r} (known: {sorted(SCENES)})"
    shell = Shell.make(tmp, SCENES[scene](tmp))
    shell.env.update(SCENE_ENV.get(scene, {}))
    if not block.is_transcript:
        done = shell.run("set -e\n" + "\n".join(block.body))
        assert done.returncode == 0, f"{block.where} exits {done.returncode}:\n{done.stdout}"
        return
    outputs, problems = [], []
    for command, shown in transcript(block.body):
        printed = shell.run(command).stdout.rstrip("\n").splitlines()
        outputs.append([line.replace(f"{tmp}/", "").rstrip() for line in printed])
        expected = [normalised(line, tmp) for line in shown]
        while expected and not expected[-1]:
            expected.pop()
        actual = [normalised(line, tmp) for line in printed]
        if not matches(expected, actual):
            problems.append(f"$ {command}: {first_difference(expected, actual)}\n"
                            f"--- shown in {block.where}:\n" + "\n".join(shown)
                            + "\n--- printed now:\n" + "\n".join(printed))
    if problems and UPDATE and not any(line.strip() == "..." for line in block.body):
        _rewrite(block, outputs)
        return
    assert not problems, "\n\n".join(problems)


# --- the tests ---------------------------------------------------------------------------


BLOCKS = command_blocks()


def test_every_command_block_is_marked_run_or_skip_with_a_reason(
        capsys: pytest.CaptureFixture[str]) -> None:
    unmarked = [block.where for block in BLOCKS if block.marker is None]
    assert not unmarked, ("command blocks without `<!-- docs-test: run SCENE -->` or "
                          f"`<!-- docs-test: skip REASON -->` before them: {unmarked}")
    skipped = [block for block in BLOCKS if block.marker and block.marker[0] == "skip"]
    assert all(block.marker and block.marker[1] for block in skipped), \
        "every skip says why: " + ", ".join(b.where for b in skipped if not b.marker[1])
    ran = len(BLOCKS) - len(skipped)
    with capsys.disabled():
        print(f"\ndocs commands: {ran} of {len(BLOCKS)} command blocks run here, "
              f"{len(skipped)} cannot: " + "; ".join(
                  f"{b.where} ({b.marker[1]})" for b in skipped if b.marker))
    assert ran >= 4


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.marker and b.marker[0] == "run"],
                         ids=lambda b: b.where)
def test_the_command_block_runs_and_prints_what_is_shown(block: Block, tmp_path: Path) -> None:
    run_block(block, tmp_path)


def test_rebaselining_writes_what_is_printed_now(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("Text.\n\n  <!-- docs-test: run example -->\n  ```console\n"
                   "  $ echo now; echo second\n  then\n  ```\nMore.\n")
    [block] = command_blocks_of(doc)
    monkeypatch.setattr(sys.modules[__name__], "UPDATE", False)  # also when re-baselining
    with pytest.raises(AssertionError, match="shown line 1 is not printed there: 'then'"):
        run_block(block, tmp_path / "check")
    monkeypatch.setattr(sys.modules[__name__], "UPDATE", True)
    run_block(block, tmp_path / "update")
    assert doc.read_text() == ("Text.\n\n  <!-- docs-test: run example -->\n  ```console\n"
                               "  $ echo now; echo second\n  now\n  second\n  ```\nMore.\n")


def test_rebaselining_two_blocks_of_one_document(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The first block growing by a line does not shift where the second is written."""
    doc = tmp_path / "doc.md"
    fence = "<!-- docs-test: run example -->\n```console\n"
    doc.write_text(f"{fence}$ echo a; echo b\na\n```\n\n{fence}$ echo c\nd\n```\nEnd.\n")
    monkeypatch.setattr(sys.modules[__name__], "UPDATE", True)
    for block in command_blocks_of(doc):
        run_block(block, tmp_path / block.where.replace("/", "_").replace(":", "_"))
    assert doc.read_text() == (f"{fence}$ echo a; echo b\na\nb\n```\n\n"
                               f"{fence}$ echo c\nc\n```\nEnd.\n")


def test_a_shown_output_that_differs_fails(tmp_path: Path) -> None:
    """The comparison is not vacuous: a changed line, a missing line and an extra line
    each fail; `...`, a commit id, a duration and spacing do not."""
    shown = ["a 1.2s abcdef123456", "...", "last   line"]
    printed = ["a 31 ms 0123456789ab", "x", "y", "last line"]
    assert matches([normalised(line, tmp_path) for line in shown],
                   [normalised(line, tmp_path) for line in printed])
    for wrong in (["b 1s abcdef1", "...", "last line"], ["a 1s abcdef1", "last line"],
                  ["a 1s abcdef1", "...", "last line", "more"]):
        assert not matches([normalised(line, tmp_path) for line in wrong],
                           [normalised(line, tmp_path) for line in printed])
