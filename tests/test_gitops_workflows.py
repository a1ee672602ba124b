"""The GitOps workflows a network repo copies from examples/network-repo/.github/workflows,
run locally step by step (tests/gitops.py) on temp Git repos with a base and a head commit,
against the embedded OVN Northbound database: pull-request previews with one sticky
comment, apply on merge (and STALE_PLAN when the backends change in between), and the
scheduled reconcile that reports or repairs drift. Every workflow file passes actionlint.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from managers.ovn.embedded import EmbeddedNorthbound

from .support.gitops import (
    PROJECT_WORKFLOWS,
    VENV_BIN,
    WORKFLOWS,
    WorkflowRun,
    add_instance,
    api,
    break_repo,
    commit_all,
    evaluate,
    git,
    new_api_state,
    open_ssh,
    ovn_only_repo,
    run_workflow,
    set_mode,
)

MARKER = "<!-- unet-plan -->"
LSP = "unet.acme.vm.web-1.0"


# --- actionlint -----------------------------------------------------------------------------


def _workflow_files() -> list[Path]:
    files = sorted(WORKFLOWS.glob("*.yml")) + sorted(PROJECT_WORKFLOWS.glob("*.yml"))
    assert len(files) >= 5, files
    return files


@pytest.mark.parametrize("path", _workflow_files(), ids=lambda p: p.name)
def test_workflow_passes_actionlint(path: Path) -> None:
    actionlint = VENV_BIN / "actionlint"
    shellcheck = VENV_BIN / "shellcheck"
    assert actionlint.exists(), "pip install -e '.[test]' installs actionlint"
    assert shellcheck.exists(), "pip install -e '.[test]' installs shellcheck"
    done = subprocess.run([str(actionlint), "-no-color", "-shellcheck", str(shellcheck),
                           str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_expression_stand_in() -> None:
    context = {"steps": {"plan": {"outputs": {"exit-code": "2"}}}, "vars": {}}
    assert evaluate("steps.plan.outputs.exit-code == '2'", context)
    assert evaluate("steps.other.outputs.skip != 'true'", context)
    assert evaluate("vars.UNET_RUNS_ON || 'ubuntu-24.04'", context) == "ubuntu-24.04"
    assert evaluate("!cancelled() && steps.plan.outputs.exit-code != '1'", context)
    assert not evaluate("success() && false", context, failed=False)


# --- a "GitHub" repo: a bare origin, a work clone, checkouts --------------------------------


def make_origin(tmp_path: Path, work: Path) -> Path:
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(work, "init", "-q", "-b", "main")
    commit_all(work, "base: the example, OVN only")
    git(work, "remote", "add", "origin", str(origin))
    git(work, "push", "-q", "origin", "main")
    return origin


def checkout(origin: Path, ref: str, dest: Path) -> Path:
    """actions/checkout with fetch-depth 0: a clone with every branch, at `ref`."""
    git(dest.parent, "clone", "-q", str(origin), str(dest))
    git(dest, "checkout", "-q", "--detach", ref)
    return dest


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return self.n


# --- 1. pull requests -----------------------------------------------------------------------


def _pr_context(number: int, head: str) -> dict[str, object]:
    return {"event_name": "pull_request", "base_ref": "main", "head_ref": "feature",
            "sha": head, "ref_name": f"{number}/merge",
            "event": {"pull_request": {"number": number, "head": {"sha": head}}}}


def _run_context(head: str, conclusion: str = "success") -> dict[str, object]:
    return {"event_name": "workflow_run", "sha": "0" * 40, "ref_name": "main",
            "event": {"workflow_run": {
                "event": "pull_request", "conclusion": conclusion, "id": 4242,
                "head_sha": head,
                "html_url": "https://github.com/acme/network/actions/runs/4242"}}}


def test_pull_request_preview_and_one_sticky_comment(tmp_path: Path) -> None:
    work = ovn_only_repo(tmp_path / "work")
    origin = make_origin(tmp_path, work)
    n = Counter()
    artifacts = tmp_path / "artifacts"
    state = new_api_state(tmp_path / "github.json", pulls={}, comments=[
        {"id": 1, "issue_number": 7, "user": {"login": "alice", "type": "User"},
         "body": f"{MARKER} quoting the bot's marker must not make this comment the bot's"}])

    def pull_request(head: str) -> tuple[WorkflowRun, WorkflowRun]:
        """Both workflows of a push to the pull request: the plan, then the comment."""
        i = n()
        git(work, "push", "-q", "--force", "origin", "feature")
        tree = checkout(origin, head, tmp_path / f"pr-{i}")
        plan = run_workflow("unet-plan.yml", tree, tmp_path / f"run-pr-{i}",
                            github=_pr_context(7, head), artifacts=artifacts)
        data = api(state)
        data["pulls"] = {"7": {"number": 7, "head": {"sha": head}}}
        state.write_text(json.dumps(data))
        (tmp_path / f"comment-{i}").mkdir()
        comment = run_workflow("unet-plan-comment.yml", tmp_path / f"comment-{i}",
                               tmp_path / f"run-comment-{i}", github=_run_context(head),
                               artifacts=artifacts, api_state=state)
        return plan, comment

    def bot_comments() -> list[dict[str, object]]:
        return [c for c in api(state)["comments"] if c["user"]["type"] == "Bot"]

    # A pull request that opens SSH to the world and adds a VM.
    git(work, "checkout", "-q", "-b", "feature")
    open_ssh(work)
    add_instance(work, "web-9")
    head1 = commit_all(work, "open ssh, add web-9")
    plan, comment = pull_request(head1)
    assert plan.conclusion == "success", plan.log
    assert plan.step("validate").outcome == "success"
    assert plan.step("plan").outputs["exit-code"] == "2"  # a plan with changes
    planned = json.loads((artifacts / "unet-plan" / "plan.json").read_text())
    assert planned["mode"] == "pr" and planned["inputs"]["head"]["commit"] == head1
    assert planned["inputs"]["base"]["rev"] == "origin/main"
    assert (artifacts / "unet-plan" / "pr-number").read_text().strip() == "7"
    assert "### unet validate: 0 errors, 1 warning" in plan.summary  # validation, the plan
    assert "opens tcp port 22 from 0.0.0.0/0 (anywhere)" in plan.summary
    assert comment.conclusion == "success", comment.log
    [sticky] = bot_comments()
    body = str(sticky["body"])
    assert body.startswith(MARKER + "\n### unet plan: base origin/main")
    assert "ComputeInstance/acme/web-9" in body and "opens tcp port 22" in body
    assert head1[:12] in body and len(body) <= 65_535
    assert api(state)["comments"][0]["body"].startswith(MARKER + " quoting")  # untouched

    # Another push: the same comment is updated in place, never a second one.
    add_instance(work, "web-10")
    head2 = commit_all(work, "add web-10")
    plan, comment = pull_request(head2)
    assert plan.conclusion == "success" and comment.conclusion == "success", comment.log
    [again] = bot_comments()
    assert again["id"] == sticky["id"] and "ComputeInstance/acme/web-10" in str(again["body"])
    assert api(state)["calls"] == ["create", "update"]

    # A late run for an older head never overwrites the comment of the newer one.
    (tmp_path / "late").mkdir()
    late = run_workflow("unet-plan-comment.yml", tmp_path / "late", tmp_path / "run-late",
                        github=_run_context(head1), artifacts=artifacts, api_state=state)
    assert late.conclusion == "success" and "has moved on to" in late.log
    assert api(state)["calls"] == ["create", "update"]

    # A push that breaks the repo: annotations on the changed line, the full list in the
    # summary, no plan, and the comment says so (rather than keep showing an old plan).
    break_repo(work)
    head3 = commit_all(work, "overlapping subnet")
    plan, comment = pull_request(head3)
    assert plan.conclusion == "failure"
    assert plan.step("validate").outcome == "failure"
    errors = plan.annotations("error")
    assert any("file=tenants/acme/network.yaml" in e and "title=SUBNET_OVERLAP" in e
               and "line=" in e for e in errors), errors
    assert "| ❌ | `SUBNET_OVERLAP` |" in plan.summary
    assert plan.step("plan").outputs["exit-code"] == "1"
    assert plan.step("Upload the plan for the comment").outcome == "success"
    assert comment.conclusion == "success", comment.log
    [broken] = bot_comments()
    assert broken["id"] == sticky["id"]
    assert "no plan for this revision" in str(broken["body"])
    assert "SUBNET_OVERLAP" in str(broken["body"])


def test_comment_is_cut_to_githubs_limit_and_checks_the_artifact(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    plan_dir = artifacts / "unet-plan"
    plan_dir.mkdir(parents=True)
    head = "a" * 40
    block = "<details><summary>x</summary>\n\n```diff\n" + "+ row\n" * 300 + "```\n</details>\n"
    (plan_dir / "comment.md").write_text("### unet plan: huge\n\n" + block * 60)
    (plan_dir / "pr-number").write_text("12\n")
    state = new_api_state(tmp_path / "github.json",
                          pulls={"12": {"number": 12, "head": {"sha": head}}})
    (tmp_path / "job").mkdir()
    run = run_workflow("unet-plan-comment.yml", tmp_path / "job", tmp_path / "run",
                       github=_run_context(head), artifacts=artifacts, api_state=state)
    assert run.conclusion == "success", run.log
    [comment] = api(state)["comments"]
    body = comment["body"]
    assert len(body) <= 65_535 and body.startswith(MARKER)
    assert body.count("<details>") == body.count("</details>") > 0
    assert "The rest of the plan is cut" in body

    # An artifact that names no pull request is refused.
    (plan_dir / "pr-number").write_text("12; rm -rf /\n")
    run = run_workflow("unet-plan-comment.yml", tmp_path / "job", tmp_path / "run2",
                       github=_run_context(head), artifacts=artifacts, api_state=state)
    assert run.conclusion == "failure" and "names no pull request" in run.log

    # The comment job does not run for a cancelled plan run.
    run = run_workflow("unet-plan-comment.yml", tmp_path / "job", tmp_path / "run3",
                       github=_run_context(head, "cancelled"), artifacts=artifacts,
                       api_state=state)
    assert run.conclusion == "skipped"


# --- 2. and 3. merge and schedule, against the embedded OVN ---------------------------------


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[str]:
    """The embedded Northbound database, kept running for the test; its remote."""
    with EmbeddedNorthbound(tmp_path / "backend") as nb:
        yield nb.remote


def nbctl(remote: str, *args: str) -> str:
    return subprocess.run(["ovn-nbctl", f"--db={remote}", *args], capture_output=True,
                          text=True, check=True).stdout.strip()


def hand_edit(remote: str) -> None:
    nbctl(remote, "set", "Logical_Switch_Port", LSP, "options:requested-chassis=hv9")


def edited(remote: str) -> bool:
    return "hv9" in nbctl(remote, "get", "Logical_Switch_Port", LSP, "options")


def test_merge_applies_and_the_schedule_reports_or_repairs_drift(tmp_path: Path,
                                                                 backend: str) -> None:
    work = ovn_only_repo(tmp_path / "work", northbound=backend, mode="report")
    origin = make_origin(tmp_path, work)
    n = Counter()

    def workflow(name: str, sha: str, **kwargs: object) -> WorkflowRun:
        i = n()
        tree = checkout(origin, sha, tmp_path / f"tree-{i}")
        github = {"event_name": "push", "sha": sha, "ref_name": "main",
                  "event": {"repository": {"default_branch": "main"}}}
        return run_workflow(name, tree, tmp_path / f"run-{i}", github=github,
                            **kwargs)  # type: ignore[arg-type]

    # The first merge deploys everything.
    base = git(work, "rev-parse", "HEAD")
    run = workflow("unet-apply.yml", base)
    assert run.conclusion == "success", run.log
    assert run.step("plan").outputs["exit-code"] == "2"
    assert "Apply complete: 133 created" in run.step("Apply the plan").stdout
    assert "| resources | 0 | 0 | 43 | 0 | 9 |" in run.summary
    assert LSP in nbctl(backend, "--bare", "--columns=name", "list", "Logical_Switch_Port")

    # A merge, and the backends change between plan and apply: STALE_PLAN, nothing applied.
    open_ssh(work)
    add_instance(work, "web-9")
    merged = commit_all(work, "open ssh, add web-9")
    git(work, "push", "-q", "origin", "main")
    before = nbctl(backend, "--bare", "--columns=name", "list", "Logical_Switch_Port")
    run = workflow("unet-apply.yml", merged, before_step={"Apply the plan":
                                                          lambda: hand_edit(backend)})
    assert run.conclusion == "failure"
    apply = run.step("Apply the plan")
    assert apply.outcome == "failure" and "STALE_PLAN" in apply.stderr
    [error] = [a for a in run.annotations("error") if "title=STALE_PLAN" in a]
    assert "nothing was applied" in error and "re-run this workflow" in error
    assert "### unet apply: refused (STALE_PLAN)" in run.summary
    assert nbctl(backend, "--bare", "--columns=name", "list", "Logical_Switch_Port") == before

    # Re-run: a new plan, from the backends as they are, applied (the drift repaired too).
    run = workflow("unet-apply.yml", merged)
    assert run.conclusion == "success", run.log
    assert "unet.acme.vm.web-9.0" in nbctl(backend, "--bare", "--columns=name", "list",
                                           "Logical_Switch_Port")
    assert not edited(backend)

    # Re-running the run of an older commit never rolls the backends back.
    run = workflow("unet-apply.yml", base)
    assert run.conclusion == "success"
    assert run.step("newest").outputs.get("skip") == "true"
    assert run.step("plan").outcome == "skipped" and any(
        "has moved on to" in a for a in run.annotations("notice"))
    assert "unet.acme.vm.web-9.0" in nbctl(backend, "--bare", "--columns=name", "list",
                                           "Logical_Switch_Port")

    # The schedule: nothing to do.
    run = workflow("unet-reconcile.yml", merged)
    assert run.conclusion == "success", run.log
    assert run.step("reconcile").outputs["result"] == "ok"
    assert "### unet reconcile: no changes" in run.summary

    # Drift with `reconcile: report`: exit 2, reported in the summary, left, the job fails.
    hand_edit(backend)
    run = workflow("unet-reconcile.yml", merged)
    assert run.step("reconcile").outcome == "success"  # exit 2 is "drift found"
    assert run.step("reconcile").outputs["result"] == "drift"
    assert run.step("reconcile").outputs["drift"] == "1"
    assert run.conclusion == "failure" and run.step("Drift left in place").outcome == "failure"
    assert "### unet reconcile: drift found, not repaired" in run.summary
    assert "requested-chassis" in run.summary and "`reconcile: report`" in run.summary
    assert edited(backend)

    # `reconcile: repair` is merged (its apply repairs the drift too, as any apply does);
    # then the next drift is repaired by the schedule.
    set_mode(work, "repair")
    repair = commit_all(work, "reconcile: repair")
    git(work, "push", "-q", "origin", "main")
    assert workflow("unet-apply.yml", repair).conclusion == "success"
    assert not edited(backend)
    hand_edit(backend)
    run = workflow("unet-reconcile.yml", repair)
    assert run.conclusion == "success", run.log
    assert run.step("reconcile").outputs["result"] == "applied"
    assert run.step("Drift repaired").outcome == "success"
    assert any("drift repaired" in a for a in run.annotations("warning"))
    assert "### unet reconcile: changes applied" in run.summary
    assert not edited(backend)


def test_the_readme_names_every_example_workflow() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for path in WORKFLOWS.glob("*.yml"):
        assert path.name in readme, path.name

