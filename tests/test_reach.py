"""Reachability: what a change lets in, per workload NIC, in every plan; and `unet reach`.

Each cause a plan names (docs/plans.md, "Reachability") has a golden plan of the example
repo edited to show it, and asserts the entries that matter explicitly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from unet.reconciler.plan_render import render_markdown, render_text
from unet.reconciler.validate import Validation

from .conftest import EXAMPLE
from .test_plan_golden import (
    API,
    append_doc,
    check_golden,
    copy_example,
    edit_docs,
    edit_text,
    find_doc,
    plan_document,
    validated,
)

PUBLIC_DB = {"apiVersion": API, "kind": "ExternalIP", "metadata": {"name": "db-1-public"},
             "spec": {"pool": "public-a"}}
ATTACH_DB = {"apiVersion": API, "kind": "ExternalIPAttachment",
             "metadata": {"name": "db-1-public"},
             "spec": {"externalIP": "db-1-public",
                      "target": {"kind": "ComputeInstance", "name": "db-1"}}}


def _plan(base: Validation, head: Path) -> dict[str, Any]:
    from unet.reconciler.planner import plan_between

    return plan_document(plan_between(base, validated(head), {}))


def _entries(doc: dict[str, Any], nic: str, change: str = "gained") -> list[dict[str, Any]]:
    return [e for e in doc["reachability"] if e["nic"] == nic and e["change"] == change]


def _with_public_db(repo: Path) -> Path:
    append_doc(repo, "tenants/acme/external.yaml", PUBLIC_DB)
    append_doc(repo, "tenants/acme/external.yaml", ATTACH_DB)
    return repo


@pytest.fixture(scope="module")
def public_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Validation]:
    """The example, with db-1 reachable at a public address (its group opens nothing)."""
    repo = _with_public_db(copy_example(tmp_path_factory.mktemp("base") / "repo"))
    return repo, validated(repo)


def _join_web(repo: Path) -> None:
    edit_text(repo, "tenants/acme/compute.yaml", "securityGroups: [db]",
              "securityGroups: [db, web]")


def test_a_workload_with_a_public_address_joining_a_group_is_reported(
        tmp_path: Path, public_db: tuple[Path, Validation]) -> None:
    """The issue's case: the membership alone opens tcp/443 from the internet."""
    _repo, base = public_db
    head = _with_public_db(copy_example(tmp_path / "head"))
    _join_web(head)
    doc = _plan(base, head)
    check_golden("reach_group_joined", doc)
    opened = [e for e in _entries(doc, "acme/db-1/0") if e["internet"]]
    https = next(e for e in opened if e["traffic"] == "tcp/443")
    assert https["source"] == "internet" and https["via"].startswith("203.0.113.")
    assert https["cause"] == "group web joined"
    assert any("securityGroups" in why for why in https["because"])
    assert doc["reachability"][0]["internet"], "internet-facing entries come first"
    text = render_text(doc)
    assert f"! acme/db-1/0 can now be reached with tcp/443 from internet via {https['via']} " \
           "— group web joined" in text
    markdown = render_markdown(doc)
    assert "> [!WARNING]\n> **Opens to the internet:" in markdown
    assert "`acme/db-1/0`: tcp/443 from internet via 203.0.113." in markdown


def test_a_rule_added_opens_to_every_member(tmp_path: Path, example: Validation) -> None:
    head = copy_example(tmp_path / "head")

    def open_8443(docs: list[dict[str, Any]]) -> None:
        find_doc(docs, "SecurityGroup", "web")["spec"]["ingress"].append(
            {"protocol": "tcp", "portFrom": 8443, "portTo": 8443, "cidr": "0.0.0.0/0"})

    edit_docs(head, "tenants/acme/security-groups.yaml", open_8443)
    doc = _plan(example, head)
    check_golden("reach_rule_added", doc)
    web1 = [e for e in _entries(doc, "acme/web-1/0") if e["traffic"] == "tcp/8443"]
    assert {(e["source"], e["internet"], e["cause"]) for e in web1} == {
        ("internet", True, "rule added"), ("network prod", False, "rule added")}
    web2 = [e for e in _entries(doc, "acme/web-2/0") if e["traffic"] == "tcp/8443"]
    assert [e["internet"] for e in web2] == [False], "web-2 has no public address"
    assert all(e["change"] == "gained" for e in doc["reachability"])


def test_an_external_ip_attached_and_detached(tmp_path: Path, example: Validation,
                                              public_db: tuple[Path, Validation]) -> None:
    _base_repo, with_ip = public_db
    attached = _plan(example, _with_public_db(copy_example(tmp_path / "head")))
    check_golden("reach_external_ip_attached", attached)
    # db's rules admit only group web: its public address lets nothing in
    assert _entries(attached, "acme/db-1/0") == []
    web2 = copy_example(tmp_path / "web2")
    append_doc(web2, "tenants/acme/external.yaml", {**PUBLIC_DB, "metadata": {"name": "w2"}})
    append_doc(web2, "tenants/acme/external.yaml", {
        **ATTACH_DB, "metadata": {"name": "w2"},
        "spec": {"externalIP": "w2", "target": {"kind": "ComputeInstance", "name": "web-2"}}})
    doc = _plan(example, web2)
    opened = _entries(doc, "acme/web-2/0")
    assert opened and all(e["internet"] and e["cause"] == "external IP attached"
                          for e in opened)
    assert {e["traffic"] for e in opened} == {"tcp/443", "tcp/80", "tcp/22", "icmp type 8"}
    back = _plan(validated(web2), copy_example(tmp_path / "back"))
    lost = _entries(back, "acme/web-2/0", "lost")
    assert {e["cause"] for e in lost} == {"external IP detached"} and len(lost) == 4
    assert with_ip.ok


def test_port_forwards_narrow_what_an_address_lets_in(tmp_path: Path,
                                                      example: Validation) -> None:
    head = copy_example(tmp_path / "head")

    def forward(docs: list[dict[str, Any]]) -> None:
        find_doc(docs, "ExternalIPAttachment", "web-1-public")["spec"]["ports"] = [
            {"protocol": "tcp", "externalPort": 8443, "internalPort": 443}]

    edit_docs(head, "tenants/acme/external.yaml", forward)
    doc = _plan(example, head)
    check_golden("reach_port_forward", doc)
    gained = _entries(doc, "acme/web-1/0")
    assert [(e["traffic"], e["via"].split()[-1], e["cause"]) for e in gained] == [
        ("tcp/443", "tcp/8443", "port forwards changed")]
    lost = {e["traffic"] for e in _entries(doc, "acme/web-1/0", "lost") if e["internet"]}
    assert lost == {"tcp/443", "tcp/80", "tcp/22", "icmp type 8"}


def test_a_new_member_of_a_remote_group_is_named(tmp_path: Path, example: Validation) -> None:
    head = copy_example(tmp_path / "head")
    append_doc(head, "tenants/acme/compute.yaml", {
        "apiVersion": API, "kind": "ComputeInstance", "metadata": {"name": "web-9"},
        "spec": {"networkAttachments": [{"subnet": "web", "securityGroups": ["web"]}]}})
    doc = _plan(example, head)
    check_golden("reach_group_member_added", doc)
    db = _entries(doc, "acme/db-1/0")
    assert {(e["source"], tuple(e["members"]), e["cause"]) for e in db} == {
        ("group web", ("acme/web-9/0",), "group web has new members: acme/web-9/0")}
    assert sorted(e["family"] for e in db) == ["IPv4", "IPv6"]
    assert {e["cause"] for e in _entries(doc, "acme/web-9/0")} == {"workload added"}


def test_a_tenant_added_to_a_provider_network_is_named(tmp_path: Path) -> None:
    """db-metal admits the storage network's hosts (its third NIC is on storage-b): a
    tenant added to the network's `tenants` is a new source, named."""
    def admit_storage(docs: list[dict[str, Any]]) -> None:
        find_doc(docs, "SecurityGroup", "database")["spec"]["ingress"].append(
            {"protocol": "tcp", "portFrom": 2049, "portTo": 2049, "cidr": "192.168.50.0/24"})

    def add_tenant(docs: list[dict[str, Any]]) -> None:
        find_doc(docs, "ProviderNetwork", "storage-b")["spec"]["tenants"].append("acme")

    base = copy_example(tmp_path / "base")
    edit_docs(base, "tenants/globex/security-groups.yaml", admit_storage)
    head = copy_example(tmp_path / "head")
    edit_docs(head, "tenants/globex/security-groups.yaml", admit_storage)
    edit_docs(head, "provider/networks.yaml", add_tenant)
    doc = _plan(validated(base), head)
    check_golden("reach_provider_tenant_added", doc)
    assert [(e["nic"], e["source"], e["members"], e["cause"]) for e in doc["reachability"]] \
        == [("globex/db-metal/2", "provider network storage-b", ["acme"],
             "provider network storage-b has new tenants: acme")]


@pytest.fixture(scope="module")
def example() -> Validation:
    return validated(EXAMPLE)


# --- unet reach ---------------------------------------------------------------------------------


def _reach(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "unet.reconciler.cli", "reach", str(repo), *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_reach_answers_false_before_and_true_after_the_join(
        tmp_path: Path, public_db: tuple[Path, Validation]) -> None:
    before_repo, _ = public_db
    question = ("internet", "acme/db-1", "--port", "tcp/443", "--format", "json")
    before = _reach(before_repo, *question)
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout)["allowed"] is False
    after_repo = _with_public_db(copy_example(tmp_path / "after"))
    _join_web(after_repo)
    after = _reach(after_repo, *question)
    answer = json.loads(after.stdout)
    assert answer["allowed"] is True
    assert any("SecurityGroup/acme/web" in why and "securityGroups" in why
               for why in answer["because"])


@pytest.mark.parametrize(("question", "allowed", "said"), [
    (("acme/web-1", "acme/db-1", "--port", "tcp/5432"), True, "SecurityGroup/acme/db"),
    (("acme/db-1", "acme/web-1", "--port", "tcp/5432"), False, "no ingress rule"),
    (("internet", "acme/db-1", "--port", "tcp/5432"), False, "has no public address"),
    (("internet", "acme/web-1", "--port", "tcp/22"), False, "no ingress rule"),
    (("192.0.2.7", "acme/web-1", "--port", "tcp/22"), True, "SecurityGroup/acme/web"),
    (("acme/web-1", "internet", "--port", "tcp/443"), True, "NATGateway"),
    (("acme/web-1", "globex/app-1", "--port", "tcp/443"), True,
     "leaving through NATGateway prod"),
    (("acme/web-2", "initech/ci-runner-1"), False, "no common path"),
])
def test_reach_answers_and_says_why(question: tuple[str, ...], allowed: bool,
                                    said: str) -> None:
    done = _reach(EXAMPLE, *question, "--format", "json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["allowed"] is allowed, answer
    assert answer["because"] and said in " ".join(answer["because"]), answer


def test_reach_says_what_it_cannot_answer() -> None:
    unknown = _reach(EXAMPLE, "internet", "acme/nope")
    assert unknown.returncode == 1 and "no workload NIC 'acme/nope'" in unknown.stderr
    assert "acme/web-1" in unknown.stderr and "Traceback" not in unknown.stderr
    port = _reach(EXAMPLE, "internet", "acme/web-1", "--port", "tcp/http")
    assert port.returncode == 1 and "--port tcp/http" in port.stderr
    text = _reach(EXAMPLE, "internet", "acme/web-1", "--port", "tcp/443")
    assert text.returncode == 0 and text.stdout.startswith(
        "internet → acme/web-1 (tcp/443): allowed\n")


def test_many_entries_are_counted_per_tenant_beyond_the_limit() -> None:
    from unet.reconciler.plan_render import reachability_lines

    entries = [{"nic": f"{tenant}/vm-{i}/0", "change": "gained", "internet": False,
                "opening": "tcp/22 from network prod", "members": [], "cause": "rule added"}
               for tenant in ("acme", "globex") for i in range(40)]
    lines = reachability_lines({"reachability": entries}, limit=50)
    assert len(lines) == 51
    assert lines[-1] == "  … and 30 more: globex 30 (every entry is in the JSON plan)"


def test_github_output_warns_of_what_opens_to_the_internet(
        tmp_path: Path, public_db: tuple[Path, Validation]) -> None:
    from unet.reconciler.commands import render_plan

    _repo, base = public_db
    head = _with_public_db(copy_example(tmp_path / "head"))
    _join_web(head)
    out = render_plan(_plan(base, head), "github")
    warnings = [line for line in out.splitlines() if line.startswith("::warning title=Opens")]
    assert len(warnings) == 4
    assert any("acme/db-1/0 can now be reached with tcp/443 from internet via 203.0.113."
               in w and "group web joined" in w for w in warnings)


def test_a_rows_odd_owner_tag_does_not_stop_a_live_plan(example: Validation) -> None:
    """Drift is read from rows as they are: a hand-edited `unet:owner` may name no tenant."""
    from unet.reconciler.desired import render_desired
    from unet.reconciler.planner import _live_reachability

    exposure: dict[str, list[dict[str, str]]] = {
        "rules_opened": [], "rules_closed": [],
        "drift_opened": [{"rule": "tcp port 22 from 0.0.0.0/0 (anywhere) to x", "owner": "x"},
                         {"rule": "tcp port 23 from 0.0.0.0/0 (anywhere) to acme/prod/web",
                          "owner": "SecurityGroup/acme/web"}]}
    entries = _live_reachability(exposure, render_desired(example, {}))
    assert {e["nic"] for e in entries} >= {"acme/web-1/0", "acme/web-2/0"}
    assert all("port 23" in e["opening"] for e in entries)


def test_the_rest_names_the_tenants_with_most_entries_and_counts_the_others() -> None:
    """An initial apply of 1,000 tenants opens tens of thousands of paths: the line that
    counts the rest stays one short line, not a thousand names."""
    from unet.reconciler.plan_render import reachability_lines

    entries = [{"nic": f"t{t:04d}/vm-{i}/0", "change": "gained", "internet": False,
                "opening": "tcp/22 from network prod", "members": [], "cause": "rule added"}
               for t in range(1, 1001) for i in range(1 + (t == 7))]
    last = reachability_lines({"reachability": entries}, limit=1)[-1]
    assert last == ("  … and 1000 more: t0007 2, t0002 1, t0003 1, t0004 1, t0005 1, t0006 1, "
                    "t0008 1, t0009 1, t0010 1, t0011 1, and 989 other tenants "
                    "(every entry is in the JSON plan)")
