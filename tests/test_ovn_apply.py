"""`unet plan` and `unet apply` against a real OVN Northbound database and ovn-northd.

Every test runs the unet command line as a subprocess (so kills and locks are
real) against the `lab` fixture: ovsdb-server (NB, SB) and ovn-northd from the
distribution's packages, in a temp folder, on unix sockets. Nothing is mocked.
Every daemon a test starts itself is stopped by its pid, also when it fails.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from unet.reconciler.processes import process_alive

from .conftest import use_northbound
from .support.ovnlab import NB_SCHEMA, OvnLab
from .support.ovnrun import (
    INSTALLATION,
    TABLES,
    add_instance,
    apply,
    assert_consistent,
    assert_noop,
    dump,
    listening_port,
    nbctl_list,
    northd_problems,
    ours,
    ovsdb_server,
    plan,
    plan_json,
    reaped,
    row_named,
    rows,
    spawn,
    spawn_at_prompt,
    stop_pid,
    unet,
    wait_for_text,
)
from .support.pki import Authority
from .test_plan_golden import edit_text

# --- 1. the example repo, applied -----------------------------------------------------------


def test_apply_example_builds_the_network_and_northd_compiles_it(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    result = apply(tmp_path, repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Apply complete: " in result.stdout
    created = int(re.search(r"Apply complete: (\d+) created", result.stdout).group(1))
    assert created == sum(len(ours(lab.nb_remote, t)) for t in TABLES)

    show = lab.nbctl("show")
    for name in ("unet.acme.prod", "unet.globex.corp", "unet.initech.lab"):
        assert f"router {row_named(lab.nb_remote, 'Logical_Router', name)['_uuid']} ({name})" \
            in show
    for name in ("unet.acme.web", "unet.acme.db", "unet.acme.nodes", "unet.globex.app",
                 "unet-ext.region-a", "unet-ext.region-b"):
        assert f"({name})" in show

    # Ports with the allocated addresses: "MAC IPv4 [IPv6]", inside the subnet.
    web1 = row_named(lab.nb_remote, "Logical_Switch_Port", "unet.acme.vm.web-1.0")
    mac, ip4, ip6 = web1["addresses"][0].split()
    assert re.fullmatch(r"(?:[0-9a-f]{2}:){5}[0-9a-f]{2}", mac)
    assert ipaddress.ip_address(ip4) in ipaddress.ip_network("10.10.1.0/24")
    assert ip4 != "10.10.1.1", "the gateway is never given to a port"
    assert ipaddress.ip_address(ip6) in ipaddress.ip_network("fd10:aaaa:0:1::/64")
    assert web1["port_security"] == web1["addresses"]
    web_switch = row_named(lab.nb_remote, "Logical_Switch", "unet.acme.web")
    assert web1["_uuid"] in web_switch["ports"]
    db1 = row_named(lab.nb_remote, "Logical_Switch_Port", "unet.acme.vm.db-1.0")
    assert db1["addresses"][0].split()[1] == "10.10.2.20", "the fixed address is kept"
    assert db1["dhcpv4_options"], "the db subnet has DHCP"

    # NAT: the SNAT of NATGateway prod from the pool, and web-1's floating IP.
    prod = row_named(lab.nb_remote, "Logical_Router", "unet.acme.prod")
    nat = [r for r in rows(lab.nb_remote, "NAT") if r["_uuid"] in prod["nat"]]
    snat = [r for r in nat if r["type"] == "snat"]
    assert len(snat) == 1 and snat[0]["logical_ip"] == "10.10.0.0/16"
    snat_ip = ipaddress.ip_address(snat[0]["external_ip"])
    assert snat_ip in ipaddress.ip_network("203.0.113.0/24")
    assert ipaddress.ip_address("203.0.113.10") <= snat_ip <= \
        ipaddress.ip_address("203.0.113.200") and str(snat_ip) != "203.0.113.53"
    assert snat[0]["external_ids"]["unet:owner"] == "NATGateway/acme/prod"
    floating = {r["logical_ip"]: r["external_ip"] for r in nat if r["type"] == "dnat"}
    assert floating[ip4] != str(snat_ip)
    assert f'external ip: "{snat_ip}"' in show and 'type: "snat"' in show

    # Port groups and their ACLs.
    groups = {r["name"]: r for r in rows(lab.nb_remote, "Port_Group")}
    assert {"unet.acme.prod", "unet.acme.prod.web", "unet.acme.prod.db",
            "unet.acme.prod.k1_nodes", "unet.globex.corp.app"} <= groups.keys()
    assert web1["_uuid"] in groups["unet.acme.prod.web"]["ports"]
    assert web1["_uuid"] in groups["unet.acme.prod"]["ports"], "the network's default drop"
    assert web1["_uuid"] not in groups["unet.acme.prod.db"]["ports"]
    acls = lab.nbctl("--type=port-group", "acl-list", "unet.acme.prod.web")
    assert "(outport == @unet.acme.prod.web && ip4 && tcp.dst == 443) allow-related" in acls
    assert "ip4.src == 192.0.2.0/24 && tcp.dst == 22) allow-related" in acls
    db_acls = lab.nbctl("--type=port-group", "acl-list", "unet.acme.prod.db")
    # group web's members: its ports, and web-k1's addresses on a hosting cluster (on web,
    # and on the provider's services-a)
    assert "ip4.src == {$unet.acme.prod.web_ip4,$unet_hosted.acme.web_k1.0_ip4," \
           "$unet_hosted.acme.web_k1.1_ip4} && tcp.dst == 5432" in db_acls
    assert "drop" in lab.nbctl("--type=port-group", "acl-list", "unet.acme.prod")
    assert all(r["external_ids"].get("unet:installation") == INSTALLATION
               for r in rows(lab.nb_remote, "ACL"))

    # ovn-northd compiled all of it into the Southbound database, without complaint.
    lab.sync()
    datapaths = subprocess.run(["ovn-sbctl", f"--db={lab.sb_remote}", "--columns=external_ids",
                                "list", "Datapath_Binding"], capture_output=True, text=True,
                               check=True).stdout
    for table in ("Logical_Switch", "Logical_Router"):
        for row in rows(lab.nb_remote, table):
            assert f'name={row["name"]}' in datapaths, row["name"]
    flows = subprocess.run(["ovn-sbctl", f"--db={lab.sb_remote}", "lflow-list",
                            "unet.acme.web"], capture_output=True, text=True, check=True).stdout
    assert "tcp.dst == 443" in flows, "the security group's ACLs became logical flows"
    assert northd_problems(lab) == []


# --- 2. idempotence -------------------------------------------------------------------------


def test_second_apply_changes_nothing(lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    lab.sync()  # ovn-northd writes the ports' `up` column once it has compiled them
    before = dump(lab.nb_remote)
    assert sum(map(len, before.values())) > 100

    second = apply(tmp_path, repo)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "No changes." in second.stdout and "Apply complete" not in second.stdout
    code, document = plan_json(tmp_path, repo)
    assert code == 0
    assert document["has_changes"] is False and document["drift"] == []
    assert {tuple(c["actions"]) for c in document["backend_changes"]} == {("no-op",)}
    assert len(document["backend_changes"]) == sum(map(len, before.values()))
    assert_noop(tmp_path, repo)
    assert dump(lab.nb_remote) == before, "same rows, same UUIDs, same values"


# --- 3. drift -------------------------------------------------------------------------------

WEB1_KEY = "Logical_Switch_Port/acme/ComputeInstance/web-1/0"
WEB2_KEY = "Logical_Switch_Port/acme/ComputeInstance/web-2/0"
HTTPS_MATCH = "outport == @unet.acme.prod.web && ip4 && tcp.dst == 443"
HANDMADE_KEY = "ACL/acme/prod/web/to-lport/handmade"


def _create_tagged_acl(lab: OvnLab) -> None:
    """A row a person made by copying our tags: ours by tag, desired by nobody."""
    lab.nbctl("--", "--id=@a", "create", "ACL", "direction=to-lport", "priority=1002",
              'match="outport == @unet.acme.prod.web && ip4 && tcp.dst == 23"',
              "action=allow-related", f'external_ids:"unet:installation"={INSTALLATION}',
              f'external_ids:"unet:key"="{HANDMADE_KEY}"',
              'external_ids:"unet:owner"="SecurityGroup/acme/web"',
              "--", "add", "Port_Group", "unet.acme.prod.web", "acls", "@a")


def test_drift_is_reported_and_repaired(lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    web1 = row_named(lab.nb_remote, "Logical_Switch_Port", "unet.acme.vm.web-1.0")
    web2 = row_named(lab.nb_remote, "Logical_Switch_Port", "unet.acme.vm.web-2.0")
    https = [r for r in rows(lab.nb_remote, "ACL") if r["match"] == HTTPS_MATCH]
    assert len(https) == 1
    https_key = https[0]["external_ids"]["unet:key"]
    assert web1["external_ids"]["unet:key"] == WEB1_KEY
    assert web2["external_ids"]["unet:key"] == WEB2_KEY

    lab.nbctl("lsp-set-addresses", "unet.acme.vm.web-1.0", "02:00:00:00:00:99 10.10.1.99")
    lab.nbctl("lsp-del", "unet.acme.vm.web-2.0")
    lab.nbctl("--type=port-group", "acl-del", "unet.acme.prod.web", "to-lport", "1002",
              HTTPS_MATCH)
    _create_tagged_acl(lab)
    # A copy of one of our rows, tags and all: one of the two goes.
    [postgres] = [r for r in rows(lab.nb_remote, "ACL")
                  if r["match"].startswith("outport == @unet.acme.prod.db && ip4 && ")
                  and "tcp.dst == 5432" in r["match"]]
    postgres_key = postgres["external_ids"]["unet:key"]
    lab.nbctl("--", "--id=@a", "create", "ACL", "direction=to-lport", "priority=1002",
              f'match="{postgres["match"]}"', "action=allow-related",
              *[f'external_ids:"{k}"="{v}"' for k, v in postgres["external_ids"].items()],
              "--", "add", "Port_Group", "unet.acme.prod.db", "acls", "@a")

    code, document = plan_json(tmp_path, repo)
    assert code == 2
    changes = {c["id"]: c for c in document["backend_changes"]}
    expected = {f"ovn:{WEB1_KEY}": ["update"], f"ovn:{WEB2_KEY}": ["create"],
                f"ovn:{https_key}": ["create"], f"ovn:{HANDMADE_KEY}": ["delete"]}
    assert set(expected) <= set(document["drift"]), document["drift"]
    for uid, actions in expected.items():
        assert changes[uid]["actions"] == actions and changes[uid]["drift"] is True, uid
    [copy] = [c for c in changes.values() if c["key"].startswith(f"{postgres_key}#duplicate")]
    assert copy["actions"] == ["delete"] and copy["drift"] is True
    assert changes[f"ovn:{postgres_key}"]["actions"] == ["no-op"]
    assert {"path": "fields.addresses.0", "before": "02:00:00:00:00:99 10.10.1.99",
            "after": web1["addresses"][0]} in changes[f"ovn:{WEB1_KEY}"]["changes"]
    # Every change is drift: the repo did not change since the last apply.
    assert set(document["drift"]) == {c["id"] for c in document["backend_changes"]
                                      if c["actions"] != ["no-op"]}
    text = plan(tmp_path, repo, "--detailed-exitcode")
    assert text.returncode == 2
    drifted = len(document["drift"])
    assert f"Drift: {drifted} backend object{'s' if drifted > 1 else ''} changed outside unet" \
        in text.stdout
    refresh = plan(tmp_path, repo, "--detailed-exitcode", "--refresh-only")
    assert refresh.returncode == 2

    repaired = apply(tmp_path, repo)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    now1 = row_named(lab.nb_remote, "Logical_Switch_Port", "unet.acme.vm.web-1.0")
    assert now1["addresses"] == web1["addresses"] == now1["port_security"]
    now2 = row_named(lab.nb_remote, "Logical_Switch_Port", "unet.acme.vm.web-2.0")
    assert now2["addresses"] == web2["addresses"], "the allocation is made again, the same"
    assert now2["_uuid"] in row_named(lab.nb_remote, "Port_Group", "unet.acme.prod.web")["ports"]
    assert [r["match"] for r in rows(lab.nb_remote, "ACL")].count(HTTPS_MATCH) == 1
    assert not [r for r in rows(lab.nb_remote, "ACL")
                if r["external_ids"].get("unet:key") == HANDMADE_KEY]
    assert [r["external_ids"].get("unet:key") for r in rows(lab.nb_remote, "ACL")].count(
        postgres_key) == 1
    assert_noop(tmp_path, repo)
    lab.sync()
    assert northd_problems(lab) == []


def test_an_apply_confirms_what_it_changed_by_reading_only_its_owners(
        lab: OvnLab, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """After applying, the rows of the owners it changed are read again (those alone) and
    what is not as planned is said: here a person sets web-1's addresses again between the
    apply and its confirmation."""
    from unet.managers.ovn.manager import OvnSession
    from unet.reconciler import cli

    assert apply(tmp_path, repo).returncode == 0
    lab.nbctl("lsp-set-addresses", "unet.acme.vm.web-1.0", "02:00:00:00:00:99 10.10.1.99")
    apply_rows, read_back = OvnSession.apply, OvnSession.observe_owners
    asked: list[frozenset[str]] = []

    def racing_apply(self: OvnSession, *args: Any, **kwargs: Any) -> Any:
        done = apply_rows(self, *args, **kwargs)
        lab.nbctl("lsp-set-addresses", "unet.acme.vm.web-1.0", "02:00:00:00:00:98 10.10.1.98")
        return done

    def observe_owners(self: OvnSession, owners: frozenset[str]) -> Any:
        asked.append(owners)
        return read_back(self, owners)

    monkeypatch.setattr(OvnSession, "apply", racing_apply)
    monkeypatch.setattr(OvnSession, "observe_owners", observe_owners)
    monkeypatch.chdir(tmp_path)
    code = cli.main(["apply", str(repo), "--auto-approve", "--manager", "ovn"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert asked == [frozenset({"ComputeInstance/acme/web-1"})]
    assert "after the apply, 1 object is not as planned" in err, err
    assert f"ovn:{WEB1_KEY}: addresses.0 is '02:00:00:00:00:98 10.10.1.98', planned '02:" \
        in err, err
    monkeypatch.undo()
    code, document = plan_json(tmp_path, repo)
    assert code == 2 and document["drift"] == [f"ovn:{WEB1_KEY}"], "still drift: not recorded"


def test_a_row_tagged_ours_without_a_key_is_left_alone(lab: OvnLab, repo: Path,
                                                         tmp_path: Path) -> None:
    """A switch a person tagged with the installation only (no unet:key), with a port: no
    object of ours, so the plan has nothing to do. Reading it stopped every plan (its missing
    key was sorted among the others' keys, and its port looked for its parent's key)."""
    assert apply(tmp_path, repo).returncode == 0
    lab.nbctl("ls-add", "handmade-sw", "--", "set", "Logical_Switch", "handmade-sw",
              f'external_ids:"unet:installation"={INSTALLATION}')
    lab.nbctl("lsp-add", "handmade-sw", "handmade-port")
    code, document = plan_json(tmp_path, repo)
    assert code == 0, document
    assert document["has_changes"] is False
    assert_noop(tmp_path, repo)
    assert row_named(lab.nb_remote, "Logical_Switch", "handmade-sw")["ports"]


# --- 4. rows that are not ours --------------------------------------------------------------


def _make_foreign_rows(lab: OvnLab) -> dict[str, tuple[str, str]]:
    """Rows a person or another system made, some inside our rows; name → (table, uuid)."""
    nb = lab.nb_remote
    lab.nbctl("ls-add", "foreign-sw")
    lab.nbctl("lsp-add", "foreign-sw", "foreign-sw-p1", "--", "lsp-set-addresses",
              "foreign-sw-p1", "02:00:00:00:0f:01 192.0.2.10")
    lab.nbctl("lsp-add", "unet.acme.web", "foreign-port", "--", "lsp-set-addresses",
              "foreign-port", "02:00:00:00:0f:02 10.10.1.250")
    lab.nbctl("--type=port-group", "acl-add", "unet.acme.prod.web", "to-lport", "900",
              "outport == @unet.acme.prod.web && ip4.src == 198.18.0.1", "drop")
    lab.nbctl("lr-nat-add", "unet.acme.prod", "dnat_and_snat", "203.0.113.250", "10.10.1.250")
    lab.nbctl("pg-add", "foreign-pg")
    out = {name: (table, row_named(nb, table, name)["_uuid"]) for table, name in (
        ("Logical_Switch", "foreign-sw"), ("Logical_Switch_Port", "foreign-sw-p1"),
        ("Logical_Switch_Port", "foreign-port"), ("Port_Group", "foreign-pg"))}
    acl = [r for r in rows(nb, "ACL") if r["priority"] == 900]
    nat = [r for r in rows(nb, "NAT") if r["external_ip"] == "203.0.113.250"]
    assert len(acl) == len(nat) == 1
    out["foreign-acl"] = ("ACL", acl[0]["_uuid"])
    out["foreign-nat"] = ("NAT", nat[0]["_uuid"])
    return out


def test_foreign_rows_survive_every_apply(lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    nb = lab.nb_remote
    assert apply(tmp_path, repo).returncode == 0
    foreign = _make_foreign_rows(lab)
    snapshot = {name: nbctl_list(nb, table, uuid) for name, (table, uuid) in foreign.items()}

    def untouched() -> None:
        for name, (table, uuid) in foreign.items():
            assert nbctl_list(nb, table, uuid) == snapshot[name], name
        assert foreign["foreign-port"][1] in row_named(nb, "Logical_Switch", "unet.acme.web")[
            "ports"]
        assert foreign["foreign-acl"][1] in row_named(nb, "Port_Group", "unet.acme.prod.web")[
            "acls"]
        assert foreign["foreign-nat"][1] in row_named(nb, "Logical_Router", "unet.acme.prod")[
            "nat"]

    # Nothing of ours changed: the foreign rows are not drift.
    assert_noop(tmp_path, repo)
    assert apply(tmp_path, repo).returncode == 0
    untouched()

    # Changes to the very rows that hold foreign children: a port added to the switch and
    # the port groups, a rule removed from the group, a floating IP removed from the router.
    add_instance(repo, "web-8")
    groups = repo / "tenants" / "acme" / "security-groups.yaml"
    text = groups.read_text()
    http = "    - protocol: tcp          # HTTP (redirects to HTTPS)\n      portFrom: 80\n" \
           "      portTo: 80\n      cidr: 0.0.0.0/0\n"
    assert http in text
    groups.write_text(text.replace(http, ""))
    external = repo / "tenants" / "acme" / "external.yaml"
    text = external.read_text()
    attachment = text[text.index("# Inbound 1:1 NAT to web-1."):text.index("# web-3 is not")]
    external.write_text(text.replace(attachment, "").replace(
        "target:\n    kind: ComputeInstance\n    name: web-3",
        "target:\n    kind: ComputeInstance\n    name: web-8"))
    changed = apply(tmp_path, repo)
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "0 deleted" not in changed.stdout
    row_named(nb, "Logical_Switch_Port", "unet.acme.vm.web-8.0")
    untouched()
    assert_noop(tmp_path, repo)

    # A name unet is about to use is taken by someone else: refused, nothing applied.
    lab.nbctl("lsp-add", "unet.acme.web", "unet.acme.vm.web-9.0")
    foreign["collision"] = ("Logical_Switch_Port",
                            row_named(nb, "Logical_Switch_Port", "unet.acme.vm.web-9.0")["_uuid"])
    snapshot["collision"] = nbctl_list(nb, *foreign["collision"])
    add_instance(repo, "web-9")
    before = dump(nb)
    planned = plan(tmp_path, repo, "--detailed-exitcode")
    assert planned.returncode == 1
    assert "NAME_CONFLICT" in planned.stdout
    assert "Logical_Switch_Port named 'unet.acme.vm.web-9.0'" in planned.stdout
    refused = apply(tmp_path, repo)
    assert refused.returncode == 1
    assert "NAME_CONFLICT" in refused.stdout and "nothing was applied" in refused.stderr
    assert dump(nb) == before
    untouched()

    # --show-unmanaged lists what is not ours; the colliding port among them.
    listed = plan(tmp_path, repo, "--show-unmanaged")
    unmanaged = listed.stdout[listed.stdout.index("Unmanaged:"):]
    for name in ("foreign-sw", "foreign-sw-p1", "foreign-port", "foreign-pg",
                 "unet.acme.vm.web-9.0"):
        assert re.search(rf"^  ovn: \w+ {re.escape(name)}$", unmanaged, re.M), name
    for name in ("foreign-acl", "foreign-nat"):
        table, uuid = foreign[name]
        assert f"  ovn: {table} {uuid} in " in unmanaged, name
    assert "unet.acme.vm.web-1.0" not in unmanaged

    # Once the other port is gone, web-9 is created and the rest still stands.
    lab.nbctl("lsp-del", "unet.acme.vm.web-9.0")
    del foreign["collision"]
    assert apply(tmp_path, repo).returncode == 0
    assert row_named(nb, "Logical_Switch_Port", "unet.acme.vm.web-9.0")["external_ids"][
        "unet:installation"] == INSTALLATION
    untouched()
    lab.sync()
    assert northd_problems(lab) == []


# --- 7. saved plans -------------------------------------------------------------------------


def test_saved_plan_is_applied_exactly_and_refused_when_stale(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    nb = lab.nb_remote
    saved = tmp_path / "plan.json"
    made = plan(tmp_path, repo, "-o", str(saved))
    assert made.returncode == 0
    document = json.loads(saved.read_text())
    assert document["mode"] == "live" and document["has_changes"]
    creates = document["row_counts"]["create"]

    applied = unet(tmp_path, "apply", str(saved), "--auto-approve")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert f"Apply complete: {creates} created, 0 updated, 0 deleted" in applied.stdout
    assert sum(len(ours(nb, t)) for t in TABLES) == creates
    add_instance(repo, "web-8")
    code, now = plan_json(tmp_path, repo)
    assert code == 2
    assert {c["id"]: c["actions"] for c in now["backend_changes"]
            if c["actions"] != ["no-op"]} == {
        "ovn:Logical_Switch_Port/acme/ComputeInstance/web-8/0": ["create"],
        "ovn:Port_Group/acme/prod": ["update"], "ovn:Port_Group/acme/prod/web": ["update"]}
    assert now["drift"] == [], "the saved plan's digest was recorded"

    # Planned, then the backend changes: the saved plan is refused.
    stale = tmp_path / "stale.json"
    assert plan(tmp_path, repo, "-o", str(stale)).returncode == 0
    lab.nbctl("set", "Logical_Switch_Port", "unet.acme.vm.web-1.0",
              "options:requested-chassis=hv9")
    before = dump(nb)
    refused = unet(tmp_path, "apply", str(stale), "--auto-approve")
    assert refused.returncode == 1
    assert "STALE_PLAN" in refused.stderr and "make a new plan" in refused.stderr.lower()
    assert dump(nb) == before

    # A plan between two revisions (PR mode) is never applied.
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "base")
    add_instance(repo, "web-7")
    between = tmp_path / "pr.json"
    pr = unet(tmp_path, "plan", str(repo), "--base", "HEAD", "-o", str(between))
    assert pr.returncode == 0, pr.stderr
    assert json.loads(between.read_text())["mode"] == "pr"
    refused = unet(tmp_path, "apply", str(between), "--auto-approve")
    assert refused.returncode == 1
    assert "cannot be applied" in refused.stderr
    assert dump(nb) == before


# --- 5. killed and interrupted applies ------------------------------------------------------


#: When to kill, one run after the other on the same database: (text unet has printed,
#: then seconds more). The plan is printed right before the first transaction; a progress
#: line follows each committed wave, while the next wave's transaction is built and sent;
#: "Apply complete" comes after the last commit, before the applied digest is recorded.
KILL_MOMENTS = (("Backend rows:", 0.0), ("wave 1/", 0.02), ("wave 1/", 0.3),
                ("Apply complete", 0.0))


def _kill_at(cwd: Path, repo: Path, text: str, delay: float) -> None:
    proc, out, err = spawn(cwd, "apply", str(repo), "--auto-approve", "--manager", "ovn")
    with reaped(proc):
        wait_for_text(proc, (out, err), text)
        time.sleep(delay)
        if text == "Apply complete" and proc.poll() == 0:
            return  # it recorded the digest and let go of the lock before the kill
        assert proc.poll() is None, f"the apply ended before the kill ({text!r} + {delay})"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL


def test_killed_applies_are_finished_by_the_next_run(
        lab: OvnLab, bench: Path, bench_desired: dict[str, set[str]], tmp_path: Path) -> None:
    desired = bench_desired
    total = sum(map(len, desired.values()))
    assert total > 2000
    left = [0]
    started = time.monotonic()
    for text, delay in KILL_MOMENTS:
        _kill_at(tmp_path, bench, text, delay)
        left.append(assert_consistent(lab, None))  # never a row twice, even half-way
    assert left[1] == 0, "killed before its first transaction"
    assert 0 < left[2] < left[3] <= left[4] <= total, f"each killed run got further: {left}"
    assert left[2] < total / 2, "killed in the middle of the apply"
    killed = time.monotonic() - started

    finished = apply(tmp_path, bench)
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr
    assert assert_consistent(lab, desired) == total
    assert_noop(tmp_path, bench)
    rest = time.monotonic() - started - killed
    print(f"\nrows after each kill {left[1:]} of {total}; {len(KILL_MOMENTS)} killed runs "
          f"{killed:.1f} s, then finished and checked in {rest:.1f} s")


def _after_big_commits(lab: OvnLab, proc: subprocess.Popen[bytes],
                       actions: list[Any]) -> int:
    """Run one action after each big transaction commits, while the apply goes on.

    A commit grows the database file at once, before ovsdb-server sends the
    transaction's update and reply, which the client takes a while to read.
    """
    done, size = 0, (lab.root / "nb.db").stat().st_size
    while proc.poll() is None and done < len(actions):
        now = (lab.root / "nb.db").stat().st_size
        if now > size + 20_000:
            actions[done]()
            done += 1
        size = now
        time.sleep(0.001)
    return done


def test_lost_replies_and_backend_restart_mid_apply(
        lab: OvnLab, bench: Path, bench_desired: dict[str, set[str]], tmp_path: Path) -> None:
    total = sum(map(len, bench_desired.values()))

    def drop_connections() -> None:
        # The client loses the reply of a transaction that did commit; on a new
        # connection, with its lock again, it finds the generation that transaction set
        # and goes on without sending it twice.
        subprocess.run(["ovs-appctl", "-t", str(lab.root / "nb.ctl"),
                        "ovsdb-server/reconnect"], capture_output=True, check=True)

    def restart_server() -> None:
        lab.stop_daemon("nb")
        lab.start_db("nb", NB_SCHEMA)

    started = time.monotonic()
    proc, out, err = spawn(tmp_path, "apply", str(bench), "--auto-approve", "--manager", "ovn")
    with reaped(proc):
        done = _after_big_commits(lab, proc, [drop_connections, drop_connections,
                                              restart_server])
        proc.wait(timeout=90)
    interrupted = time.monotonic() - started
    assert done == 3, f"the apply ended after {done} interruptions"
    # It reconnected, took its lock again and finished; nothing was inserted twice.
    assert proc.returncode == 0, err.read_text()
    assert "Apply complete: " in out.read_text()
    assert assert_consistent(lab, bench_desired) == total

    again = apply(tmp_path, bench)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr
    assert "No changes." in again.stdout
    assert assert_consistent(lab, bench_desired) == total
    lab.sync()
    # The restart drops northd's NB connection too: reconnecting, or a write or read that
    # hit the closed socket, is expected; nothing else is.
    dropped = ("|reconnect|", f"{lab.nb_sock}: send error", f"{lab.nb_sock}: receive error")
    assert northd_problems(lab, dropped) == [], "only its NB connection dropped"
    rest = time.monotonic() - started - interrupted
    print(f"\n2 dropped connections and a restart of ovsdb-server: applied in "
          f"{interrupted:.1f} s; next apply and checks {rest:.1f} s")


# --- 6. the lock ----------------------------------------------------------------------------


def test_second_run_waits_for_the_lock_then_fails_naming_the_holder(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:

    # The first run holds the lock while a person reads its plan at the prompt.
    out = tmp_path / "first.out"
    first, controller = spawn_at_prompt(tmp_path, out, "apply", str(repo), "--manager", "ovn")
    try:
        with reaped(first):
            wait_for_text(first, (out,), "Backend rows:")
            started = time.monotonic()
            second = apply(tmp_path, repo, "--lock-timeout", "1")
            waited = time.monotonic() - started
            assert second.returncode == 1
            holder = f"{socket.gethostname()} pid {first.pid} since "
            assert "another unet run holds the lock unet_example" in second.stderr
            assert holder in second.stderr, second.stderr
            assert "--lock-timeout" in second.stderr
            assert 1 <= waited < 30
            assert ours(lab.nb_remote, "Logical_Switch") == [], "nothing applied by either"

            os.write(controller, b"yes\n")
            assert first.wait(timeout=60) == 0, out.read_text()
        assert "Apply complete" in out.read_text()
    finally:
        os.close(controller)
    assert "unet:lock-holder:unet_example" not in lab.nbctl("get", "NB_Global", ".",
                                                            "external_ids")
    after = apply(tmp_path, repo, "--lock-timeout", "1")
    assert after.returncode == 0, after.stderr
    assert "No changes." in after.stdout


# --- 8. connection strings ------------------------------------------------------------------


def _set_ssl_config(repo: Path, key: Path, cert: Path, ca: Path) -> None:
    managers = repo / "provider" / "managers.yaml"
    text = managers.read_text()
    anchor = "    gatewayChassis: [gw-1]\n"
    assert anchor in text
    managers.write_text(text.replace(anchor, anchor + f"    sslKey: {key}\n"
                                     f"    sslCert: {cert}\n    sslCaCert: {ca}\n", 1))


def use_northbound_again(repo: Path, old: str, new: str) -> None:
    edit_text(repo, "provider/managers.yaml", f"northbound: {old}", f"northbound: {new}")


def test_connection_strings(example_copy: Path, tmp_path: Path) -> None:
    # tcp: a port the server chose itself (a fixed port could be someone else's).
    tcp_repo = tmp_path / "tcp-repo"
    shutil.copytree(example_copy, tcp_repo)
    with ovsdb_server(tmp_path / "tcp", "ptcp:0:127.0.0.1") as log:
        remote = f"tcp:127.0.0.1:{listening_port(log)}"
        subprocess.run(["ovn-nbctl", f"--db={remote}", "init"], check=True)
        use_northbound(tcp_repo, remote)
        result = apply(tmp_path, tcp_repo)
        assert result.returncode == 0, result.stdout + result.stderr
        assert len(ours(remote, "Logical_Switch_Port")) > 10
        assert_noop(tmp_path, tcp_repo)
        # A host name, resolved by the system (localhost may name ::1 first: each is tried).
        use_northbound_again(tcp_repo, remote, remote.replace("127.0.0.1", "localhost"))
        assert_noop(tmp_path, tcp_repo)

    # ssl: certificates of a CA made here, on both sides (the server's names 127.0.0.1).
    authority = Authority(tmp_path / "pki", "unet test CA")
    server, client = authority.issue("server", "server"), authority.issue("client")
    ssl_repo = tmp_path / "ssl-repo"
    shutil.copytree(example_copy, ssl_repo)
    with ovsdb_server(tmp_path / "ssl", "pssl:0:127.0.0.1", f"--private-key={server.key}",
                      f"--certificate={server.cert}", f"--ca-cert={server.ca_cert}") as log:
        port = listening_port(log)
        remote = f"ssl:127.0.0.1:{port}"
        nbctl_ssl = ["ovn-nbctl", f"--db={remote}", f"--private-key={client.key}",
                     f"--certificate={client.cert}", f"--ca-cert={client.ca_cert}"]
        subprocess.run([*nbctl_ssl, "init"], check=True)
        use_northbound(ssl_repo, remote)
        _set_ssl_config(ssl_repo, client.key, client.cert, client.ca_cert)
        result = apply(tmp_path, ssl_repo)
        assert result.returncode == 0, result.stdout + result.stderr
        shown = subprocess.run([*nbctl_ssl, "show"], capture_output=True, text=True,
                               check=True).stdout
        assert "unet.acme.vm.web-1.0" in shown
        assert_noop(tmp_path, ssl_repo)

    # Nobody at the socket: a plain message, quickly, and no traceback.
    missing = tmp_path / "nobody" / "nb.sock"
    use_northbound(example_copy, f"unix:{missing}")
    started = time.monotonic()
    result = apply(tmp_path, example_copy)
    assert result.returncode == 1
    assert f"cannot reach the OVN Northbound database at unix:{missing}" in result.stderr
    assert time.monotonic() - started < 30
    result = plan(tmp_path, example_copy)
    assert result.returncode == 1 and "cannot reach" in result.stderr


# --- 9. the embedded database ---------------------------------------------------------------


def _servers_under(folder: Path) -> list[int]:
    """Running ovsdb-server processes whose command line names `folder`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if command and command[0].endswith(b"ovsdb-server") and \
                any(str(folder).encode() in part for part in command) and \
                process_alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def test_embedded_database_is_kept_and_its_server_stopped(example_copy: Path,
                                                          tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    try:
        _check_embedded(example_copy, work, tmp_path)
    finally:  # whatever unet or this test left running in the repo's state, by pid
        for pid in _servers_under(example_copy / ".unet"):
            stop_pid(pid)


def _check_embedded(repo: Path, work: Path, tmp_path: Path) -> None:
    state = repo / ".unet" / "ovn"  # the repo's, wherever unet runs from
    result = apply(work, repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Apply complete" in result.stdout
    assert (state / "ovnnb.db").stat().st_size > 10_000
    assert _servers_under(state) == [], "the server unet started is stopped"
    pidfile = state / "nb.pid"
    if pidfile.exists():
        assert not process_alive(int(pidfile.read_text()))
    assert not (state / "started-by-unet").exists()

    # The database stays between runs: nothing to do the second time.
    assert_noop(work, repo)
    assert _servers_under(state) == []

    # A server someone else started at that socket is used, and left running; with its
    # pidfile where unet keeps its own, and elsewhere.
    for their_pidfile, instance in ((state / "nb.pid", "web-5"),
                                    (tmp_path / "theirs.pid", "web-6")):
        subprocess.run(["ovsdb-server", str(state / "ovnnb.db"),
                        f"--remote=punix:{state / 'nb.sock'}", f"--pidfile={their_pidfile}",
                        f"--log-file={tmp_path / 'theirs.log'}",
                        f"--unixctl={tmp_path / 'theirs.ctl'}", "--detach", "--no-chdir"],
                       check=True, capture_output=True)
        theirs = int(their_pidfile.read_text())
        try:
            add_instance(repo, instance)
            result = apply(work, repo)
            assert result.returncode == 0, result.stdout + result.stderr
            assert "Apply complete: 1 created" in result.stdout
            assert process_alive(theirs), "someone else's server was stopped"
            assert _servers_under(state) == [theirs], "and unet started none of its own"
            lsp = f"unet.acme.vm.{instance}.0"
            assert lsp in subprocess.run(["ovn-nbctl", f"--db=unix:{state / 'nb.sock'}",
                                          "show"], capture_output=True, text=True,
                                         check=True).stdout
        finally:
            stop_pid(theirs)
        (state / "nb.sock").unlink(missing_ok=True)
