"""A saved plan is applied only while the repo and the backends still give exactly it.

`unet apply plan.json` plans again, from the revision the plan names, against the
backends as they are, with every check of a fresh plan (names taken by others, rows of
others inside ours, addresses held); it applies only when that plan is the saved one.
A plan file edited by hand, a repo changed since, a malformed file: each is refused with a
plain message, and nothing is written. Real ovsdb-server; unet as a subprocess.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.plan_io import plan_digest

from .ovnlab import OvnLab
from .ovnrun import add_instance, apply, dump, plan, unet
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
