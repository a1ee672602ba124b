"""`unet plan --base REV` and `unet show plan` on real Git repos: exit codes, saved plans,
the Markdown size limit, and bad input (clear messages, exit 1, never a traceback)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from unet.reconciler.cli import main
from unet.reconciler.plan_io import document_text

from .conftest import EXAMPLE, ROOT, copy_checkout
from .test_plan_golden import edit_text

SSH_RULE = """    - protocol: tcp          # PostgreSQL, only from ports in group "web"
      portFrom: 5432
      portTo: 5432
      securityGroup: web
"""
SSH_OPEN = SSH_RULE + """    - protocol: tcp
      portFrom: 22
      portTo: 22
      cidr: 0.0.0.0/0
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                           "user.email=t@example.com", *args],
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A", ".")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The example repo, committed once."""
    root = tmp_path / "repo"
    copy_checkout(EXAMPLE, root)
    git(root, "init", "-q")
    commit(root, "base")
    return root


def unet(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err, err
    return code, out, err


def open_ssh(repo: Path) -> None:
    edit_text(repo, "tenants/acme/security-groups.yaml", SSH_RULE, SSH_OPEN)


def test_exit_codes_without_and_with_changes(repo: Path, capsys: pytest.CaptureFixture[str]
                                             ) -> None:
    code, out, _ = unet(capsys, "plan", "--base", "HEAD", str(repo))
    assert code == 0 and "No changes" in out
    assert unet(capsys, "plan", "--base", "HEAD", "--detailed-exitcode", str(repo))[0] == 0
    open_ssh(repo)
    code, out, _ = unet(capsys, "plan", "--base", "HEAD", str(repo))
    assert code == 0
    assert "SecurityGroup/acme/db will be updated in place" in out
    assert "opens tcp port 22 from 0.0.0.0/0 (anywhere) to acme/prod/db" in out
    assert unet(capsys, "plan", "--base", "HEAD", "--detailed-exitcode", str(repo))[0] == 2


def test_two_revisions_are_recorded(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = git(repo, "rev-parse", "HEAD")
    open_ssh(repo)
    head = commit(repo, "open ssh")
    (repo / "unet.yaml").write_text("not: [valid")  # the work tree is not read
    code, out, _ = unet(capsys, "plan", "--base", "HEAD~1", "--head", "HEAD", "--format",
                        "json", "--detailed-exitcode", str(repo))
    assert code == 2
    doc = json.loads(out)
    assert doc["inputs"]["base"]["commit"] == base and doc["inputs"]["base"]["valid"] is True
    assert doc["inputs"]["head"]["commit"] == head
    assert doc["counts"]["update"] == 1 and doc["valid"]


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_saved_plan_shows_the_same(repo: Path, capsys: pytest.CaptureFixture[str], fmt: str,
                                   tmp_path: Path) -> None:
    edit_text(repo, "tenants/acme/network.yaml", "ipv4Cidr: 10.10.8.0/22",
              "ipv4Cidr: 10.10.12.0/22")
    saved = tmp_path / "plan.json"
    code, planned, _ = unet(capsys, "plan", "--base", "HEAD", "-o", str(saved), "--format",
                            fmt, str(repo))
    assert code == 0 and saved.exists()
    code, shown, _ = unet(capsys, "show", "plan", str(saved), "--format", fmt)
    assert code == 0
    assert shown == planned
    if fmt == "json":
        assert json.loads(saved.read_text()) == json.loads(planned)
    else:
        assert "Subnet/acme/nodes" in shown


def write_many_instances(root: Path, tenants: int) -> None:
    """A big valid repo without the benchmark generator: the example's provider, many tenants."""
    shutil.copytree(EXAMPLE / "provider", root / "provider",
                    ignore=shutil.ignore_patterns("tenants"))
    shutil.copy(EXAMPLE / "unet.yaml", root / "unet.yaml")
    edit_text(root, "provider/pools.yaml", "  tenants: [globex]\n", "")  # no globex here
    api = "apiVersion: network.osac.io/v1alpha1\n"
    for n in range(tenants):
        name = f"t{n:04d}"
        (root / "provider" / "tenants").mkdir(exist_ok=True)
        (root / "provider" / "tenants" / f"{name}.yaml").write_text(
            f"{api}kind: Tenant\nmetadata:\n  name: {name}\nspec:\n  regions: [region-a]\n")
        docs = [f"{api}kind: VirtualNetwork\nmetadata:\n  name: net\nspec:\n"
                "  region: region-a\n  ipv4Cidr: 10.0.0.0/16\n",
                f"{api}kind: Subnet\nmetadata:\n  name: sub\nspec:\n  virtualNetwork: net\n"
                "  ipv4Cidr: 10.0.1.0/24\n"]
        docs += [f"{api}kind: ComputeInstance\nmetadata:\n  name: vm-{i}\nspec:\n"
                 "  networkAttachments:\n    - subnet: sub\n" for i in range(20)]
        (root / "tenants" / name).mkdir(parents=True)
        (root / "tenants" / name / "all.yaml").write_text("---\n".join(docs))


def test_markdown_of_a_huge_plan_fits_a_pr_comment(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "big"
    try:
        from benchmarks.generate import generate_repo
    except ImportError:
        write_many_instances(root, 200)
    else:
        generate_repo(root, 200)
    git(root, "init", "-q")
    git(root, "add", "unet.yaml")
    git(root, "commit", "-q", "-m", "an empty installation")
    code, out, _ = unet(capsys, "plan", "--base", "HEAD", "--format", "markdown", str(root))
    assert code == 0
    assert len(out) <= 65_535
    assert out.startswith("### unet plan: base HEAD")
    assert "| resources | 0 | 0 |" in out and "| backend rows | 0 | 0 |" in out
    assert "#### Changes" in out and "<details>" in out
    assert "more changed resources not shown here (GitHub's size limit)" in out
    assert out.count("<details>") == out.count("</details>")


def test_unknown_revision(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = unet(capsys, "plan", "--base", "no-such-branch", str(repo))
    assert code == 1 and out == ""
    assert "revision 'no-such-branch' does not exist" in err


def test_a_pull_request_plan_weighs_the_usage_of_its_head_alone(
        repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The base of a plan between revisions is summed up as valid or not: its warnings are
    never shown, so how full its pools are (POOL_NEARLY_FULL) is not worked out."""
    from unet.reconciler import usage
    from unet.reconciler.validate import validate_repo

    weighed: list[object] = []
    real = usage.demanded
    monkeypatch.setattr(usage, "demanded", lambda model: weighed.append(model) or real(model))
    edit_text(repo, "tenants/acme/network.yaml", "mtu: 9000", "mtu: 8900")
    code, out, _ = unet(capsys, "plan", "--base", "HEAD", "--format", "json", "--no-cache",
                        str(repo))
    assert code == 0 and json.loads(out)["inputs"]["base"]["valid"] is True
    assert len(weighed) == 1

    nearly_full = ROOT / "examples" / "broken" / "pool-nearly-full"
    codes = [d.code for d in validate_repo(nearly_full).diagnostics]
    assert codes == ["POOL_NEARLY_FULL"]
    assert validate_repo(nearly_full, usage_warnings=False).diagnostics == []


def test_invalid_base_is_planned_from_nothing(repo: Path, capsys: pytest.CaptureFixture[str]
                                              ) -> None:
    build = "ipv4Cidr: 192.168.1.0/24"
    edit_text(repo, "tenants/initech/network.yaml", build, "ipv4Cidr: 192.168.1.5/24")
    commit(repo, "a broken base")
    edit_text(repo, "tenants/initech/network.yaml", "ipv4Cidr: 192.168.1.5/24", build)
    code, out, _ = unet(capsys, "plan", "--base", "HEAD", "--format", "json", str(repo))
    assert code == 0
    doc = json.loads(out)
    assert doc["inputs"]["base"]["valid"] is False and doc["inputs"]["base"]["errors"] == 1
    # Nothing of the base was rendered: every resource and row is created, nothing replaced.
    assert {tuple(r["actions"]) for r in doc["resources"]} == {("create",)}
    assert doc["row_counts"]["create"] == len(doc["backend_changes"])
    assert sorted(d["code"] for d in doc["diagnostics"]) == ["POLICY_RULE_NOT_REALISED",
                                                             "TARGET_PENDING"]
    code, out, _ = unet(capsys, "plan", "--base", "HEAD", str(repo))
    assert code == 0 and "the base has 1 error and was not rendered" in out.splitlines()[0]


def test_head_with_errors_gives_no_plan(repo: Path, capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    edit_text(repo, "tenants/initech/network.yaml", "ipv4Cidr: 192.168.1.0/24",
              "ipv4Cidr: 192.168.1.5/24")
    saved = tmp_path / "plan.json"
    code, out, err = unet(capsys, "plan", "--base", "HEAD", "-o", str(saved), str(repo))
    assert code == 1
    assert "CIDR_NOT_CANONICAL" in out and "tenants/initech/network.yaml" in out
    assert "no plan" in err
    assert not saved.exists()


def _bad_head(repo: Path) -> None:
    """A branch `bad` whose SSH rule has `portTo: 70000`; the work tree stays at the base,
    whose line 19 reads `portTo: 22` (as in a job that checked out the default branch)."""
    git(repo, "checkout", "-q", "-b", "bad")
    edit_text(repo, "tenants/acme/security-groups.yaml", "portTo: 22", "portTo: 70000")
    commit(repo, "bad port")
    git(repo, "checkout", "-q", "-")


def test_diagnostics_of_a_revision_quote_its_lines_not_the_work_trees(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _bad_head(repo)
    for argv in (["plan", "--base", "HEAD", "--head", "bad", str(repo)],
                 ["validate", "--rev", "bad", str(repo)]):
        code, out, _ = unet(capsys, *argv)
        assert code == 1
        assert "security-groups.yaml:19:7: error RULE_PORTS_INVALID" in out, out
        assert "19 |       portTo: 70000\n" in out and "portTo: 22" not in out, out


@pytest.mark.parametrize("fmt", ["json", "markdown", "github"])
def test_every_format_carries_the_diagnostics_of_a_head_with_errors(
        repo: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    """A tool asking for JSON gets a plan document, not text: `valid` false, the
    diagnostics, no change; Markdown (the PR comment) and GitHub annotations likewise."""
    _bad_head(repo)
    for argv in (["plan", "--base", "HEAD", "--head", "bad"],
                 ["plan", "--rev", "bad", "--manager", "ovn"]):  # --base reads no backend
        code, out, err = unet(capsys, *argv, "--format", fmt, str(repo))
        assert code == 1 and "no plan" in err
        if fmt == "json":
            doc = json.loads(out)
            assert doc["valid"] is False and doc["backend_changes"] == []
            assert doc["mode"] == ("pr" if "--base" in argv else "live")
            [diag] = [d for d in doc["diagnostics"] if d["severity"] == "error"]
            assert (diag["code"], diag["file"], diag["line"]) == (
                "RULE_PORTS_INVALID", "tenants/acme/security-groups.yaml", 19)
        elif fmt == "markdown":
            assert "RULE_PORTS_INVALID" in out and "cannot be applied" in out
            assert "✖" not in out, "not the terminal's text"
        else:
            assert "::error file=" in out and "title=RULE_PORTS_INVALID" in out


def test_shallow_clone_without_the_base(repo: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    base = git(repo, "rev-parse", "HEAD")
    open_ssh(repo)
    commit(repo, "open ssh")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(clone)],
                   check=True, capture_output=True)
    for rev in ("HEAD~1", base):  # a parent the clone names but lacks; an absent commit
        code, out, err = unet(capsys, "plan", "--base", rev, str(clone))
        assert code == 1 and out == ""
        assert f"revision '{rev}' does not exist" in err
        assert "fetch-depth: 0" in err


def test_saved_plan_of_another_major_format_is_refused(repo: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    saved = tmp_path / "plan.json"
    assert unet(capsys, "plan", "--base", "HEAD", "-o", str(saved), str(repo))[0] == 0
    doc = json.loads(saved.read_text())
    doc.update(format_version="1.9", field_of_a_later_minor={"x": 1})
    saved.write_text(document_text(doc))  # as a later unet would write it
    assert unet(capsys, "show", "plan", str(saved))[0] == 0  # minor bump: read
    doc["format_version"] = "2.0"
    saved.write_text(document_text(doc))
    code, out, err = unet(capsys, "show", "plan", str(saved))
    assert code == 1 and out == ""
    assert "plan format 2.0 is not supported" in err and str(saved) in err
    saved.write_text("{not json")
    code, _, err = unet(capsys, "show", "plan", str(saved))
    assert code == 1 and f"cannot read the plan {saved}" in err


def test_console_script_exit_code(repo: Path) -> None:
    script = Path(sys.executable).parent / "unet"
    if not script.exists():
        pytest.skip("the unet console script is not installed next to this Python")
    open_ssh(repo)
    done = subprocess.run([str(script), "plan", "--base", "HEAD", "--detailed-exitcode",
                           str(repo)], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "Plan: 0 to delete, 0 to replace, 0 to create, 1 to update" in done.stdout


def test_a_revision_of_a_folder_outside_git_is_a_plain_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "plain"
    copy_checkout(EXAMPLE, folder)
    code, out, err = unet(capsys, "plan", "--base", "HEAD", str(folder))
    assert code == 1 and out == ""
    assert f"{folder} is not inside a Git repository, so it has no revision 'HEAD'" in err
