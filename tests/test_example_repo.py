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
    # Its README tells a newcomer what validate says: both warnings, by code.
    readme = " ".join((EXAMPLE / "README.md").read_text().split())
    assert "exits 0 with two warnings" in readme
    assert all(f"`{d.code}`" in readme for d in result.diagnostics)


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
    said = (ROOT / "README.md").read_text().split("make demo", 1)[1].split("make test", 1)[0]
    assert all(f"unet show {argv[1]}" in said for argv in demo if argv[0] == "show"), \
        "the README's make demo says what it runs"
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


def test_a_tenants_comment_of_what_it_uses_counts_its_manifests() -> None:
    """acme's quotas say what it "currently uses": a reader sizes the quotas by it, so it
    counts what tenants/acme/ declares (web-k1 once went uncounted)."""
    import yaml

    for tenant_file in sorted((EXAMPLE / "provider" / "tenants").glob("*.yaml")):
        said = re.search(r"currently uses (.*?)\)", " ".join(
            line.strip(" #") for line in tenant_file.read_text().splitlines()))
        if said is None:
            continue
        claimed = {kind if not kind.endswith("s") or kind in KINDS else kind[:-1]: int(n)
                   for n, kind in re.findall(r"(\d+) (\w+)", said.group(1))}
        counted: dict[str, int] = {}
        for path in (EXAMPLE / "tenants" / tenant_file.stem).rglob("*.yaml"):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    counted[doc["kind"]] = counted.get(doc["kind"], 0) + 1
        assert claimed == {kind: counted.get(kind, 0) for kind in claimed}, tenant_file.name
