"""A saved plan is applied only while the repo and the backends still give exactly it.

`unet apply plan.json` plans again, from the revision the plan names, against the
backends as they are, with every check of a fresh plan (names taken by others, rows of
others inside ours, addresses held); it applies only when that plan is the saved one.
A plan file edited by hand, a repo changed since, a malformed file: each is refused with a
plain message, and nothing is written. Real ovsdb-server; unet as a subprocess.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from unet.reconciler.plan_io import document_text, plan_digest

from .support.ovnlab import OvnLab
from .support.ovnrun import add_instance, apply, dump, plan, unet
from .test_plan_golden import edit_text


def _saved(tmp_path: Path, repo: Path) -> Path:
    saved = tmp_path / "plan.json"
    made = plan(tmp_path, repo, "-o", str(saved))
    assert made.returncode == 0, made.stdout + made.stderr
    return saved


def _apply_saved(tmp_path: Path, saved: Path) -> tuple[int, str]:
    result = unet(tmp_path, "apply", str(saved), "--auto-approve")
    return result.returncode, result.stdout + result.stderr


def test_a_saved_plan_checks_names_taken_since_it_was_made(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    (repo / "tenants" / "acme" / "extra.yaml").write_text(
        "apiVersion: network.osac.io/v1alpha1\nkind: Subnet\nmetadata:\n  name: extra\n"
        "spec:\n  virtualNetwork: prod\n  ipv4Cidr: 10.10.20.0/24\n")
    saved = _saved(tmp_path, repo)
    lab.nbctl("ls-add", "unet.acme.extra")  # someone else takes the name meanwhile
    before = dump(lab.nb_remote)
    code, output = _apply_saved(tmp_path, saved)
    assert code == 1
    assert "NAME_CONFLICT" in output and "Logical_Switch named 'unet.acme.extra'" in output
    assert dump(lab.nb_remote) == before, "no second switch of that name"


def test_a_hand_edited_plan_is_refused_even_with_its_digest_made_again(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    edit_text(repo, "tenants/acme/security-groups.yaml", "cidr: 192.0.2.0/24",
              "cidr: 192.0.2.0/25")
    saved = _saved(tmp_path, repo)
    document = json.loads(saved.read_text())
    narrow = " && ip4.src == 192.0.2.0/25 && tcp.dst == 22"
    [acl] = [c for c in document["backend_changes"]
             if c["after"] and narrow in str(c["after"]["fields"].get("match"))]
    acl["after"]["fields"]["match"] = acl["after"]["fields"]["match"].replace(
        narrow, " && tcp.dst == 22")  # SSH from anywhere
    saved.write_text(json.dumps(document))
    before = dump(lab.nb_remote)

    code, output = _apply_saved(tmp_path, saved)
    assert code == 1
    assert "the plan file was changed after unet wrote it" in output
    document["plan_digest"] = plan_digest(document)
    saved.write_text(json.dumps(document))
    code, output = _apply_saved(tmp_path, saved)
    assert code == 1
    assert "is not the plan that the repo" in output and "nothing was applied" in output
    assert dump(lab.nb_remote) == before


def test_a_saved_plan_is_refused_once_the_repo_changed(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    compute = repo / "tenants" / "acme" / "compute.yaml"
    original = compute.read_text()
    add_instance(repo, "web-7")
    saved = _saved(tmp_path, repo)
    add_instance(repo, "web-8")  # after planning: the plan would not be what the repo says
    before = dump(lab.nb_remote)
    code, output = _apply_saved(tmp_path, saved)
    assert code == 1 and "make a new plan" in output.lower()
    assert dump(lab.nb_remote) == before

    compute.write_text(original)
    add_instance(repo, "web-7")
    code, output = _apply_saved(tmp_path, saved)
    assert code == 0, output
    assert "Apply complete: 1 created, 2 updated, 0 deleted" in output


MALFORMED = {
    "a JSON list": "[]",
    "not JSON": "plan: yes\n",
    "an empty object": "{}",
    "no digest": json.dumps({"format_version": "1.1", "mode": "live"}),
    "a string where an object belongs": None,  # built below: a valid digest, bad content
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_plan_file_is_a_clear_error(name: str, tmp_path: Path) -> None:
    text = MALFORMED[name]
    if text is None:
        document = {"format_version": "1.1", "mode": "live", "valid": True, "inputs": "here",
                    "installation": "example"}
        document["plan_digest"] = plan_digest(document)
        text = json.dumps(document)
    saved = tmp_path / "plan.json"
    saved.write_text(text)
    for command in (("apply", str(saved), "--auto-approve"), ("show", "plan", str(saved))):
        result = unet(tmp_path, *command)
        assert result.returncode == 1, result.stdout
        assert result.stderr.startswith(f"unet: cannot read the plan {saved}: "), result.stderr


def test_a_plan_edited_only_where_people_read_it_is_refused(lab: OvnLab, repo: Path,
                                                            tmp_path: Path) -> None:
    """What the prompt shows must be what is applied: counts, exposure and diagnostics too."""
    assert apply(tmp_path, repo).returncode == 0
    _open_to_the_world(repo)
    saved = _saved(tmp_path, repo)
    document = json.loads(saved.read_text())
    assert document["exposure"]["rules_opened"], "the change opens a port to the world"
    document["exposure"]["rules_opened"] = []
    document["counts"] = dict.fromkeys(document["counts"], 0)
    saved.write_text(document_text(document))
    before = dump(lab.nb_remote)
    code, output = _apply_saved(tmp_path, saved)
    assert code == 1 and "first difference: counts" in output
    assert dump(lab.nb_remote) == before


def _open_to_the_world(repo: Path) -> None:
    """The office's SSH rule becomes tcp/2222 from anywhere (world SSH itself the example's
    guardrail refuses)."""
    edit_text(repo, "tenants/acme/security-groups.yaml",
              "portFrom: 22\n      portTo: 22\n      cidr: 192.0.2.0/24",
              "portFrom: 2222\n      portTo: 2222\n      cidr: 0.0.0.0/0")


def _odd(document: dict[str, Any], name: str) -> str:
    if name == "deeply nested":
        return "[" * 200_000 + "]" * 200_000
    if name == "no actions":
        document["resources"][0]["actions"] = []
    elif name == "an unknown action":
        document["resources"][0]["actions"] = ["explode"]
    elif name == "an exposure entry without its rule":
        document["exposure"]["rules_opened"] = [{"owner": "x"}]
    elif name == "a change labelled with a number":
        change = next(c for c in document["backend_changes"] if c["table"] == "ACL"
                      and c["after"])
        change["label"] = 7
    return document_text(document)


@pytest.mark.parametrize("name", ["deeply nested", "no actions", "an unknown action",
                                  "an exposure entry without its rule",
                                  "a change labelled with a number"])
def test_a_plan_with_its_digest_made_again_but_odd_content_is_a_clear_error(
        name: str, example_copy: Path, tmp_path: Path) -> None:
    made = tmp_path / "made.json"
    subprocess.run(["git", "init", "-q", str(example_copy)], check=True)
    subprocess.run(["git", "-C", str(example_copy), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(example_copy), "-c", "user.name=t", "-c",
                    "user.email=t@example.com", "commit", "-qm", "base"], check=True)
    _open_to_the_world(example_copy)
    assert unet(tmp_path, "plan", str(example_copy), "--base", "HEAD", "-o", str(made)) \
        .returncode == 0
    saved = tmp_path / "odd.json"
    saved.write_text(_odd(json.loads(made.read_text()), name))
    shown = unet(tmp_path, "show", "plan", str(saved))
    assert shown.returncode == 1 and shown.stdout == ""
    assert shown.stderr.startswith(f"unet: cannot read the plan {saved}: "), shown.stderr
    applied = unet(tmp_path, "apply", str(saved), "--auto-approve")  # no traceback either
    assert applied.returncode == 1 and applied.stderr.startswith("unet: "), applied.stderr
