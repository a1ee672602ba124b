"""Guardrails: a provider's policy judged over the reachability of a revision, in `unet
validate` and in every plan, said at the manifest line that grants the access.

The repo is `examples/broken/guardrail-denied` made valid: workload acme/web-1 with the
public address 203.0.113.10, group `admin` whose SSH rule is open to one office network,
and the guardrail no-world-ssh (deny tcp/22 from 0.0.0.0/0).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import netaddr
import pytest

from unet.reconciler import guardrails
from unet.reconciler.cli import main
from unet.reconciler.diagnostics import Diagnostic
from unet.reconciler.validate import Validation, against_base, validate_repo

from .conftest import EXAMPLE, ROOT, copy_checkout

CASE = ROOT / "examples" / "broken" / "guardrail-denied"
OFFICE = "cidr: 192.0.2.0/24"
WORLD = "cidr: 0.0.0.0/0"
GUARDRAIL = """apiVersion: network.osac.io/v1alpha1
kind: Guardrail
metadata: {name: no-world-ssh}
spec:
  action: deny            # or warn
  message: SSH is never open to the internet
  match:
    from: 0.0.0.0/0       # a source covering this CIDR
    protocol: tcp
    ports: [22]
"""


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                    "user.email=t@example.com", *args], check=True, capture_output=True)


def commit(repo: Path) -> None:
    git(repo, "add", "-A", ".")
    git(repo, "commit", "-q", "--allow-empty", "-m", "change")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The case with SSH open to the office only: valid, committed once."""
    root = tmp_path / "repo"
    shutil.copytree(CASE, root, ignore=shutil.ignore_patterns("expected.txt"))
    (root / "provider" / "guardrails.yaml").write_text(GUARDRAIL)
    edit(root, "tenants/acme/security-groups.yaml", WORLD, OFFICE)
    git(root, "init", "-q")
    commit(root)
    return root


def edit(repo: Path, file: str, old: str, new: str) -> None:
    path = repo / file
    text = path.read_text()
    assert old in text, (file, old)
    path.write_text(text.replace(old, new))


def guardrail(repo: Path, **spec: str) -> None:
    """Add lines under the guardrail's spec (YAML text per field)."""
    extra = "".join(f"  {key}: {value}\n" for key, value in spec.items())
    (repo / "provider" / "guardrails.yaml").write_text(GUARDRAIL + extra)


def found(result: Validation) -> list[Diagnostic]:
    return [d for d in result.diagnostics if d.code in guardrails.CODES]


def line_of(repo: Path, file: str, text: str) -> int:
    return next(i for i, line in enumerate((repo / file).read_text().splitlines(), 1)
                if text in line)


def unet(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main([*argv, "--no-cache"]) if argv[0] != "plan" else main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    return code, out + err


# -- the done-when cases ----------------------------------------------------------------------


def test_the_repo_as_committed_passes(repo: Path) -> None:
    result = validate_repo(repo)
    assert result.ok and found(result) == [], result.diagnostics


def test_opening_ssh_to_the_world_is_denied_at_the_rule(repo: Path) -> None:
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, WORLD)
    result = validate_repo(repo)
    [denied] = found(result)
    assert denied.code == "GUARDRAIL_DENIED" and denied.is_error
    assert denied.file == "tenants/acme/security-groups.yaml"
    assert denied.line == line_of(repo, denied.file, "- protocol: tcp")
    assert denied.path == "/spec/ingress/0"
    assert "SSH is never open to the internet" in denied.message
    assert "acme/web-1/0" in denied.message and "203.0.113.10" in denied.message
    assert "tcp/22 from internet" in denied.message
    assert "tenants/acme/compute.yaml" in str(denied.hint)  # the membership, too


def test_a_pull_request_plan_is_refused_at_the_rule_it_adds(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, WORLD)
    commit(repo)
    code, out = unet(capsys, "plan", str(repo), "--base", "HEAD~1", "--head", "HEAD",
                     "--no-cache")
    assert code == 1
    assert "tenants/acme/security-groups.yaml:9:5: error GUARDRAIL_DENIED" in out
    assert "no plan" in out


def test_joining_a_group_that_opens_ssh_to_the_world_points_at_the_membership(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Base: the workload with a public address is in `web`; `admin` opens SSH to the
    world but has no member. Head: the workload joins `admin`."""
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, WORLD)
    edit(repo, "tenants/acme/compute.yaml", "[admin]", "[web]")
    with (repo / "tenants/acme/security-groups.yaml").open("a") as out:
        out.write("---\napiVersion: network.osac.io/v1alpha1\nkind: SecurityGroup\n"
                  "metadata: {name: web}\nspec: {virtualNetwork: prod}\n")
    commit(repo)
    edit(repo, "tenants/acme/compute.yaml", "[web]", "[web, admin]")
    commit(repo)
    code, out = unet(capsys, "plan", str(repo), "--base", "HEAD~1", "--head", "HEAD",
                     "--no-cache", "--format", "json")
    assert code == 1
    [denied] = [d for d in json.loads(out.split("\nunet:")[0])["diagnostics"]
                if d["code"] == "GUARDRAIL_DENIED"]
    assert denied["file"] == "tenants/acme/compute.yaml"
    assert denied["path"] == "/spec/networkAttachments/0/securityGroups/1"
    assert denied["line"] == line_of(repo, "tenants/acme/compute.yaml", "securityGroups")
    assert "rule at tenants/acme/security-groups.yaml:9" in denied["hint"]


def test_attaching_a_public_address_points_at_the_attachment(repo: Path) -> None:
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, WORLD)
    attachment = (repo / "tenants/acme/external.yaml").read_text().split("---\n")[1]
    base_text = (repo / "tenants/acme/external.yaml").read_text().split("---\n")[0]
    (repo / "tenants/acme/external.yaml").write_text(base_text)
    commit(repo)
    base = validate_repo(repo)
    (repo / "tenants/acme/external.yaml").write_text(base_text + "---\n" + attachment)
    head = validate_repo(repo)
    [denied] = found(against_base(head, base))
    assert (denied.file, denied.path) == ("tenants/acme/external.yaml", "/spec/target")


def test_warn_is_a_warning_and_the_plan_goes_on(repo: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "provider" / "guardrails.yaml").write_text(
        GUARDRAIL.replace("action: deny", "action: warn"))
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, WORLD)
    [warned] = found(validate_repo(repo))
    assert warned.code == "GUARDRAIL_WARNED" and not warned.is_error
    code, out = unet(capsys, "validate", str(repo))
    assert code == 0 and "warning GUARDRAIL_WARNED" in out
    commit(repo)
    code, out = unet(capsys, "plan", str(repo), "--base", "HEAD~1", "--head", "HEAD",
                     "--no-cache")
    assert code == 0 and "GUARDRAIL_WARNED" in out


# -- what matches ---------------------------------------------------------------------------


def test_a_world_rule_on_a_workload_without_public_address_does_not_fire(repo: Path) -> None:
    """From 0.0.0.0/0 it is reachable from its network only."""
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, WORLD)
    text = (repo / "tenants/acme/external.yaml").read_text()
    (repo / "tenants/acme/external.yaml").write_text(text.split("---\n")[0])
    assert found(validate_repo(repo)) == []


@pytest.mark.parametrize(("cidr", "fires"), [
    ("0.0.0.0/1", False),  # half of the internet does not cover 0.0.0.0/0
    ("0.0.0.0/0", True),
])
def test_from_fires_on_sources_covering_it(repo: Path, cidr: str, fires: bool) -> None:
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, f"cidr: {cidr}")
    assert bool(found(validate_repo(repo))) is fires


def test_a_narrow_from_fires_on_a_rule_that_covers_it(repo: Path) -> None:
    (repo / "provider" / "guardrails.yaml").write_text(
        GUARDRAIL.replace("from: 0.0.0.0/0 ", "from: 192.0.2.128/25"))
    assert [d.code for d in found(validate_repo(repo))] == ["GUARDRAIL_DENIED"]


@pytest.mark.parametrize(("rule", "fires"), [
    ("protocol: all\n      cidr: 0.0.0.0/0", True),  # all admits tcp/22
    ("protocol: tcp\n      cidr: 0.0.0.0/0", True),  # every tcp port
    ("protocol: tcp\n      portFrom: 20\n      portTo: 30\n      cidr: 0.0.0.0/0", True),
    ("protocol: tcp\n      portFrom: 443\n      portTo: 443\n      cidr: 0.0.0.0/0", False),
    ("protocol: udp\n      portFrom: 22\n      portTo: 22\n      cidr: 0.0.0.0/0", False),
    ("protocol: icmp\n      cidr: 0.0.0.0/0", False),
])
def test_ports_match_what_the_opening_admits(repo: Path, rule: str, fires: bool) -> None:
    _rule(repo, rule)
    assert bool(found(validate_repo(repo))) is fires


def test_protocol_all_matches_any_traffic_and_icmp_any_type(repo: Path) -> None:
    _rule(repo, "protocol: icmp\n      icmpType: 8\n      cidr: 0.0.0.0/0")
    (repo / "provider" / "guardrails.yaml").write_text(
        GUARDRAIL.replace("protocol: tcp\n    ports: [22]", "protocol: icmp"))
    assert len(found(validate_repo(repo))) == 1
    (repo / "provider" / "guardrails.yaml").write_text(
        GUARDRAIL.replace("protocol: tcp\n    ports: [22]", "protocol: all"))
    assert len(found(validate_repo(repo))) == 1


def test_ports_are_the_workloads_own_after_a_port_forward(repo: Path) -> None:
    _rule(repo, "protocol: tcp\n      cidr: 0.0.0.0/0")
    with (repo / "tenants/acme/external.yaml").open("a") as out:
        out.write("  ports:\n    - {protocol: tcp, externalPort: 2222, internalPort: 22}\n")
    [denied] = found(validate_repo(repo))
    assert "tcp/22 from internet via 203.0.113.10 tcp/2222" in denied.message
    assert denied.path == "/spec/ingress/0"
    edit(repo, "tenants/acme/external.yaml", "internalPort: 22", "internalPort: 443")
    assert found(validate_repo(repo)) == []


def test_an_ipv4_from_never_matches_an_ipv6_opening(repo: Path) -> None:
    _rule(repo, "protocol: tcp\n      cidr: 0.0.0.0/0")
    result = validate_repo(repo)
    [violation] = result.violations
    v6 = replace(violation.opening, family=6, space=netaddr.IPNetwork("::/0"))
    rail = violation.guardrail
    assert guardrails.violates(rail, violation.nic, violation.opening)
    assert not guardrails.violates(rail, violation.nic, v6)


# -- selectors and exemptions ------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "fires"), [
    ({"protects": "{tenants: [acme]}"}, True),
    ({"protects": "{networks: [prod]}"}, True),
    ({"protects": "{networks: [staging]}"}, False),
    ({"protects": "{groups: [admin]}"}, True),
    ({"protects": "{groups: [web]}"}, False),
    ({"protects": "{tenants: [acme], groups: [web]}"}, False),  # every list must match
    ({"exemptions": "[{tenant: acme, reason: lab}]"}, False),
    ({"exemptions": "[{tenant: acme, workloads: [web-1]}]"}, False),
    ({"exemptions": "[{tenant: acme, workloads: [bastion]}]"}, True),
])
def test_selectors_and_exemptions(repo: Path, spec: dict[str, str], fires: bool) -> None:
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, WORLD)
    guardrail(repo, **spec)
    result = validate_repo(repo)
    assert [d.code for d in result.diagnostics if d.is_error] == (
        ["GUARDRAIL_DENIED"] if fires else []), result.diagnostics


# -- the guardrail itself ------------------------------------------------------------------


def test_a_guardrail_in_a_tenant_folder_is_refused(repo: Path) -> None:
    shutil.move(repo / "provider" / "guardrails.yaml", repo / "tenants/acme/guardrails.yaml")
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, WORLD)
    result = validate_repo(repo)
    assert [d.code for d in result.diagnostics] == ["KIND_NOT_ALLOWED_HERE"]
    assert "only under provider/" in result.diagnostics[0].message


@pytest.mark.parametrize(("old", "new", "code", "path"), [
    ("from: 0.0.0.0/0 ", "from: everyone", "CIDR_INVALID", "/spec/match/from"),
    ("from: 0.0.0.0/0 ", "from: 10.0.0.1/8", "CIDR_NOT_CANONICAL", "/spec/match/from"),
    ("protocol: tcp", "protocol: icmp", "RULE_PORTS_INVALID", "/spec/match/ports"),
    ("ports: [22]", "ports: [0]", "SCHEMA_TYPE", "/spec/match/ports/0"),
    ("action: deny", "action: block", "SCHEMA_TYPE", "/spec/action"),
])
def test_a_bad_guardrail_says_so_and_judges_nothing(repo: Path, old: str, new: str, code: str,
                                                    path: str) -> None:
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, WORLD)
    edit(repo, "provider/guardrails.yaml", old, new)
    result = validate_repo(repo)
    assert [(d.code, d.path) for d in result.diagnostics] == [(code, path)]


def test_a_protected_or_exempt_tenant_must_exist(repo: Path) -> None:
    guardrail(repo, protects="{tenants: [acmee]}", exemptions="[{tenant: initech}]")
    result = validate_repo(repo)
    assert [(d.code, d.path) for d in result.diagnostics] == [
        ("REF_NOT_FOUND", "/spec/protects/tenants/0"),
        ("REF_NOT_FOUND", "/spec/exemptions/0/tenant")]
    assert result.diagnostics[0].hint == "did you mean 'acme'?"


def test_guardrails_wait_for_the_revision_to_have_no_other_error(repo: Path) -> None:
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, WORLD)
    edit(repo, "tenants/acme/network.yaml", "10.0.1.0/24", "10.9.1.0/24")
    assert found(validate_repo(repo)) == []


def test_without_guardrails_no_reachability_is_built(repo: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "provider" / "guardrails.yaml").unlink()

    def refuse(*_args: object) -> None:
        raise AssertionError("built a Reachability")

    monkeypatch.setattr(guardrails, "_Suspects", refuse)
    assert validate_repo(repo).ok
    guardrail(repo)
    with pytest.raises(AssertionError, match="built a Reachability"):
        validate_repo(repo)


def _rule(repo: Path, rule: str) -> None:
    """Replace the SSH rule of group admin."""
    path = repo / "tenants/acme/security-groups.yaml"
    head = path.read_text().split("    - protocol: tcp")[0]
    path.write_text(head + f"    - {rule}\n")


def test_the_example_repo_guards_ssh_and_a_world_ssh_rule_breaks_it(tmp_path: Path) -> None:
    repo = copy_checkout(EXAMPLE, tmp_path / "repo")
    assert found(validate_repo(repo)) == []
    edit(repo, "tenants/acme/security-groups.yaml", OFFICE, WORLD)
    [denied] = found(validate_repo(repo))
    assert denied.code == "GUARDRAIL_DENIED" and "acme/web-1/0" in denied.message
