"""Run GitHub Actions workflows' steps locally, for the GitOps tests.

The workflow files are read as they are; every `run:` step runs with bash exactly as
GitHub runs it (`bash --noprofile --norc -eo pipefail`), with the `GITHUB_*` files
(`GITHUB_OUTPUT`, `GITHUB_ENV`, `GITHUB_STEP_SUMMARY`) pointing at temp files, and `if:`,
`env:` and `with:` expressions evaluated from the contexts a test gives. Actions stand in
like this: checkout and setup-python are the test's checkout and this venv; upload- and
download-artifact copy folders; github-script runs the script with Node.js against a fake
REST API whose state (comments, pull requests, workflows and their runs) is a JSON file.
Install steps (`id: install`) run with a stand-in `python` that installs nothing and records
its arguments and the requirement files it was given (`WorkflowRun.installs`): unet is the
venv's. Given an `origin`, checkout clones it at the step's `ref` (or the run's commit) into
the job's folder; otherwise the test has made that folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..conftest import EXAMPLE, ROOT, copy_checkout

WORKFLOWS = EXAMPLE / ".github" / "workflows"
PROJECT_WORKFLOWS = ROOT / ".github" / "workflows"
VENV_BIN = Path(sys.executable).parent


# --- Git and the network repo ---------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c",
                           "user.email=t@example.com", "-c", "init.defaultBranch=main",
                           "-c", "advice.detachedHead=false", *args],
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A", ".")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def edit(repo: Path, rel: str, old: str, new: str) -> None:
    path = repo / rel
    text = path.read_text()
    assert old in text, f"{old!r} not in {rel}"
    path.write_text(text.replace(old, new, 1))


def ovn_only_repo(target: Path, northbound: str = "embedded", mode: str = "report") -> Path:
    """The example network repo (workflows included) without its Kubernetes manager, whose
    hosting clusters cannot be reached here (its VM there runs on the fabric instead), and
    with the OVN Northbound `northbound`."""
    copy_checkout(EXAMPLE, target)
    managers = target / "provider" / "managers.yaml"
    text = managers.read_text()
    managers.write_text(text[:text.index("---\n# The hosting clusters")])
    edit(target, "provider/classes.yaml", "  k8sManager: kubernetes\n", "")
    edit(target, "tenants/acme/compute.yaml", "  hostingCluster: hosting-a1\n", "")
    if northbound != "embedded":
        edit(target, "provider/managers.yaml", "northbound: embedded", f"northbound: {northbound}")
    set_mode(target, mode)
    set_up_lock_file(target)
    (target / ".gitignore").write_text(".unet/\n")
    return target


def set_up_lock_file(repo: Path) -> None:
    """What a network repo does once: its own unet wheel in the example's lock file."""
    lock = repo / ".github" / "unet-requirements.txt"
    lock.write_text(lock.read_text().replace("YOUR-ORG", "acme-netops").replace(
        "REPLACE-WITH-THE-SHA256-OF-YOUR-UNET-WHEEL", hashlib.sha256(b"unet").hexdigest()))


def set_mode(repo: Path, mode: str) -> None:
    config = repo / "unet.yaml"
    config.write_text(re.sub(r"reconcile: \w+", f"reconcile: {mode}", config.read_text()))


SSH_RULE = """    - protocol: tcp          # PostgreSQL, only from ports in group "web"
      portFrom: 5432
      portTo: 5432
      securityGroup: web
"""


def open_ssh(repo: Path) -> None:
    edit(repo, "tenants/acme/security-groups.yaml", SSH_RULE, SSH_RULE + """    - protocol: tcp
      portFrom: 22
      portTo: 22
      cidr: 0.0.0.0/0
""")


def add_instance(repo: Path, name: str) -> None:
    with (repo / "tenants" / "acme" / "compute.yaml").open("a") as out:
        out.write(f"---\napiVersion: network.osac.io/v1alpha1\nkind: ComputeInstance\n"
                  f"metadata:\n  name: {name}\nspec:\n  networkAttachments:\n"
                  f"    - subnet: web\n      securityGroups: [web]\n")


def break_repo(repo: Path) -> None:
    """An error on a changed line: a second subnet overlapping acme's `web`."""
    with (repo / "tenants" / "acme" / "network.yaml").open("a") as out:
        out.write("---\napiVersion: network.osac.io/v1alpha1\nkind: Subnet\nmetadata:\n"
                  "  name: web-again\nspec:\n  virtualNetwork: prod\n  ipv4Cidr: 10.10.1.0/24\n")


# --- GitHub expressions ---------------------------------------------------------------------


_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)"
                    r"|(?P<op>==|!=|&&|\|\||!|\(|\)|,)"
                    r"|(?P<id>[A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z_][A-Za-z0-9_\-]*)*))")
_STATUS = ("success(", "failure(", "always(", "cancelled(")


class Expression:
    """The part of GitHub's expression language the workflows use."""

    def __init__(self, text: str, context: dict[str, Any], failed: bool) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos, text = 0, text.strip()
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                raise ValueError(f"cannot parse expression {text!r} at {pos}")
            kind = match.lastgroup
            assert kind is not None
            self.tokens.append((kind, match.group(kind)))
            pos = match.end()
        self.pos, self.context, self.failed = 0, context, failed

    def evaluate(self) -> Any:
        value = self._or()
        if self.pos != len(self.tokens):
            raise ValueError(f"trailing tokens {self.tokens[self.pos:]}")
        return value

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self, op: str) -> bool:
        if self._peek() == ("op", op):
            self.pos += 1
            return True
        return False

    def _or(self) -> Any:
        value = self._and()
        while self._take("||"):
            right = self._and()
            value = value if truthy(value) else right
        return value

    def _and(self) -> Any:
        value = self._unary()
        while self._take("&&"):
            right = self._unary()
            value = right if truthy(value) else value
        return value

    def _unary(self) -> Any:
        if self._take("!"):
            return not truthy(self._unary())
        left = self._primary()
        for op in ("==", "!="):
            if self._take(op):
                right = self._primary()
                same = _loose_equal(left, right)
                return same if op == "==" else not same
        return left

    def _primary(self) -> Any:
        token = self._peek()
        if token is None:
            raise ValueError("unexpected end of expression")
        self.pos += 1
        kind, text = token
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text)
        if token == ("op", "("):
            value = self._or()
            assert self._take(")")
            return value
        if kind == "id":
            if text in ("true", "false", "null"):
                return {"true": True, "false": False, "null": None}[text]
            if self._take("("):
                args = []
                while not self._take(")"):
                    args.append(self._or())
                    self._take(",")
                return self._call(text, args)
            value: Any = self.context
            for part in text.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            return value
        raise ValueError(f"unexpected {text!r}")

    def _call(self, name: str, args: list[Any]) -> Any:
        if name == "success":
            return not self.failed
        if name == "failure":
            return self.failed
        if name == "always":
            return True
        if name == "cancelled":
            return False
        if name == "contains":
            return str(args[1]).lower() in str(args[0]).lower()
        if name == "startsWith":
            return str(args[0]).lower().startswith(str(args[1]).lower())
        raise ValueError(f"function {name} is not supported here")


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", 0.0)


def _loose_equal(left: Any, right: Any) -> bool:
    """GitHub's `==`: strings compare ignoring case; values of different types are compared
    as numbers (null and '' are 0, true is 1, a string that is no number is NaN)."""
    if isinstance(left, str) and isinstance(right, str):
        return left.lower() == right.lower()
    if type(left) is type(right):
        return bool(left == right)
    return _number(left) == _number(right)  # NaN equals nothing


def _number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool | int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip() or 0)
        except ValueError:
            return float("nan")
    return float("nan")


def evaluate(text: str, context: dict[str, Any], failed: bool = False) -> Any:
    text = text.strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    return Expression(text, context, failed).evaluate()


def interpolate(value: Any, context: dict[str, Any]) -> str:
    def one(match: re.Match[str]) -> str:
        result = evaluate(match.group(1), context)
        if result is None:
            return ""
        if isinstance(result, bool):
            return "true" if result else "false"
        if isinstance(result, float) and result.is_integer():
            return str(int(result))
        return str(result)

    return re.sub(r"\$\{\{(.*?)\}\}", one, str(value), flags=re.S)


def condition(text: Any, context: dict[str, Any], failed: bool) -> bool:
    if text is None:
        return not failed
    text = str(text).strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    if not any(status in text for status in _STATUS):
        text = f"success() && ({text})"
    return truthy(evaluate(text, context, failed))


# --- running a workflow ---------------------------------------------------------------------


@dataclass
class StepResult:
    id: str
    name: str
    outcome: str  # success, failure, skipped
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""


@dataclass
class WorkflowRun:
    conclusion: str
    steps: list[StepResult]
    installs: list[dict[str, Any]] = field(default_factory=list)

    def step(self, key: str) -> StepResult:
        for step in self.steps:
            if key in (step.id, step.name):
                return step
        raise KeyError(f"no step {key!r} in {[s.name for s in self.steps]}")

    @property
    def summary(self) -> str:
        return "".join(step.summary for step in self.steps)

    @property
    def log(self) -> str:
        return "".join(step.stdout + step.stderr for step in self.steps)

    def annotations(self, level: str) -> list[str]:
        return [line for line in self.log.splitlines() if line.startswith(f"::{level} ")]


def load_workflow(name: str, folder: Path = WORKFLOWS) -> dict[str, Any]:
    data = yaml.safe_load((folder / name).read_text())
    assert isinstance(data, dict)
    return data


def _parse_kv_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if not path.exists():
        return out
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if "<<" in line and "=" not in line.split("<<", 1)[0]:
            key, delimiter = line.split("<<", 1)
            value = []
            for more in lines:
                if more == delimiter:
                    break
                value.append(more)
            out[key] = "\n".join(value)
        elif "=" in line:
            key, value_ = line.split("=", 1)
            out[key] = value_
    return out


def run_workflow(name: str, cwd: Path, tmp: Path, *, github: dict[str, Any],
                 variables: dict[str, str] | None = None,
                 secrets: dict[str, str] | None = None,
                 artifacts: Path | None = None, api_state: Path | None = None,
                 before_step: dict[str, Callable[[], None]] | None = None,
                 workflows: Path = WORKFLOWS, origin: Path | None = None,
                 timeout: float = 180) -> WorkflowRun:
    """Run the (single) job of workflow `name` (from the folder `workflows`: the example's,
    or a checkout's own copy, as GitHub runs a pull request's) in `cwd`, as GitHub would."""
    workflow = load_workflow(name, workflows)
    (job_name, job), = workflow["jobs"].items()
    tmp.mkdir(parents=True, exist_ok=True)
    runner_temp = tmp / "runner-temp"
    runner_temp.mkdir(exist_ok=True)
    github = {"workspace": str(cwd), "token": "fake-token", "repository": "acme/network",
              "server_url": "https://github.com", "run_id": "5151", "job": job_name, **github}
    context: dict[str, Any] = {"github": github, "vars": variables or {},
                               "secrets": secrets or {}, "steps": {},
                               "runner": {"temp": str(runner_temp), "os": "Linux"}, "env": {}}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "UNET_", "RUNNER_"))}
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", CI="true",
               GITHUB_ACTIONS="true", GITHUB_WORKSPACE=str(cwd), RUNNER_TEMP=str(runner_temp),
               GITHUB_SHA=github.get("sha", ""), GITHUB_REF_NAME=github.get("ref_name", ""),
               GITHUB_EVENT_NAME=github.get("event_name", ""), NO_COLOR="1")
    for scope in (workflow.get("env") or {}, job.get("env") or {}):
        for key, value in scope.items():
            context["env"] = {**context["env"]}
            env[key] = context["env"][key] = interpolate(value, context)
    if "if" in job and not condition(job["if"], context, False):
        return WorkflowRun("skipped", [])
    failed = False
    results: list[StepResult] = []
    install_log = tmp / "installs.jsonl"
    install_log.write_text("")
    for index, step in enumerate(job["steps"]):
        step_id = step.get("id", f"step{index}")
        label = step.get("name") or step.get("uses") or step_id
        if not condition(step.get("if"), context, failed):
            result = StepResult(step_id, label, "skipped")
        else:
            if before_step and label in before_step:
                before_step[label]()
            step_env = dict(env)
            for key, value in (step.get("env") or {}).items():
                step_env[key] = interpolate(value, {**context, "env": {**context["env"]}})
            files = {key: tmp / f"{index}.{key.lower()}" for key in
                     ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_STEP_SUMMARY")}
            for key, path in files.items():
                path.write_text("")
                step_env[key] = str(path)
            if step.get("id") == "install":  # pip stands in: unet is the venv's
                step_env["PATH"] = f"{_install_stand_in(tmp)}{os.pathsep}{step_env['PATH']}"
                step_env["FAKE_INSTALL_LOG"] = str(install_log)
            if "run" in step:
                script = tmp / f"{index}.sh"
                script.write_text(interpolate(step["run"], context))
                done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail",
                                       str(script)], cwd=cwd, env=step_env,
                                      capture_output=True, text=True, timeout=timeout,
                                      check=False)
                result = StepResult(step_id, label,
                                    "success" if done.returncode == 0 else "failure",
                                    done.stdout, done.stderr, done.returncode)
            else:
                result = _action(step, step_id, label, cwd, step_env, context, artifacts,
                                 api_state, origin, tmp, timeout)
            result.outputs = _parse_kv_file(files["GITHUB_OUTPUT"])
            result.summary = files["GITHUB_STEP_SUMMARY"].read_text()
            for key, value in _parse_kv_file(files["GITHUB_ENV"]).items():
                env[key] = value
        if result.outcome == "failure" and not step.get("continue-on-error"):
            failed = True
        context["steps"] = {**context["steps"], step_id: {
            "outputs": result.outputs, "outcome": result.outcome,
            "conclusion": "success" if result.outcome == "failure"
            and step.get("continue-on-error") else result.outcome}}
        results.append(result)
    installs = [json.loads(line) for line in install_log.read_text().splitlines()]
    return WorkflowRun("failure" if failed else "success", results, installs)


_INSTALL_STAND_IN = """#!{python}
import hashlib, json, os, sys
args = sys.argv[1:]
entry = {{"argv": args, "cwd": os.getcwd(), "requirements": {{}}}}
for flag, value in zip(args, args[1:]):
    if flag in ("-r", "--requirement"):
        with open(value, "rb") as f:
            entry["requirements"][value] = hashlib.sha256(f.read()).hexdigest()
with open(os.environ["FAKE_INSTALL_LOG"], "a") as log:
    log.write(json.dumps(entry) + "\\n")
"""


def _install_stand_in(tmp: Path) -> Path:
    """A folder whose `python` records how it was called and installs nothing."""
    folder = tmp / "install-stand-in"
    folder.mkdir(exist_ok=True)
    for name in ("python", "python3"):
        path = folder / name
        path.write_text(_INSTALL_STAND_IN.format(python=sys.executable))
        path.chmod(0o755)
    return folder


def _action(step: dict[str, Any], step_id: str, label: str, cwd: Path, env: dict[str, str],
            context: dict[str, Any], artifacts: Path | None, api_state: Path | None,
            origin: Path | None, tmp: Path, timeout: float) -> StepResult:
    uses = str(step["uses"]).split("@", 1)[0]
    if uses in ("actions/cache", "actions/cache/restore"):  # nothing is kept between local runs
        return StepResult(step_id, label, "success")
    inputs = {k: interpolate(v, context) for k, v in (step.get("with") or {}).items()}
    if uses == "actions/checkout" and origin is not None:
        ref = inputs.get("ref") or context["github"]["sha"]
        git(cwd.parent, "clone", "-q", str(origin), str(cwd))
        branch = subprocess.run(["git", "-C", str(cwd), "rev-parse", "-q", "--verify",
                                 f"refs/remotes/origin/{ref}"], capture_output=True, check=False)
        git(cwd, "checkout", "-q", "--detach", f"origin/{ref}" if branch.returncode == 0 else ref)
        return StepResult(step_id, label, "success", f"checked out {ref}\n")
    if uses in ("actions/checkout", "actions/setup-python"):
        return StepResult(step_id, label, "success")  # the test's checkout, this venv
    if uses == "actions/upload-artifact":
        assert artifacts is not None
        target = artifacts / inputs["name"]
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(cwd / inputs["path"], target)
        return StepResult(step_id, label, "success")
    if uses == "actions/download-artifact":
        assert artifacts is not None
        source = artifacts / inputs["name"]
        if not source.is_dir():
            return StepResult(step_id, label, "failure",
                              stderr=f"Artifact not found for name: {inputs['name']}")
        shutil.copytree(source, cwd / inputs.get("path", "."), dirs_exist_ok=True)
        return StepResult(step_id, label, "success")
    if uses == "actions/github-script":
        assert api_state is not None
        return _github_script(inputs["script"], step_id, label, cwd, env, api_state, tmp,
                              timeout, context["github"].get("event", {}))
    raise AssertionError(f"no stand-in for action {uses}")


_NODE_HARNESS = """
const fs = require('fs');
const statePath = process.env.FAKE_GITHUB_STATE;
const state = JSON.parse(fs.readFileSync(statePath, 'utf8'));
const save = () => fs.writeFileSync(statePath, JSON.stringify(state, null, 1));
const bot = { login: 'github-actions[bot]', type: 'Bot' };
const notFound = (what) => Object.assign(new Error(`Not Found: ${what}`), { status: 404 });
const github = {
  paginate: async (method, params) => (await method(params)).data,
  rest: {
    issues: {
      listComments: async (p) => ({
        data: state.comments.filter((c) => c.issue_number === p.issue_number) }),
      createComment: async (p) => {
        const c = { id: state.next_id++, issue_number: p.issue_number, body: p.body, user: bot };
        state.comments.push(c); state.calls.push('create'); return { data: c };
      },
      updateComment: async (p) => {
        const c = state.comments.find((x) => x.id === p.comment_id);
        if (!c) throw new Error('no comment ' + p.comment_id);
        c.body = p.body; state.calls.push('update'); return { data: c };
      },
    },
    pulls: {
      get: async (p) => {
        const pr = state.pulls[String(p.pull_number)];
        if (!pr) throw notFound('pull ' + p.pull_number);
        return { data: pr };
      },
      list: async (p) => ({
        data: Object.values(state.pulls).filter((pr) => (pr.state || 'open') === (p.state || 'open')
          && (!p.head || `${pr.head.repo.owner.login}:${pr.head.ref}` === p.head)) }),
    },
    actions: {
      getWorkflow: async (p) => {
        const w = (state.workflows || {})[String(p.workflow_id)];
        if (!w) throw notFound('workflow ' + p.workflow_id);
        return { data: w };
      },
      listWorkflowRuns: async (p) => {
        const runs = ((state.runs || {})[String(p.workflow_id)] || []).filter(
          (r) => (!p.branch || r.head_branch === p.branch) && (!p.status || r.status === p.status));
        const page = runs.slice(0, p.per_page || 30);
        return { data: { total_count: runs.length, workflow_runs: page } };
      },
      listJobsForWorkflowRun: async (p) => {
        const jobs = (state.jobs || {})[String(p.run_id)] || [];
        return { data: { total_count: jobs.length, jobs } };
      },
    },
  },
};
const context = { repo: { owner: 'acme', repo: 'network' },
                  payload: JSON.parse(process.env.FAKE_GITHUB_EVENT || '{}') };
const output = (name, value) => {
  const delimiter = 'ghadelimiter_' + Math.random().toString(16).slice(2);
  fs.appendFileSync(process.env.GITHUB_OUTPUT,
                    `${name}<<${delimiter}\\n${value}\\n${delimiter}\\n`);
};
const core = {
  info: (m) => console.log(m),
  notice: (m) => console.log('::notice::' + m),
  warning: (m) => console.log('::warning::' + m),
  setOutput: output,
  setFailed: (m) => { console.log('::error::' + m); process.exitCode = 1; },
};
(async () => {
SCRIPT
})().then(save, (e) => { console.error(e); save(); process.exitCode = 1; });
"""


def _github_script(script: str, step_id: str, label: str, cwd: Path, env: dict[str, str],
                   api_state: Path, tmp: Path, timeout: float,
                   event: dict[str, Any]) -> StepResult:
    node = shutil.which("node")
    assert node is not None, "the github-script steps run with Node.js (node), not installed"
    harness = tmp / f"{step_id}.js"
    harness.write_text(_NODE_HARNESS.replace("SCRIPT", script))
    done = subprocess.run([node, str(harness)], cwd=cwd,
                          env={**env, "FAKE_GITHUB_STATE": str(api_state),
                               "FAKE_GITHUB_EVENT": json.dumps(event)},
                          capture_output=True, text=True, timeout=timeout, check=False)
    return StepResult(step_id, label, "success" if done.returncode == 0 else "failure",
                      done.stdout, done.stderr, done.returncode)


PLAN_WORKFLOW_ID = 11


def new_api_state(path: Path, pulls: dict[str, Any],
                  comments: list[dict[str, Any]] | None = None,
                  runs: dict[str, list[dict[str, Any]]] | None = None,
                  jobs: dict[str, list[dict[str, Any]]] | None = None) -> Path:
    """The fake GitHub: pull requests by number, comments, the repository's workflows (by
    file name), their runs (newest first) and the jobs of a run (by run id)."""
    workflows = {name: {"id": PLAN_WORKFLOW_ID + i, "path": f".github/workflows/{name}"}
                 for i, name in enumerate(("unet-plan.yml", "unet-plan-comment.yml",
                                           "unet-apply.yml", "unet-reconcile.yml"))}
    path.write_text(json.dumps({"comments": comments or [], "pulls": pulls, "next_id": 100,
                                "calls": [], "workflows": workflows, "runs": runs or {},
                                "jobs": jobs or {}}))
    return path


def pull(number: int, head: str, base: str = "main", branch: str = "feature",
         owner: str = "acme") -> dict[str, Any]:
    """A pull request as the API gives it (the fields the workflows read)."""
    return {"number": number, "state": "open",
            "head": {"sha": head, "ref": branch,
                     "repo": {"full_name": f"{owner}/network", "owner": {"login": owner}}},
            "base": {"ref": base}}


def api(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]
