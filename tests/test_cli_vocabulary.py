"""The command line's last rough edges (issue 31): one output vocabulary on every command
that prints (`--format text|json`, `-o` its alias), `unet codes CODE`, arguments that were
silently ignored or misleading, progress on a terminal, and `reconcile --once` for people.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unet.reconciler.cli import build_parser, main
from unet.reconciler.daemon.history import Run
from unet.reconciler.daemon.loop import Serving, once
from unet.reconciler.diagnostics import CODES

from .support.ovnrun import unet, unet_env

#: Commands that print an artefact in its own language rather than a report: the
#: completion script, the schemas (`--print` is JSON Schema), and `nb` (ovn-nbctl's own).
NO_FORMAT = {"completion", "schema", "nb"}


def _subcommands(parser: argparse.ArgumentParser, prefix: str = ""
                 ) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((f"{prefix}{name}", sub))
                found += _subcommands(sub, f"{prefix}{name} ")
    return found


def _is_group(parser: argparse.ArgumentParser) -> bool:
    """`show`: only its subcommands run."""
    return any(isinstance(a, argparse._SubParsersAction) and a.required
               for a in parser._actions)


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


def test_every_printing_command_takes_format_and_its_alias() -> None:
    leaves = [(name, sub) for name, sub in _subcommands(build_parser())
              if name.split()[0] not in NO_FORMAT and not _is_group(sub)]
    assert {"validate", "plan", "apply", "codes", "show plan", "show bindings",
            "show networkclass", "reach", "reconcile", "reconcile history"} <= \
        {name for name, _ in leaves}
    for name, sub in leaves:
        fmt = _option(sub, "--format")
        assert fmt is not None and fmt.dest == "format", name
        assert {"text", "json"} <= set(fmt.choices or ()), name
        short = _option(sub, "-o")
        if name == "plan":  # -o saves the plan there, as it always did
            assert short is not None and short.dest == "out"
        else:
            assert short is fmt, f"{name}: -o is not --format's alias"


def test_json_of_the_commands_the_readme_promised(example_copy: Path) -> None:
    codes = unet(example_copy, "codes", "--format", "json")
    listed = json.loads(codes.stdout)
    assert codes.returncode == 0 and {c["code"] for c in listed} == set(CODES)
    assert {"code", "severity", "category", "when"} <= set(listed[0])
    shown = unet(example_copy, "show", "networkclass", "standard-a", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["name"] == "standard-a" and document["region"] == "region-a"
    assert "IPv6" in document["capabilities"] and document["file"] == "provider/classes.yaml"
    validated = unet(example_copy, "validate", "-o", "json")
    assert json.loads(validated.stdout)["valid"] is True
    bindings = unet(example_copy, "show", "bindings", "--offline", "-o", "json")
    assert json.loads(bindings.stdout)["workloads"], bindings.stderr
    reached = unet(example_copy, "reach", "acme/web-1", "internet", "-o", "json")
    assert "allowed" in json.loads(reached.stdout), reached.stderr
    history = unet(example_copy, "reconcile", "history", "-o", "json",
                   "--state-dir", str(example_copy / ".unet" / "none"))
    assert json.loads(history.stdout) == []


def test_plan_o_with_a_format_name_is_refused(example_copy: Path) -> None:
    refused = unet(example_copy, "plan", "-o", "json")
    assert refused.returncode == 1
    assert "--format json" in refused.stderr and "-o FILE" in refused.stderr
    assert not (example_copy / "json").exists()


def test_apply_and_plan_in_json(example_copy: Path) -> None:
    """`apply -o json`: one object, the plan applied and its counts, nothing else on
    standard output; a plan's unmanaged objects are in its JSON too."""
    applied = unet(example_copy, "apply", "--manager", "ovn", "--auto-approve", "-o", "json")
    assert applied.returncode == 0, applied.stderr
    document = json.loads(applied.stdout)
    assert document["applied"]["create"] > 0 and document["failures"] == {}
    assert document["plan"]["has_changes"] and document["seconds"] is not None
    again = json.loads(unet(example_copy, "apply", "--manager", "ovn", "--auto-approve",
                            "--format", "json").stdout)
    assert again["applied"] is None and not again["plan"]["has_changes"]
    planned = unet(example_copy, "plan", "--manager", "ovn", "--show-unmanaged",
                   "--format", "json")
    assert json.loads(planned.stdout)["unmanaged"] == {"ovn": []}, planned.stderr


# --- unet codes CODE ------------------------------------------------------------------------


def test_codes_explains_one_code_with_an_example_and_the_fix(tmp_path: Path) -> None:
    result = unet(tmp_path, "codes", "SUBNET_OVERLAP")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("SUBNET_OVERLAP (error, Semantic") or \
        out.startswith("SUBNET_OVERLAP (error, ")
    assert CODES["SUBNET_OVERLAP"].when in out
    assert "examples/broken/subnet-overlap" in out
    assert "# Broken:" in out, "the defective spot of the example is quoted"
    assert "error SUBNET_OVERLAP 10.0.1.128/25 overlaps" in out, "what validate prints"
    assert "Fix:" in out
    for spelled in ("subnet-overlap", "subnet_overlap"):
        assert unet(tmp_path, "codes", spelled).stdout == out
    document = json.loads(unet(tmp_path, "codes", "YAML_SYNTAX", "-o", "json").stdout)
    assert document["code"] == "YAML_SYNTAX" and document["severity"] == "error"
    assert document["fix"] and document["examples"][0]["case"] == "yaml-syntax"
    assert "YAML_SYNTAX" in document["examples"][0]["output"]


def test_every_code_has_a_fix(capsys: pytest.CaptureFixture[str]) -> None:
    for code in CODES:
        assert main(["codes", code, "--format", "json"]) == 0, code
        document = json.loads(capsys.readouterr().out)
        assert document["fix"], f"{code} says no fix"


def test_an_installed_unet_points_to_the_examples(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from unet.reconciler import explain

    monkeypatch.setattr(explain, "BROKEN", tmp_path / "absent")
    assert main(["codes", "SUBNET_OVERLAP"]) == 0
    out = capsys.readouterr().out
    assert "see examples/broken/ in unet's source" in out and "Fix: give each subnet" in out
    assert main(["codes", "STALE_PLAN"]) == 0
    assert "Fix: make the plan again" in capsys.readouterr().out


def test_an_unknown_code_is_refused_with_the_nearest(tmp_path: Path) -> None:
    result = unet(tmp_path, "codes", "SUBNET_OVERLAPS")
    assert result.returncode == 1 and "no diagnostic code SUBNET_OVERLAPS" in result.stderr
    assert "SUBNET_OVERLAP?" in result.stderr


# --- arguments that were silently wrong -----------------------------------------------------


@pytest.mark.parametrize(("args", "said"), [
    (["plan", "--head", "HEAD"], "--head needs --base"),
    (["plan", "--base", "HEAD", "--head", "HEAD", "--rev", "HEAD"], "--rev"),
    (["plan", "--base", "HEAD", "--refresh-only"], "--refresh-only"),
    (["plan", "--base", "HEAD", "--show-unmanaged"], "--show-unmanaged"),
    (["plan", "--base", "HEAD", "--manager", "ovn"], "--manager"),
    (["plan", "--base", "HEAD", "--lock-timeout", "5"], "--lock-timeout"),
    (["plan", "--show-unmanaged", "--format", "markdown"], "--show-unmanaged"),
    (["apply", "nonexistent.json"], "nonexistent.json: no such file or folder"),
    (["plan", "nonexistent"], "nonexistent: no such file or folder"),
    (["reach", "acme/web-1", "internet", "--detailed-exitcode"], "--detailed-exitcode"),
    (["show", "bindings", "--offline", "--manager", "ovn"], "--offline"),
    (["show", "usage", "--offline", "--manager", "ovn"], "--offline"),
    (["reconcile", "--detailed-exitcode"], "--detailed-exitcode"),
    (["reconcile", "--once", "--interval", "5m"], "--interval"),
    (["reconcile", "--once", "--replicas"], "--replicas"),
    (["reconcile", "--once", "--metrics-address", "127.0.0.1"], "--metrics-port"),
    (["reconcile", "--branch", "dev"], "--branch"),
    (["codes", "--markdown", "--format", "json"], "--markdown"),
    (["reconcile", "--format", "json"], "--format is for --once"),
    (["apply", "--format", "json"], "--auto-approve"),
])
def test_arguments_that_were_ignored_are_errors(example_copy: Path, args: list[str],
                                                said: str) -> None:
    result = unet(example_copy, *args, timeout=60)
    assert result.returncode == 1, (args, result.stdout, result.stderr)
    assert said in result.stderr, (args, result.stderr)
    assert not (example_copy / ".unet" / "ovn").exists(), "nothing was started"


def test_a_saved_plan_names_its_own_revision_and_managers(example_copy: Path) -> None:
    saved = example_copy / "plan.json"
    saved.write_text("{}")
    for flag in (["--rev", "HEAD"], ["--refresh-only"], ["--manager", "ovn"],
                 ["--region", "region-a"]):
        result = unet(example_copy, "apply", str(saved), *flag)
        assert result.returncode == 1 and flag[0] in result.stderr, (flag, result.stderr)
        assert "saved plan" in result.stderr


# --- progress -------------------------------------------------------------------------------


def _in_a_pty(cwd: Path, *args: str, answer: str = "", **env: str) -> tuple[int, str]:
    """Run unet with a terminal for its standard streams; `answer` is typed at a prompt."""
    pid, fd = pty.fork()
    if pid == 0:  # the child
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "unet.reconciler.cli", *args],
                  {**unet_env(), "TERM": "xterm", "COLUMNS": "120", **env})
    chunks, deadline = [], time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
        if answer and b"accepted" in data:
            os.write(fd, answer.encode() + b"\r")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")


def test_progress_shows_on_a_terminal_only(example_copy: Path) -> None:
    code, seen = _in_a_pty(example_copy, "plan", "--manager", "ovn",
                           UNET_PROGRESS_AFTER="0")
    assert code == 0, seen
    assert "observing ovn" in seen and "planning" in seen, seen
    assert "No changes" not in seen, "the empty fabric has everything to create"
    piped = subprocess.run([sys.executable, "-m", "unet.reconciler.cli", "plan",
                            "--manager", "ovn"], cwd=example_copy,
                           env={**unet_env(), "UNET_PROGRESS_AFTER": "0"},
                           capture_output=True, text=True, timeout=120, check=False)
    assert piped.returncode == 0, piped.stderr
    assert "observing" not in piped.stdout + piped.stderr
    assert "\x1b[" not in piped.stderr


@pytest.mark.parametrize("command", [["status", "--manager", "ovn"],
                                     ["usage", "--manager", "ovn"]])
def test_show_status_and_usage_show_their_progress_too(example_copy: Path,
                                                      command: list[str]) -> None:
    """They read every backend (status plans, as `plan` does): as silent as `show bindings`
    at a few hundred tenants, so the same status line."""
    code, seen = _in_a_pty(example_copy, "show", *command, UNET_PROGRESS_AFTER="0")
    assert code == 0, seen
    assert "reading the backends" in seen, seen


def test_no_progress_before_the_delay(example_copy: Path) -> None:
    code, seen = _in_a_pty(example_copy, "plan", "--manager", "ovn",
                           UNET_PROGRESS_AFTER="60")
    assert code == 0 and "observing" not in seen, seen


def test_the_status_line_ends_before_the_plan_and_the_prompt(example_copy: Path) -> None:
    code, seen = _in_a_pty(example_copy, "apply", "--manager", "ovn", answer="no",
                           UNET_PROGRESS_AFTER="0")
    assert code == 1 and "apply cancelled; nothing was changed" in seen, seen
    assert "observing ovn" in seen
    shown = seen.rindex("planning")
    assert shown < seen.index("Plan: 0 to delete"), "the line was drawn over the plan"
    assert "planning" not in seen[seen.index("Plan: 0 to delete"):]


# --- reconcile --once -----------------------------------------------------------------------


class _Reconciled:
    """What `once` asks of a Reconciler, after a run that changed nothing."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.last_validation = None
        self.last_plan_has_changes = False
        self.last_plan = None

    def run_once(self) -> Run:
        return Run(started="2026-11-27T00:00:00Z", source="repo", result="ok",
                   message="no changes: the backends match the revision", revision="ab" * 20,
                   branch="main", duration=1.25)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_reconcile_once_is_for_people_on_a_terminal(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    out, err = _Terminal(), _Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    assert once(_Reconciled(tmp_path), Serving(), False) == 0  # type: ignore[arg-type]
    assert err.getvalue() == "", "no JSON line on a terminal"
    assert "main @ abababababab: ok: no changes" in out.getvalue()
    assert "took 1.2 s" in out.getvalue() and "{" not in out.getvalue()


def test_reconcile_once_says_the_drift_once() -> None:
    """A run that reports drift says how much in its headline; a run that repaired some
    says so under its headline (its message is what was applied)."""
    from unet.reconciler.daemon.report import summary

    reported = Run(started="2026-11-27T00:00:00Z", source="repo", result="drift",
                   message="3 backend objects changed outside unet; reported, not repaired",
                   revision="ab" * 20, drift=3, duration=0.2)
    assert [line for line in summary(reported) if "changed outside unet" in line] == [
        "unet reconcile: abababababab: drift: 3 backend objects changed outside unet; "
        "reported, not repaired"]
    repaired = Run(started="2026-11-27T00:00:00Z", source="repo", result="applied",
                   message="applied 0 created, 3 updated, 0 deleted in 0.01 s",
                   revision="ab" * 20, drift=3, repaired=3, duration=0.2)
    assert "  drift: 3 objects changed outside unet, 3 repaired" in summary(repaired)


def test_reconcile_once_keeps_its_log_line_for_logs(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    assert once(_Reconciled(tmp_path), Serving(), False) == 0  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert json.loads(err)["event"] == "reconcile" and "ok: no changes" in out
    assert once(_Reconciled(tmp_path), Serving(), False, "json") == 0  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert document["result"] == "ok" and document["revision"] == "ab" * 20
    assert err == "", "the JSON is the output, once"


# --- completion -----------------------------------------------------------------------------


def _completed(tmp_path: Path, line: str) -> list[str]:
    out = tmp_path / "completions"
    result = subprocess.run([sys.executable, "-m", "unet.reconciler.cli"], cwd=tmp_path, env={
        **unet_env(), "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "_ARGCOMPLETE_IFS": "\n"},
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return out.read_text().split()


def test_completion_knows_the_new_flags_and_the_codes(tmp_path: Path) -> None:
    assert "--format" in _completed(tmp_path, "unet codes --f")
    assert _completed(tmp_path, "unet codes SUBNET_OV") == ["SUBNET_OVERLAP"]
    assert set(_completed(tmp_path, "unet show networkclass x -o ")) == {"text", "json"}
    assert "--format" in _completed(tmp_path, "unet reconcile --fo")


# --- validate --rev -------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                    "user.email=t@example.invalid", "-c", "commit.gpgsign=false", *args],
                   check=True, capture_output=True)


def test_validate_rev_shows_the_column_and_the_revisions_line(example_copy: Path) -> None:
    """As in folder mode: `file:line:col`, the line as the revision holds it (the work tree
    no longer has the file), and the caret under the column the YAML reader gave."""
    broken = example_copy / "tenants" / "acme" / "broken.yaml"
    broken.write_text("apiVersion: network.osac.io/v1alpha1\nkind: [Subnet\n")
    _git(example_copy, "init", "-q")
    _git(example_copy, "add", "-A")
    _git(example_copy, "commit", "-qm", "broken")
    broken.unlink()  # gone from the work tree
    for args in (["--rev", "HEAD"], []):
        result = unet(example_copy, "validate", *args)
        if not args:
            assert result.returncode == 0, "the work tree has no such file"
            continue
        lines = result.stdout.splitlines()
        at = next(i for i, line in enumerate(lines) if "YAML_SYNTAX" in line)
        assert lines[at].startswith("tenants/acme/broken.yaml:2:7: error YAML_SYNTAX")
        assert lines[at + 1:at + 3] == ["  2 | kind: [Subnet", "    |       ^"]


def test_an_invalid_class_is_shown_with_its_source_line(example_copy: Path) -> None:
    classes = example_copy / "provider" / "classes.yaml"
    classes.write_text(classes.read_text().replace("fabricManager: ovn",
                                                   "fabricManager: nope", 1))
    result = unet(example_copy, "show", "networkclass", "standard-a")
    assert result.returncode == 1 and "capabilities:  unknown" in result.stdout
    assert " |   fabricManager: nope" in result.stdout, result.stdout
    document = json.loads(unet(example_copy, "show", "networkclass", "standard-a",
                               "-o", "json").stdout)
    assert document["capabilities"] is None and document["diagnostics"]
