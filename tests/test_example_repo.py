"""The example network repo validates clean, from the folder and from Git objects."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from reconciler.cli import main
from reconciler.validate import validate_repo

from .conftest import EXAMPLE


def test_example_is_valid_with_its_two_standing_warnings() -> None:
    """A pending attachment (web-3 is not declared yet) and web's ICMP rule, which web-k1's
    hosting cluster cannot express."""
    result = validate_repo(EXAMPLE)
    assert result.ok, [d for d in result.diagnostics if d.is_error]
    assert sorted(d.code for d in result.diagnostics) == ["POLICY_RULE_NOT_REALISED",
                                                          "TARGET_PENDING"]
    kinds = {m.kind for m in result.manifests}
    assert len(kinds) == 16, "the example uses every kind"


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
