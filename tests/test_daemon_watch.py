"""Issue 17: the reconcile daemon watches the Northbound database instead of reading it on
every run. Against a real ovsdb-server: the replica equals a full read; a hand edit is
repaired within seconds by a plan of only its owner; nothing changed means no plan at all;
after a lost connection, a server restart (with rows changed while it was down) and a Git
force-push the daemon still ends equal to the branch. The cache of the rendered desired
state is keyed by every input.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from unet.managers.ovn.manager import OvnManager, OvnSession
from unet.reconciler import desired as desired_module
from unet.reconciler import heap
from unet.reconciler.allocate import ParsedHoldings
from unet.reconciler.cache import inputs_digest
from unet.reconciler.contract import Watch
from unet.reconciler.daemon import incremental as incremental_module
from unet.reconciler.daemon.incremental import Incremental, Rescope, Scope
from unet.reconciler.daemon.loop import Options, Reconciler
from unet.reconciler.daemon.watching import Watches
from unet.reconciler.desired import (
    changed_owners,
    render_desired,
    rendered_key,
    rerender_held,
    rerender_tenants,
)
from unet.reconciler.engine import Reading
from unet.reconciler.model import Model
from unet.reconciler.objects import TAG_ALLOCATION, Held, observed_allocations
from unet.reconciler.planner import changed_tenants, peered_with
from unet.reconciler.plugins import managers_of
from unet.reconciler.validate import ParsedFiles, repo_files, validate_repo

from .conftest import copy_checkout
from .k8s_fixtures.server import FakeCluster, write_kubeconfig
from .support.gitops import EXAMPLE, add_instance, commit_all, git, ovn_only_repo, set_mode
from .support.ovnlab import NB_SCHEMA, OvnLab
from .support.unixproxy import UnixProxy
from .test_daemon_heap import assert_no_cycles_of_ours
from .test_gitops_daemon import (
    history,
    nbctl,
    pushed_origin,
    spawn,
    stopped_at_end,
    wait_until,
)


@pytest.fixture
def nb(tmp_path: Path) -> Iterator[OvnLab]:
    """A Northbound ovsdb-server only (no southbound, no northd: nothing here needs them)."""
    lab = OvnLab(tmp_path / "ovn")
    lab.root.mkdir(parents=True)
    lab.start_db("nb", NB_SCHEMA)
    try:
        yield lab
    finally:
        lab.stop()


def _reconciler(work: Path, tmp_path: Path) -> Reconciler:
    return Reconciler(Options(path=work, state_dir=tmp_path / "state", workdir=tmp_path,
                              watch=True, resync_interval=3600.0))


def _first_acl(remote: str) -> str:
    return nbctl(remote, "--bare", "--columns=_uuid", "find", "ACL",
                 "external_ids:unet\\:installation=example").split()[0]


def test_the_replica_is_what_a_full_read_finds_and_follows_every_edit(
        nb: OvnLab, tmp_path: Path) -> None:
    work = ovn_only_repo(tmp_path / "work", northbound=nb.nb_remote, mode="repair")
    reconciler = _reconciler(work, tmp_path)
    try:
        assert reconciler.run_once().result == "applied"
        head = validate_repo(work)
        manager = managers_of(Model(head.context), resolve=True)["ovn"]
        assert isinstance(manager, OvnManager)
        with manager.connect(tmp_path) as session, session.watch(60) as watch:
            assert watch.take_changes() is None, "the first state: everything is new"
            port = _vm_port(nb.nb_remote)
            acl = _first_acl(nb.nb_remote)
            nbctl(nb.nb_remote, "set", "ACL", acl, "priority=1999", "--", "set",
                  "Logical_Switch_Port", port, "external_ids:hand=edit", "--",
                  "add", "Logical_Switch_Port", port, "addresses", "dynamic")
            nbctl(nb.nb_remote, "ls-add", "ls-of-others", "--", "lsp-add", "ls-of-others",
                  "theirs")  # not ours: no plan
            switch, group = (_ours(nb.nb_remote, table, "name")[0]
                             for table in ("Logical_Switch", "Port_Group"))
            nbctl(nb.nb_remote, "lsp-add", switch, "an-operators-port", "--",
                  "--type=port-group", "acl-add", group, "to-lport", "999",
                  f"outport == @{group}", "drop")  # others' rows inside ours
            read = session.observe()
            kept = watch.observe()
            assert {o.uid: o for o in kept.objects} == {o.uid: o for o in read.objects}
            by_uid = {o.uid: o for o in read.objects}
            texts = [(value, by_uid[o.uid].fields[name]) for o in kept.objects
                     for name, value in o.fields.items() if isinstance(value, str) and value]
            assert texts and all(mine is theirs for mine, theirs in texts), \
                "the replica's strings are interned, as a read's: one copy of each"
            assert {o.uid: o.holds for o in kept.objects if o.holds} == {
                o.uid: o.holds for o in read.objects if o.holds} != {}
            assert kept.foreign_children == read.foreign_children != []
            assert kept.uuids == read.uuids and kept.foreign_names == read.foreign_names
            assert kept.applied_digest == read.applied_digest
            assert watch.held() == observed_allocations(read.objects)
            changed = watch.take_changes()
            assert changed == {_owner(nb.nb_remote, table, row) for table, row in (
                ("ACL", acl), ("Logical_Switch_Port", port), ("Logical_Switch", switch),
                ("Port_Group", group))}, changed
            targeted = watch.observe(changed)
            assert {o.owner for o in targeted.objects} == set(changed)
            assert {o.uid: o for o in targeted.objects} == {
                o.uid: o for o in read.objects if o.owner in changed}
            assert watch.take_changes() == frozenset(), "taken once"
    finally:
        assert reconciler.watches is not None
        reconciler.watches.close()


def test_the_replicas_allocations_stay_the_same_object_until_one_changes(
        nb: OvnLab, tmp_path: Path) -> None:
    """The daemon keys its render cache on the held allocations' identity: an edit that
    records no allocation must not make them a new object (their digest, 0.5 s at 1,000
    tenants, would be computed again), and one that does must."""
    work = ovn_only_repo(tmp_path / "work", northbound=nb.nb_remote, mode="repair")
    reconciler = _reconciler(work, tmp_path)
    try:
        assert reconciler.run_once().result == "applied"
        manager = managers_of(Model(validate_repo(work).context), resolve=True)["ovn"]
        with manager.connect(tmp_path) as session, session.watch(60) as watch:
            held = watch.held()
            acl = _first_acl(nb.nb_remote)
            group = nbctl(nb.nb_remote, "--bare", "--columns=_uuid", "find", "Port_Group",
                          f"acls{{>=}}{acl}").split()[0]
            nbctl(nb.nb_remote, "remove", "Port_Group", group, "acls", acl)  # a row gone
            watch.observe()
            assert watch.held() is held
            port = _vm_port(nb.nb_remote)
            tags = nbctl(nb.nb_remote, "get", "Logical_Switch_Port", port, "external_ids")
            key = re.findall(f'"{TAG_ALLOCATION}(ipv4/[^"]+)"', tags)[0]
            nbctl(nb.nb_remote, "set", "Logical_Switch_Port", port,
                  f'external_ids:"{TAG_ALLOCATION}{key}"="10.10.1.99"')
            watch.observe()
            assert watch.held() is not held
            assert watch.held() == observed_allocations(session.observe().objects) != held
            # Found again from the rows that changed only: the same as a full read finds
            # when the scope of a switch's ports changes with its owner, a second row
            # records a port's key (then every row is read again), the port goes, the
            # second row's record too.
            uuid = nbctl(nb.nb_remote, "get", "Logical_Switch_Port", port, "_uuid").strip()
            switch = nbctl(nb.nb_remote, "--bare", "--columns=_uuid", "find", "Logical_Switch",
                           f"ports{{>=}}{uuid}").split()[0]
            other = next(p for p in _ours(nb.nb_remote, "Logical_Switch_Port", "_uuid")
                         if p != uuid)
            for edit in (["set", "Logical_Switch", switch, 'external_ids:"unet:owner"='
                          '"Subnet/acme/elsewhere"'],
                         ["set", "Logical_Switch_Port", other,
                          f'external_ids:"{TAG_ALLOCATION}{key}"="10.10.1.99"'],
                         ["lsp-del", port],
                         ["remove", "Logical_Switch_Port", other, "external_ids",
                          f'"{TAG_ALLOCATION}{key}"']):
                nbctl(nb.nb_remote, *edit)
                watch.observe()
                assert watch.held() == observed_allocations(session.observe().objects), edit
    finally:
        assert reconciler.watches is not None
        reconciler.watches.close()


def test_a_hand_edit_is_repaired_by_a_plan_of_its_owner_only(
        nb: OvnLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = ovn_only_repo(tmp_path / "work", northbound=nb.nb_remote, mode="repair")
    reconciler = _reconciler(work, tmp_path)
    try:
        first = reconciler.run_once()
        assert (first.result, first.scope) == ("applied", "full")
        # The next run plans the owners of the rows the apply wrote (their change reached the
        # replica), against the desired state cached under the allocations now recorded.
        settled = reconciler.run_once()
        assert settled.result == "ok" and settled.scope != "full", settled.scope
        renders = reconciler.incremental.rendered.renders
        idle = reconciler.run_once()
        assert (idle.result, idle.scope, idle.locked_at) == ("ok", None, None), \
            "nothing changed anywhere: no lock, no plan"

        acl = _first_acl(nb.nb_remote)
        nbctl(nb.nb_remote, "set", "ACL", acl, "priority=1999")
        _wait_for(reconciler)
        repaired = reconciler.run_once()
        assert repaired.result == "applied" and repaired.drift == repaired.repaired == 1
        assert repaired.scope == "1 owner"
        assert sum(repaired.row_counts.values()) < first.row_counts["create"] / 5
        assert nbctl(nb.nb_remote, "get", "ACL", acl, "priority").strip() != "1999"
        assert reconciler.incremental.rendered.renders == renders, "the desired state was reused"

        # Allocations recorded no more (a VM's port deleted): an input of the desired
        # state, so it is made again for what the backend now records, as a one-shot run
        # would render it. Only the port's tenant is rendered again (its addresses are
        # drawn from its own subnets), and gives the port its addresses back: the desired
        # state is the same; the port is created again.
        port = _vm_port(nb.nb_remote)
        tenant = _owner(nb.nb_remote, "Logical_Switch_Port", port).split("/")[1]
        rendered = _spy_on_renders(monkeypatch)
        nbctl(nb.nb_remote, "lsp-del", port)
        _wait_for(reconciler)
        recreated = reconciler.run_once()
        assert recreated.result == "applied" and recreated.scope != "full", recreated.scope
        assert reconciler.incremental.rendered.renders == renders, "the same desired state"
        assert rendered and set(rendered) == {frozenset({tenant})}, rendered
        after = reconciler.run_once()
        assert after.result == "ok" and after.scope != "full", "its allocations recorded again"
        assert port in nbctl(nb.nb_remote, "--bare", "--columns=name", "list",
                             "Logical_Switch_Port")

        # An address recorded by hand (a free one of its subnet): kept, as any recorded
        # allocation that still holds; the owners whose objects that changes are planned.
        rendered.clear()
        tags = nbctl(nb.nb_remote, "get", "Logical_Switch_Port", port, "external_ids")
        key, value = re.findall(f'"{TAG_ALLOCATION}(ipv4/[^"]+)"="([^"]+)"', tags)[0]
        moved = value.rsplit(".", 1)[0] + ".99"
        nbctl(nb.nb_remote, "set", "Logical_Switch_Port", port,
              f'external_ids:"{TAG_ALLOCATION}{key}"="{moved}"')
        _wait_for(reconciler)
        deadline = time.monotonic() + 10.0  # the edit itself in the replica, not only news
        while not any(held.value == moved for held in
                      reconciler.watches.watches["ovn"].held().values()):
            assert time.monotonic() < deadline, "the edit did not reach the replica"
            time.sleep(0.02)
        readdressed = reconciler.run_once()
        assert readdressed.result == "applied" and readdressed.scope != "full"
        assert reconciler.incremental.rendered.renders == renders + 1
        assert set(rendered) == {frozenset({tenant})}, rendered
        assert moved in nbctl(nb.nb_remote, "get", "Logical_Switch_Port", port, "addresses")
        _wait_for(reconciler, quiet=True)
        assert reconciler.run_once().result == "ok"
        assert reconciler.incremental.rendered.renders == renders + 1
        fresh = Reconciler(Options(path=work, state_dir=tmp_path / "fresh", workdir=tmp_path))
        assert fresh.run_once().result == "ok", "a plan of everything agrees"
    finally:
        assert reconciler.watches is not None
        reconciler.watches.close()


def _spy_on_renders(monkeypatch: pytest.MonkeyPatch) -> list[frozenset[str] | None]:
    """The tenants of every render of a desired state from now on (None: all of them)."""
    rendered: list[frozenset[str] | None] = []
    render = desired_module.render_desired

    def spy(*args: Any, **kwargs: Any) -> Any:
        rendered.append(kwargs.get("tenants"))
        return render(*args, **kwargs)

    monkeypatch.setattr(desired_module, "render_desired", spy)
    monkeypatch.setattr(incremental_module, "render_desired", spy)
    return rendered


def test_report_mode_keeps_reporting_drift_it_leaves(nb: OvnLab, tmp_path: Path) -> None:
    work = ovn_only_repo(tmp_path / "work", northbound=nb.nb_remote, mode="report")
    reconciler = _reconciler(work, tmp_path)
    try:
        reconciler.run_once()
        reconciler.run_once()
        acl = _first_acl(nb.nb_remote)
        nbctl(nb.nb_remote, "set", "ACL", acl, "priority=1999")
        _wait_for(reconciler)
        for _ in range(2):  # the second run saw no new change: the drift is still there
            run = reconciler.run_once()
            assert (run.result, run.drift, run.repaired) == ("drift", 1, 0)
            assert run.scope == "1 owner"
        assert nbctl(nb.nb_remote, "get", "ACL", acl, "priority").strip() == "1999"
    finally:
        assert reconciler.watches is not None
        reconciler.watches.close()


def test_after_a_lost_connection_and_a_server_restart_the_daemon_catches_up(
        nb: OvnLab, tmp_path: Path) -> None:
    proxy_path = tmp_path / "proxy.sock"
    with UnixProxy(proxy_path, nb.nb_sock) as proxy:
        work = ovn_only_repo(tmp_path / "work", northbound=proxy.remote, mode="repair")
        reconciler = _reconciler(work, tmp_path)
        try:
            reconciler.run_once()
            reconciler.run_once()
            # The connection is cut, and a row edited meanwhile: the replica loads again.
            assert proxy.cut_all() >= 1
            acl = _first_acl(nb.nb_remote)
            nbctl(nb.nb_remote, "set", "ACL", acl, "priority=1999")
            _wait_for(reconciler)
            run = reconciler.run_once()
            assert (run.result, run.scope, run.repaired) == ("applied", "full", 1), run

            # The server restarts, with a row changed in its file while it was down.
            nb.stop_daemon("nb")
            _edit_offline(nb.root / "nb.db", acl, 1888)
            nb.start_db("nb", NB_SCHEMA)
            _wait_for(reconciler, timeout=30)
            run = reconciler.run_once()
            assert (run.result, run.scope, run.repaired) == ("applied", "full", 1), run
            assert nbctl(nb.nb_remote, "get", "ACL", acl, "priority").strip() != "1888"
            assert reconciler.run_once().result == "ok"
        finally:
            assert reconciler.watches is not None
            reconciler.watches.close()


def _edit_offline(db: Path, acl: str, priority: int) -> None:
    """Change an ACL in the database file, with the server down (a restore of an older
    backup, say)."""
    done = subprocess.run(["ovsdb-tool", "transact", str(db), _transaction(
        [{"op": "update", "table": "ACL", "where": [["_uuid", "==", ["uuid", acl]]],
          "row": {"priority": priority}}])], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)[0] == {"count": 1}, done.stdout


def _transaction(operations: list[dict[str, Any]]) -> str:
    return json.dumps(["OVN_Northbound", *operations])


def test_a_force_push_is_followed(nb: OvnLab, tmp_path: Path) -> None:
    work = ovn_only_repo(tmp_path / "work", northbound=nb.nb_remote, mode="repair")
    origin, first = pushed_origin(tmp_path, work)
    daemon_dir, state = tmp_path / "daemon", tmp_path / "state"
    daemon_dir.mkdir()
    proc, _out, err = spawn(daemon_dir, "reconcile", "--repo", str(origin), "--interval", "1s",
                            "--metrics-port", "0", "--metrics-address", "127.0.0.1",
                            "--state-dir", str(state), name="daemon")
    with stopped_at_end(proc):
        wait_until("the first revision applied", lambda: any(
            r["revision"] == first and r["result"] == "applied" for r in history(state)),
            proc, err)
        add_instance(work, "web-9")
        second = commit_all(work, "web-9")
        git(work, "push", "-q", "origin", "main")
        wait_until("web-9 applied", lambda: "web-9" in nbctl(
            nb.nb_remote, "--bare", "--columns=name", "list", "Logical_Switch_Port"), proc, err)
        git(work, "reset", "-q", "--hard", first)
        git(work, "push", "-q", "--force", "origin", "main")
        before = len(history(state))
        wait_until("the force-pushed revision reconciled", lambda: any(
            r["revision"] == first and r["result"] == "applied"
            for r in history(state)[before:]), proc, err)
        assert "web-9" not in nbctl(nb.nb_remote, "--bare", "--columns=name", "list",
                                    "Logical_Switch_Port")
        assert second not in [r["revision"] for r in history(state)[-1:]]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert "Traceback" not in err.read_text()


def test_the_rendered_cache_key_holds_every_input(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    work = ovn_only_repo(tmp_path / "work", northbound="${UNET_TEST_NB}")
    monkeypatch.setenv("UNET_TEST_NB", "unix:/nowhere/a.sock")

    def key(held: dict[str, Held] | None = None, only: list[str] | None = None) -> str:
        items = list(repo_files(work, None))
        head = validate_repo(work)
        managers = managers_of(Model(head.context), only, resolve=True)
        return rendered_key(inputs_digest(items, 1 << 20), managers,
                            held if held is not None else {"a": Held("10.0.0.5", "s")})

    base = key()
    assert key() == base, "the same inputs: the same key"
    changed = {
        "a manifest": lambda: (work / "tenants" / "acme" / "network.yaml").write_text(
            (work / "tenants" / "acme" / "network.yaml").read_text() + "\n# a comment\n"),
        "the environment of a config": lambda: monkeypatch.setenv("UNET_TEST_NB",
                                                                  "unix:/nowhere/b.sock"),
        "unet's code": lambda: monkeypatch.setattr("unet.reconciler.cache.code_digest",
                                                   lambda: "another version"),
    }
    for what, change in changed.items():
        before = key()
        change()
        assert key() != before, f"{what} changed, the key did not"
    after = key()
    assert key(held={"a": Held("10.0.0.6", "s")}) != after, "an allocation's value"
    assert key(held={"a": Held("10.0.0.5", "t")}) != after, "an allocation's scope"
    assert key(held={}) != after, "an allocation released"
    assert key(only=[]) != after, "the managers of the run"


def _owner(remote: str, table: str, row: str) -> str:
    return nbctl(remote, "get", table, row, 'external_ids:"unet:owner"').strip().strip('"')


def _ours(remote: str, table: str, column: str) -> list[str]:
    return nbctl(remote, "--bare", f"--columns={column}", "find", table,
                 "external_ids:unet\\:installation=example").split()


def _vm_port(remote: str) -> str:
    """A VM's port that records the addresses allocated to it: web-1's, each time (not the
    first in the server's order, which may be db-1's, whose address its manifest declares:
    an address recorded there by hand moves nothing)."""
    name = "unet.acme.vm.web-1.0"
    assert name in nbctl(remote, "--bare", "--columns=name", "list", "Logical_Switch_Port")
    return name


def _wait_for(reconciler: Reconciler, timeout: float = 10.0, quiet: bool = False) -> None:
    """Until a replica has news (what wakes the daemon); `quiet`: news or not, within a
    second (a run's own writes heard back)."""
    assert reconciler.watches is not None
    deadline = time.monotonic() + (1.0 if quiet else timeout)
    while not reconciler.watches.wake.is_set():
        if quiet and time.monotonic() >= deadline:
            return
        assert time.monotonic() < deadline, "no change arrived in the replica"
        time.sleep(0.02)
    time.sleep(0.2)  # the rest of the edit's transactions
    reconciler.watches.wake.clear()



EDITS_OF_ONE_TENANT = {
    "a rule changed": ("tenants/acme/security-groups.yaml", "portFrom: 22\n      portTo: 22",
                       "portFrom: 2222\n      portTo: 2222"),
    # in a file of its own: compute.yaml holds web-k1, on a provider network, whose
    # re-parsed manifest would widen the change to every tenant
    "a VM added": ("tenants/acme/web-9.yaml", None, "---\napiVersion: network.osac.io/"
                   "v1alpha1\nkind: ComputeInstance\nmetadata:\n  name: web-9\nspec:\n"
                   "  networkAttachments:\n    - subnet: web\n      securityGroups: [web]\n"),
    "a rule of another tenant": ("tenants/globex/security-groups.yaml", "portFrom: 8443",
                                 "portFrom: 9443"),
}


@pytest.mark.parametrize("edit", sorted(EDITS_OF_ONE_TENANT))
def test_rendering_only_the_changed_tenants_gives_what_rendering_everything_does(
        tmp_path: Path, edit: str) -> None:
    work = ovn_only_repo(tmp_path / "work")
    parsed = ParsedFiles()
    base = validate_repo(work, parsed=parsed)
    applied = render_desired(base, {}).allocations.values  # as the backends record them
    before = render_desired(base, {key: a.held() for key, a in applied.items()})
    assert before.held
    path, old, new = EDITS_OF_ONE_TENANT[edit]
    text = (work / path).read_text() if (work / path).exists() else ""
    (work / path).write_text(text + new if old is None else text.replace(old, new, 1))
    head = validate_repo(work, parsed=parsed)
    tenants = changed_tenants(base, head)
    tenant = path.split("/")[1]  # and the tenants peered with it, whose rows it moves
    assert tenants == {tenant, *peered_with({tenant}, base, head)}
    composed = rerender_tenants(before, base, head, tenants)
    assert composed is not None
    everything = render_desired(head, before.held)
    assert {o.uid: o for o in composed.objects} == {o.uid: o for o in everything.objects}
    assert composed.digest("ovn") == everything.digest("ovn")
    # Every tenant's allocations, as after an apply the backends record them: the daemon
    # then knows that rendering with those gives this desired state again.
    assert composed.allocations.values == everything.allocations.values


WEB_2 = "acme/ComputeInstance/web-2/0"
#: Recorded allocations changed by hand (key → new value, None: gone), and the tenants
#: rendered again for it (None: everything, as what tenants share changed).
ALLOCATIONS_CHANGED: dict[str, tuple[dict[str, str | None], frozenset[str] | None]] = {
    "a VM's port deleted": ({f"{kind}/{WEB_2}": None for kind in ("ipv4", "ipv6", "mac")},
                            frozenset({"acme"})),
    "an address edited": ({"ipv4/acme/ComputeInstance/web-1/0": "10.10.1.50"},
                          frozenset({"acme"})),
    "a VIP and a MAC of two tenants": ({"vip/acme/k1/api": "10.10.11.242",
                                        "mac/globex/ComputeInstance/app-1/0":
                                            "02:ec:d4:e6:2f:51"}, frozenset({"acme", "globex"})),
    "an address on a provider network": (
        {"ipv4/globex/BaremetalInstance/db-metal/2": "192.168.50.101"}, None),
    "an external address": ({"eip/acme/web-1-public": None}, None),
    "a segment id": ({"segment/None/storage-b": "301"}, None),
}


@pytest.mark.parametrize("edit", sorted(ALLOCATIONS_CHANGED))
def test_rendering_again_only_the_tenants_whose_allocations_changed_gives_what_rendering_everything_does(  # noqa: E501
        tmp_path: Path, edit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    work = ovn_only_repo(tmp_path / "work")
    head = validate_repo(work)
    applied = render_desired(head, {}).allocations.values
    held = {key: a.held() for key, a in applied.items()}
    before = render_desired(head, ParsedHoldings(held))
    changes, tenants = ALLOCATIONS_CHANGED[edit]
    now = dict(held)
    for key, value in changes.items():
        if value is None:
            del now[key]
        else:
            now[key] = Held(value, held[key].scope)
    render = desired_module.render_desired
    rendered = _spy_on_renders(monkeypatch)
    found = rerender_held(before, head, now)
    everything = render(head, now)
    if tenants is None:
        assert found is None
        return
    assert found is not None and rendered == [tenants, tenants]
    desired, owners = found
    assert {o.uid: o for o in desired.objects} == {o.uid: o for o in everything.objects}
    assert desired.digest("ovn") == everything.digest("ovn")
    assert desired.allocations.values == everything.allocations.values
    assert owners == changed_owners(before, everything)
    if edit != "a VM's port deleted":  # that one is given its addresses back
        assert owners


def test_a_commit_of_one_tenant_is_planned_for_that_tenant_and_leaves_nothing(
        nb: OvnLab, tmp_path: Path) -> None:
    work = ovn_only_repo(tmp_path / "work", northbound=nb.nb_remote, mode="repair")
    reconciler = _reconciler(work, tmp_path)
    try:
        reconciler.run_once()
        reconciler.run_once()
        rules = work / "tenants" / "acme" / "security-groups.yaml"
        rules.write_text(rules.read_text().replace("portFrom: 22\n      portTo: 22",
                                                   "portFrom: 2222\n      portTo: 2222", 1))
        run = reconciler.run_once()
        assert run.result == "applied" and run.scope != "full", run
        acme = [m for m in validate_repo(work).manifests if m.tenant == "acme"]
        assert run.scope == f"{len(acme)} owners", "acme's resources, and no others"
        assert "2222" in nbctl(nb.nb_remote, "--bare", "--columns=match", "list", "ACL")
        # A plan of everything, made afresh, agrees: nothing is left to do.
        fresh = Reconciler(Options(path=work, state_dir=tmp_path / "fresh", workdir=tmp_path))
        check = fresh.run_once()
        assert (check.result, check.scope) == ("ok", "full"), check.message
    finally:
        assert reconciler.watches is not None
        reconciler.watches.close()


def test_a_server_away_when_the_daemon_starts_is_an_error_run_not_a_hang(
        nb: OvnLab, tmp_path: Path) -> None:
    work = ovn_only_repo(tmp_path / "work", northbound=nb.nb_remote, mode="repair")
    nb.stop_daemon("nb")
    reconciler = _reconciler(work, tmp_path)
    try:
        started = time.monotonic()
        away = reconciler.run_once()
        assert away.result == "error" and "nb.sock" in away.message, away.message
        assert time.monotonic() - started < 20
        nb.start_db("nb", NB_SCHEMA)
        assert reconciler.run_once().result == "applied"
        reconciler.run_once()
        acl = _first_acl(nb.nb_remote)
        nbctl(nb.nb_remote, "set", "ACL", acl, "priority=1999")
        _wait_for(reconciler)
        run = reconciler.run_once()
        assert (run.result, run.scope) == ("applied", "1 owner"), "watching once it is back"
    finally:
        assert reconciler.watches is not None
        reconciler.watches.close()


def test_a_quiet_server_keeps_its_watch(nb: OvnLab, tmp_path: Path) -> None:
    """Over a unix socket the server sends no inactivity probes: the watch's own keep the
    connection from looking dead (which would load every row again)."""
    work = ovn_only_repo(tmp_path / "work", northbound=nb.nb_remote, mode="repair")
    managers = work / "provider" / "managers.yaml"
    managers.write_text(managers.read_text().replace(
        "    gatewayChassis: [gw-1]\n", "    gatewayChassis: [gw-1]\n"
        "    transactionTimeoutSeconds: 1.5\n", 1))
    reconciler = _reconciler(work, tmp_path)
    try:
        reconciler.run_once()
        reconciler.run_once()
        assert reconciler.watches is not None
        [watch] = reconciler.watches.watches.values()
        time.sleep(5)
        assert watch.failure is None and watch.reconnects == 0
        assert reconciler.run_once().scope is None, "still nothing to plan"
    finally:
        assert reconciler.watches is not None
        reconciler.watches.close()


def test_a_manager_without_a_change_feed_is_read_on_every_run_and_the_others_watched(
        nb: OvnLab, tmp_path: Path) -> None:
    """Watching is per manager: the example's Kubernetes manager has no change feed, and
    the OVN manager beside it is watched all the same, planned or read for its
    allocations only (a run of the Kubernetes manager alone)."""
    work = _with_kubernetes(tmp_path / "work", nb.nb_remote)
    managers = managers_of(Model(validate_repo(work).context), resolve=True)
    assert not managers["kubernetes"].watchable and managers["ovn"].watchable
    watches = Watches(tmp_path)
    try:
        assert set(watches.follow(managers, {})) == {"ovn"}
        assert watches.polled == {"kubernetes"}
        assert set(watches.follow({"kubernetes": managers["kubernetes"]},
                                  {"ovn": managers["ovn"]})) == {"ovn"}
        assert watches.polled == {"kubernetes"}
    finally:
        watches.close()


def _with_kubernetes(target: Path, northbound: str) -> Path:
    """The example repo, both managers: OVN on `northbound`, the Kubernetes manager on the
    contexts of $KUBECONFIG; `reconcile: repair`."""
    copy_checkout(EXAMPLE, target)
    managers = target / "provider" / "managers.yaml"
    managers.write_text(managers.read_text().replace("northbound: embedded",
                                                     f"northbound: {northbound}"))
    set_mode(target, "repair")
    return target


@pytest.fixture
def clusters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
             ) -> Iterator[dict[str, FakeCluster]]:
    """The example's hosting clusters: Kubernetes API stand-ins (tests/k8s_fixtures)."""
    with contextlib.ExitStack() as stack:
        found = {name: stack.enter_context(FakeCluster(name, namespaces=K8S_NAMESPACES))
                 for name in ("hosting-a1", "hosting-a2")}
        kubeconfig = tmp_path / "kubeconfig"
        write_kubeconfig(kubeconfig, {name: c.url for name, c in found.items()})
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        yield found


def test_a_kubernetes_manager_beside_ovn_keeps_ovn_watched(
        nb: OvnLab, clusters: dict[str, FakeCluster], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: OVN's replica is read and only the owners of changed rows are planned for
    it; the Kubernetes manager, which cannot be watched, is read and planned whole on
    every run, so that its drift is repaired by the next run; a run plans both."""
    work = _with_kubernetes(tmp_path / "work", nb.nb_remote)
    reconciler = _reconciler(work, tmp_path)
    try:
        first = reconciler.run_once()
        assert (first.result, first.scope) == ("applied", "full"), first.message
        assert reconciler.watches is not None and set(reconciler.watches.watches) == {"ovn"}
        assert reconciler.watches.polled == {"kubernetes"}
        settled = reconciler.run_once()
        assert settled.result == "ok" and settled.scope is not None
        assert settled.scope.endswith(" owners, kubernetes whole"), settled.scope
        ovn_reads = _count_reads(monkeypatch)

        acl = _first_acl(nb.nb_remote)
        nbctl(nb.nb_remote, "set", "ACL", acl, "priority=1999")
        _wait_for(reconciler)
        repaired = reconciler.run_once()
        assert (repaired.result, repaired.repaired) == ("applied", 1), repaired.message
        assert repaired.scope == "1 owner, kubernetes whole"
        assert nbctl(nb.nb_remote, "get", "ACL", acl, "priority").strip() != "1999"
        k8s_rows = sum(1 for c in clusters.values() for plural in CUDN_AND_POOLS
                       for _ in c.objects(plural))
        assert sum(repaired.row_counts.values()) < k8s_rows + first.row_counts["create"] / 5
        _wait_for(reconciler, quiet=True)
        assert reconciler.run_once().result == "ok", "its own write, heard back"

        # Nobody tells the daemon of a change in a cluster: its next run reads it anyway.
        a1 = clusters["hosting-a1"]
        a1.edit("ipaddresspools", "unet.acme.web",
                lambda o: o["spec"].update(addresses=["10.10.1.0/24"]),
                namespace="metallb-system")
        assert not reconciler.watches.wake.is_set()
        k8s = reconciler.run_once()
        assert (k8s.result, k8s.repaired, k8s.scope) == ("applied", 1,
                                                          "0 owners, kubernetes whole")
        pool = a1.get("ipaddresspools", "unet.acme.web", "metallb-system")
        assert pool is not None and pool["spec"]["addresses"] == ["10.10.1.240/28"]

        # A subnet's networks deleted by hand from the clusters: the segment id OVN records
        # is recorded by no cluster; the allocations the backends record changed since the
        # run was scoped (their scope: the OVN port's subnet alone now), the desired state
        # they give did not: the run goes on.
        renders = reconciler.incremental.rendered.renders
        held = reconciler.incremental.polled_held["kubernetes"]
        for cluster in clusters.values():
            if cluster.get("clusteruserdefinednetworks", "unet.acme.nodes"):
                cluster.remove("clusteruserdefinednetworks", "unet.acme.nodes")
        recreated = reconciler.run_once()
        assert (recreated.result, recreated.scope) == ("applied", "0 owners, kubernetes whole")
        assert all(c.get("clusteruserdefinednetworks", "unet.acme.nodes")
                   for c in clusters.values())
        assert reconciler.incremental.polled_held["kubernetes"] == held, "recorded again"
        assert reconciler.incremental.rendered.renders == renders
        _wait_for(reconciler, quiet=True)
        idle = reconciler.run_once()
        assert (idle.result, idle.scope) == ("ok", "0 owners, kubernetes whole")
        assert ovn_reads == [], "OVN was read from its replica only"

        # When what a polled backend records changes the desired state of owners the run
        # did not read (Rescope, below), the run plans everything.
        scoped = reconciler.incremental.reading

        def rescoped(files: str, scope: Scope) -> Reading:
            reading = scoped(files, scope)
            if scope.owners is None:
                return reading

            def desired(*_args: Any) -> Any:
                raise Rescope("as if")

            return dataclasses.replace(reading, desired=desired)

        reconciler.incremental.reading = rescoped  # type: ignore[method-assign]
        acl = _first_acl(nb.nb_remote)
        nbctl(nb.nb_remote, "set", "ACL", acl, "priority=1998")
        _wait_for(reconciler)
        everything = reconciler.run_once()
        assert (everything.result, everything.scope, everything.repaired) == (
            "applied", "full", 1), everything.message
        del reconciler.incremental.reading

        fresh = Reconciler(Options(path=work, state_dir=tmp_path / "fresh", workdir=tmp_path))
        check = fresh.run_once()
        assert (check.result, check.scope) == ("ok", "full"), check.message
    finally:
        assert reconciler.watches is not None
        reconciler.watches.close()


def test_a_fabric_read_for_its_allocations_is_watched(
        nb: OvnLab, clusters: dict[str, FakeCluster], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon of the Kubernetes manager alone takes the segment ids and addresses the
    fabric records from the fabric's replica: OVN is not read on every run."""
    work = _with_kubernetes(tmp_path / "work", nb.nb_remote)
    both = Reconciler(Options(path=work, state_dir=tmp_path / "both", workdir=tmp_path))
    assert both.run_once().result == "applied"
    daemon = Reconciler(Options(path=work, state_dir=tmp_path / "state", workdir=tmp_path,
                                watch=True, managers=["kubernetes"]))
    try:
        assert daemon.run_once().result == "ok"
        assert daemon.watches is not None and set(daemon.watches.watches) == {"ovn"}
        reads = _count_reads(monkeypatch)
        cudn = clusters["hosting-a1"].get("clusteruserdefinednetworks", "unet.acme.web")
        assert cudn is not None
        clusters["hosting-a1"].remove("clusteruserdefinednetworks", "unet.acme.web")
        again = daemon.run_once()
        assert (again.result, again.scope) == ("applied", "0 owners, kubernetes whole")
        assert clusters["hosting-a1"].get("clusteruserdefinednetworks", "unet.acme.web"
                                          )["spec"] == cudn["spec"]
        assert reads == []
    finally:
        assert daemon.watches is not None
        daemon.watches.close()


def test_a_polled_backends_new_allocations_are_planned_or_make_the_run_plan_everything(
        tmp_path: Path) -> None:
    """A run scoped for the allocations a polled backend recorded at the last run finds
    others: when the desired state they give differs only for owners the run reads, it
    goes on with that; else it stops before planning (Rescope), to plan everything."""
    work = ovn_only_repo(tmp_path / "work")
    head = validate_repo(work)
    applied = render_desired(head, {}).allocations.values
    held = {key: a.held() for key, a in applied.items()}
    before = render_desired(head, ParsedHoldings(held))
    moved = {**held, "ipv4/acme/ComputeInstance/web-1/0": Held("10.10.1.50",
                                                                "Subnet/acme/web")}
    incremental = Incremental(Watches(tmp_path), None, 3600.0)

    def desired(owners: frozenset[str]) -> Any:
        scope = Scope({"ovn": Watch()}, owners, before, held, frozenset({"polled"}),
                      order=("ovn", "polled"))
        return incremental.reading("files", scope).desired(head, moved, ["ovn"])

    everything = render_desired(head, moved)
    owners = changed_owners(before, everything)
    assert "ComputeInstance/acme/web-1" in owners
    with pytest.raises(Rescope):
        desired(owners - {"ComputeInstance/acme/web-1"})
    found = desired(owners)
    assert {o.uid: o for o in found.objects} == {o.uid: o for o in everything.objects}
    assert incremental.reading("files", Scope({"ovn": Watch()}, frozenset(), before, held)
                               ).desired(head, dict(held), ["ovn"]) is before, \
        "the same allocations (another object): the scope's desired state"


K8S_NAMESPACES = ("default", "unet-system", "metallb-system", "acme", "initech")
CUDN_AND_POOLS = ("clusteruserdefinednetworks", "ipaddresspools")


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every read of the whole Northbound by a session, from now on."""
    reads: list[str] = []
    observe = OvnSession.observe

    def counted(self: OvnSession) -> Any:
        reads.append("observe")
        return observe(self)

    monkeypatch.setattr(OvnSession, "observe", counted)
    return reads


def test_commits_of_one_tenant_leave_nothing_for_a_full_collection(
        nb: OvnLab, tmp_path: Path) -> None:
    """A commit of one tenant is validated and that tenant rendered again, planned for its
    owners only; the daemon then collects only the young generations (a full collection
    scans the replica and the desired state: seconds at a thousand tenants). What the
    previous revision built must be freed without the cyclic collector, or the daemon
    would grow with every commit until its next full plan."""
    work = ovn_only_repo(tmp_path / "work", northbound=nb.nb_remote, mode="repair")
    rules = work / "tenants" / "acme" / "security-groups.yaml"
    original = rules.read_text()
    assert "cidr: 192.0.2.0/24" in original
    reconciler = _reconciler(work, tmp_path)
    enabled = gc.isenabled()
    heap.switch_off()
    try:
        reconciler.run_once()
        heap.after_run(young_only=False)
        alive = []
        for cycle in range(8):
            rules.write_text(original.replace("cidr: 192.0.2.0/24", "cidr: 198.51.100.0/24")
                             if cycle % 2 == 0 else original)
            run = reconciler.run_once()
            assert run.result == "applied" and run.scope != "full", (run.result, run.scope)
            heap.after_run(young_only=True)
            alive.append(len(gc.get_objects()))
            _wait_for(reconciler)  # its own writes, heard back: the next run has no news
            assert reconciler.run_once().result == "ok"
            heap.after_run(young_only=True)
        assert max(alive[2:]) - min(alive[2:]) < 20, f"objects alive after each run: {alive}"
        assert_no_cycles_of_ours()
    finally:
        if enabled:
            gc.enable()
        assert reconciler.watches is not None
        reconciler.watches.close()


def test_targeted_runs_collect_young_garbage_only_and_do_not_grow(
        nb: OvnLab, tmp_path: Path) -> None:
    work = ovn_only_repo(tmp_path / "work", northbound=nb.nb_remote, mode="repair")
    reconciler = _reconciler(work, tmp_path)
    enabled = gc.isenabled()
    heap.switch_off()
    try:
        for _ in range(2):
            reconciler.run_once()
            heap.after_run(young_only=False)
        acl = _first_acl(nb.nb_remote)
        alive = []
        for cycle in range(8):
            nbctl(nb.nb_remote, "set", "ACL", acl, f"priority={1900 + cycle}")
            _wait_for(reconciler)
            run = reconciler.run_once()
            assert (run.result, run.scope) == ("applied", "1 owner")
            heap.after_run(young_only=True)
            assert gc.garbage == []
            alive.append(len(gc.get_objects()))
        assert max(alive[2:]) - min(alive[2:]) < 200, f"objects alive after each run: {alive}"
    finally:
        if enabled:
            gc.enable()
        assert reconciler.watches is not None
        reconciler.watches.close()


def test_a_peering_that_moves_a_third_tenants_link_renders_that_tenant(
        tmp_path: Path) -> None:
    """acme accepts initech's peering request with a network whose pair sorts before
    globex's corp-mirror link and hashes into its /30, which therefore moves
    (tests/test_plan_scope.py). Rendering acme and its peer initech again, and keeping
    globex's rows as they were, would give initech's new end of the link and globex's
    old one: the link broken until a full render. globex is rendered too."""
    from .test_plan_scope import EDGE, _acme_in_region_b

    work = ovn_only_repo(tmp_path / "work")
    _acme_in_region_b(work)
    parsed = ParsedFiles()
    base = validate_repo(work, parsed=parsed)
    applied = render_desired(base, {}).allocations.values
    before = render_desired(base, {key: a.held() for key, a in applied.items()})
    (work / f"tenants/acme/{EDGE}.yaml").write_text(
        (work / f"tenants/acme/{EDGE}.yaml").read_text() + "---\napiVersion: network.osac.io/"
        "v1alpha1\nkind: VirtualNetworkPeering\nmetadata:\n  name: edge-mirror\nspec:\n"
        f"  virtualNetwork: {EDGE}\n  peer: {{tenant: initech, virtualNetwork: mirror}}\n")
    head = validate_repo(work, parsed=parsed)
    assert head.ok
    everything = render_desired(head, before.held)
    one_hop = rerender_tenants(before, base, head, frozenset({"acme", "initech"}))
    assert one_hop is not None
    link = "ovn:Logical_Router_Port/globex/corp/peering/initech/mirror"
    assert {o.uid: o for o in one_hop.objects}[link] != \
        {o.uid: o for o in everything.objects}[link]  # what one hop would have left
    tenants = changed_tenants(base, head)
    assert tenants is None or "globex" in tenants  # the example has three tenants: None
    composed = rerender_tenants(before, base, head, tenants) if tenants is not None \
        else everything
    assert composed is not None
    assert {o.uid: o for o in composed.objects} == {o.uid: o for o in everything.objects}
