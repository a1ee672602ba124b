"""The command line as people and their tools expect it (issue 16, items 8 and 9): version,
completion, colour flags, one format vocabulary, clickable locations with the source line,
the repo found from a subfolder, pre-commit, and the embedded database found from the repo.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from unet.reconciler.plan_render import render_text
from unet.reconciler.processes import process_alive

from .conftest import ROOT
from .support.ovnrun import apply, unet, unet_env
from .test_plan_golden import edit_text

ESC = "\x1b["


def _coloured(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "unet.reconciler.cli", *args], cwd=cwd,
                          env={**unet_env(), **env}, capture_output=True, text=True,
                          timeout=60, check=False)


def _break(repo: Path) -> None:
    """Two problems in two files: a subnet overlap and a misspelt group."""
    edit_text(repo, "tenants/acme/network.yaml", "ipv4Cidr: 10.10.8.0/22",
              "ipv4Cidr: 10.10.2.0/23")
    edit_text(repo, "tenants/acme/security-groups.yaml", "securityGroup: web\n",
              "securityGroup: wbe\n")


def test_version_and_help_name_the_program(tmp_path: Path) -> None:
    result = unet(tmp_path, "--version")
    assert result.returncode == 0 and result.stdout.startswith("unet ")
    assert result.stdout.split()[1][0].isdigit() or "not installed" in result.stdout


def test_colour_follows_the_flags_and_the_environment(example_copy: Path) -> None:
    cwd = example_copy.parent
    plain = unet(cwd, "validate", str(example_copy))
    assert ESC not in plain.stdout, "a pipe gets no colour"
    forced = _coloured(cwd, "validate", str(example_copy), FORCE_COLOR="1")
    assert ESC in forced.stdout, "FORCE_COLOR colours a pipe (CI logs)"
    for args, env in ((("validate", "--no-color", str(example_copy)), {"FORCE_COLOR": "1"}),
                      (("--no-color", "validate", str(example_copy)), {"FORCE_COLOR": "1"}),
                      (("validate", str(example_copy)), {"FORCE_COLOR": "1", "NO_COLOR": "1"})):
        result = _coloured(cwd, *args, **env)
        assert result.returncode == 0 and ESC not in result.stdout, (args, env)


def test_what_opens_to_the_outside_is_red_and_counts_read_right() -> None:
    doc = json.loads((ROOT / "tests/golden/open_ssh.json").read_text())
    text = render_text(doc, colour=True)
    [opened] = [line for line in text.splitlines() if "opens tcp port 22" in line]
    assert "\x1b[31m" in opened, f"not red: {opened!r}"
    doc["drift"] = [doc["backend_changes"][0]["id"]]
    assert "Drift: 1 backend object changed outside unet:" in render_text(doc)


def test_locations_are_clickable_and_show_the_source_line(example_copy: Path) -> None:
    _break(example_copy)
    result = unet(example_copy.parent, "validate", "repo")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    at = lines.index("repo/tenants/acme/network.yaml:42:3: error SUBNET_OVERLAP 10.10.2.0/24 "
                     "overlaps subnet 'nodes' (10.10.2.0/23) of the same VirtualNetwork  "
                     "(/spec/ipv4Cidr)")
    assert lines[at + 1] == "  42 |   ipv4Cidr: 10.10.2.0/24"
    assert lines[at + 2] == "     |   ^"
    assert "✖ 2 errors, 2 warnings" in result.stdout


def test_the_repo_is_found_from_a_subfolder(example_copy: Path) -> None:
    inside = example_copy / "tenants" / "acme"
    result = unet(inside, "validate", "--format", "json")
    document = json.loads(result.stdout)
    assert result.returncode == 0 and document["root"] == "../.."
    assert document["summary"]["documents"] == 63
    _break(example_copy)
    text = unet(inside, "validate")
    assert "../../tenants/acme/network.yaml:42:3: error SUBNET_OVERLAP" in text.stdout


def test_validate_files_reports_only_those_files(example_copy: Path) -> None:
    """pre-commit passes the staged files: the whole repo is checked, only their
    problems are reported, and the exit code is theirs."""
    _break(example_copy)
    def reported(*files: str) -> tuple[int, set[str]]:
        result = unet(example_copy, "validate", *files, "--format", "json")
        return result.returncode, {d["file"] for d in json.loads(result.stdout)["diagnostics"]}

    assert reported("tenants/acme/network.yaml") == (1, {"tenants/acme/network.yaml"})
    assert reported("tenants/globex/network.yaml", "unet.yaml") == (0, set())
    code, files = reported("tenants/acme/network.yaml", "tenants/acme/security-groups.yaml")
    assert code == 1 and files == {"tenants/acme/network.yaml",
                                   "tenants/acme/security-groups.yaml"}
    outside = unet(example_copy, "validate", "tenants/acme/network.yaml", str(ROOT / "README.md"))
    assert outside.returncode == 1 and "is not inside the network repo" in outside.stderr
    for args, said in ((("tenants/acme", "unet.yaml"), "is a folder: give one folder, or files"),
                       (("tenants/acme/nope.yaml",), "nope.yaml: no such file or folder"),
                       ((str(ROOT / "README.md"),), "is not in a network repo: no unet.yaml")):
        refused = unet(example_copy, "validate", *args)
        assert refused.returncode == 1 and said in refused.stderr, (args, refused.stderr)

    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    [hook] = hooks
    assert hook["id"] == "unet-validate" and hook["entry"] == "unet validate"
    assert hook["language"] == "python"


def test_one_format_vocabulary(example_copy: Path, tmp_path: Path) -> None:
    cwd = example_copy.parent
    markdown = unet(cwd, "validate", str(example_copy), "--format", "markdown")
    assert markdown.stdout.startswith("### unet validate: 0 errors, 2 warnings")
    legacy = unet(cwd, "validate", str(example_copy), "--format", "human")
    assert legacy.returncode == 0 and "✔ valid with 2 warnings" in legacy.stdout
    subprocess.run(["git", "init", "-q", str(example_copy)], check=True)
    subprocess.run(["git", "-C", str(example_copy), "-c", "user.name=t", "-c",
                    "user.email=t@example.invalid", "commit", "-qam", "x", "--allow-empty"],
                   check=True, capture_output=True)
    subprocess.run(["git", "-C", str(example_copy), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(example_copy), "-c", "user.name=t", "-c",
                    "user.email=t@example.invalid", "commit", "-qm", "repo"], check=True)
    summary = tmp_path / "summary.md"
    github = subprocess.run(
        [sys.executable, "-m", "unet.reconciler.cli", "plan", str(example_copy), "--base", "HEAD",
         "--format", "github"], cwd=cwd, env={**unet_env(), "GITHUB_STEP_SUMMARY": str(summary)},
        capture_output=True, text=True, timeout=60, check=False)
    assert github.returncode == 0, github.stderr
    assert "::warning file=repo/tenants/acme/external.yaml,line=56,title=TARGET_PENDING::" \
        in github.stdout, github.stdout[:2000]
    assert "No changes. The backends match the repo." in github.stdout
    assert summary.read_text().startswith("### unet plan:")


def test_shell_completion(tmp_path: Path) -> None:
    out = tmp_path / "completions"
    line = "unet pl"
    result = subprocess.run([sys.executable, "-m", "unet.reconciler.cli"], cwd=tmp_path, env={
        **unet_env(), "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "_ARGCOMPLETE_IFS": "\n"},
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert out.read_text().split() == ["plan"]
    for shell in ("bash", "zsh", "fish"):
        script = unet(tmp_path, "completion", shell)
        assert script.returncode == 0 and "unet" in script.stdout, shell
    bash = shutil.which("bash")
    assert bash, "bash is needed to load the completion script"
    script = unet(tmp_path, "completion", "bash").stdout
    loaded = subprocess.run([bash, "-c", f"{script}\ncomplete -p unet"], capture_output=True,
                            text=True, check=False)
    assert loaded.returncode == 0 and loaded.stdout.strip().endswith(" unet"), loaded


def test_the_embedded_database_lives_in_the_repo(example_copy: Path, tmp_path: Path) -> None:
    """`make demo` applies from the project folder; `cd` into the repo and plan: the same
    database, nothing to do; `unet nb` reads it with ovn-nbctl."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    result = apply(work, example_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (example_copy / ".unet" / "ovn" / "ovnnb.db").is_file()
    assert not (work / ".unet").exists()
    again = unet(example_copy / "tenants", "plan", "--manager", "ovn", "--format", "json",
                 "--detailed-exitcode")
    assert again.returncode == 0 and not json.loads(again.stdout)["has_changes"]
    listed = unet(example_copy / "tenants", "nb", "--", "--bare", "--columns=name", "list",
                  "Logical_Router")
    assert listed.returncode == 0, listed.stderr
    assert "unet.acme.prod" in listed.stdout.split()
    pidfile = example_copy / ".unet" / "ovn" / "nb.pid"
    assert not pidfile.exists() or not process_alive(int(pidfile.read_text())), \
        "the server unet started for the command is stopped"


def test_source_lines_come_only_from_the_repos_own_regular_files(example_copy: Path) -> None:
    """A FIFO would block the reader, a symlink leaving the repo would print someone
    else's file: both are reported (PATH_UNSAFE) without a source line."""
    os.mkfifo(example_copy / "provider" / "pipe.yaml")
    (example_copy / "provider" / "passwd.yaml").symlink_to("/etc/passwd")
    result = unet(example_copy, "validate", timeout=30)
    assert result.returncode == 1
    assert "provider/pipe.yaml:1: error PATH_UNSAFE" in result.stdout
    assert "root:" not in result.stdout, "nothing of /etc/passwd is shown"
    assert " | " not in result.stdout.split("provider/passwd.yaml")[1].split("\n\n")[0]
