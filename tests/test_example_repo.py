"""The example network repo validates clean, from the folder and from Git objects."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from unet.reconciler.cli import main
from unet.reconciler.models import KINDS
from unet.reconciler.validate import validate_repo

from .conftest import EXAMPLE, ROOT


def test_example_is_valid_with_its_two_standing_warnings() -> None:
    """A pending attachment (web-3 is not declared yet) and web's ICMP rule, which web-k1's
    hosting cluster cannot express."""
    result = validate_repo(EXAMPLE)
    assert result.ok, [d for d in result.diagnostics if d.is_error]
    assert sorted(d.code for d in result.diagnostics) == ["POLICY_RULE_NOT_REALISED",
                                                          "TARGET_PENDING"]
    kinds = {m.kind for m in result.manifests}
    assert kinds == set(KINDS), "the example uses every kind"


def test_cli_exit_code_and_json(capsys) -> None:
    assert main(["validate", str(EXAMPLE), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True
    assert report["summary"]["warnings"] == 2
    assert sorted(d["code"] for d in report["diagnostics"]) == ["POLICY_RULE_NOT_REALISED",
                                                                "TARGET_PENDING"]


def test_rev_mode_reads_git_objects_not_the_work_tree(example_copy: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(example_copy), *args], check=True,
                       capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "base")
    (example_copy / "unet.yaml").write_text("not: [valid")  # only the work tree is broken
    assert validate_repo(example_copy, "HEAD").ok
    assert not validate_repo(example_copy).ok


def _demo_commands() -> list[list[str]]:
    """The unet commands of the Makefile's `demo` target, in order."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    return [line.split()[1:] for line in recipe.splitlines()[1:]
            if line.startswith("\t$(BIN)/unet ")]


def test_the_readmes_next_step_after_the_demo_shows_what_it_says(example_copy: Path) -> None:
    """`make demo`, then the README's `cd examples/network-repo && unet plan ...`: the plan
    of what the demo applied, so no change at all (not the hosting clusters' objects the
    demo never applied)."""
    demo = _demo_commands()
    assert [argv[0] for argv in demo] == ["validate", "apply", "plan", "show", "show"]
    for argv in demo:
        argv = [str(example_copy) if a == "examples/network-repo" else a for a in argv]
        done = subprocess.run([sys.executable, "-m", "unet.reconciler.cli", *argv],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    readme = (ROOT / "README.md").read_text()
    [step] = re.findall(r"`cd examples/network-repo && (unet plan[^`]*)`", readme)
    done = subprocess.run([sys.executable, "-m", "unet.reconciler.cli", *step.split()[1:]],
                          cwd=example_copy, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No changes" in done.stdout and "0 to create" in done.stdout, done.stdout
