"""Properties of plans between two revisions: determinism, and that applying a plan works.

Determinism: the same inputs give a byte-identical plan, whatever the order and layout of
the files. Apply: random valid edits of the example repo are planned with the example as
base; carrying the plan's waves out on an in-memory model of the backends (the base's
rendered objects) must give exactly the head's desired objects, every step must find what
it depends on, and the result must be stable (planning it again changes nothing).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from unet.reconciler.desired import render_desired
from unet.reconciler.diff import Action, Change
from unet.reconciler.objects import (
    TAG_ALLOCATION,
    TAG_IMMUTABLE,
    UNKNOWN,
    BackendObject,
    index_objects,
    observed_allocations,
)
from unet.reconciler.plan import Plan
from unet.reconciler.plan_io import dumps
from unet.reconciler.planner import plan_between
from unet.reconciler.sources import SourceFile
from unet.reconciler.validate import Validation, validate_files, validate_repo

from .conftest import EXAMPLE
from .test_plan_golden import edit_text, plan_document, validated

Files = dict[str, list[dict[str, Any]]]  # repo path → its documents


def read_files(root: Path) -> Files:
    return {path.relative_to(root).as_posix(): [d for d in yaml.safe_load_all(path.read_text())
                                                if d is not None]
            for path in sorted(root.rglob("*.yaml"))}


def validate_memory(files: Files) -> Validation:
    texts = {path: yaml.safe_dump_all(docs, sort_keys=False).encode()
             for path, docs in files.items() if docs}  # a file of no manifests is an error
    return validate_files(iter([SourceFile(path, len(text), lambda text=text: text)
                                for path, text in sorted(texts.items())]))


EXAMPLE_FILES = read_files(EXAMPLE)
BASE = validated(EXAMPLE)
BASE_OBJECTS = render_desired(BASE, {}).objects


# --- determinism --------------------------------------------------------------------------


def layout_independent(doc: dict[str, Any]) -> dict[str, Any]:
    """The plan document without what names files: inputs, and diagnostics' file and line."""
    doc = dict(doc)
    doc.pop("inputs", None)
    doc["diagnostics"] = sorted(
        ({k: v for k, v in d.items() if k not in ("file", "line")} for d in doc["diagnostics"]),
        key=lambda d: json.dumps(d, sort_keys=True))
    return doc


def edited_head(root: Path) -> Path:
    """The example with a few edits of different kinds, for a plan with a bit of everything."""
    files = copy.deepcopy(EXAMPLE_FILES)
    del files["tenants/initech/compute.yaml"], files["tenants/globex/baremetal.yaml"]
    for _path, doc in docs_of(files, "ComputeInstance"):
        if doc["metadata"]["name"] == "web-2":
            doc["spec"]["networkAttachments"][0]["securityGroups"] = ["web", "db"]
    write_layout(files, root, None)
    edit_text(root, "tenants/acme/all.yaml", "ipv4Cidr: 10.10.8.0/22", "ipv4Cidr: 10.10.12.0/22")
    return root


def area_of(path: str) -> str:
    return "/".join(path.split("/")[:2]) if path.startswith("tenants/") else "provider"


def write_layout(files: Files, root: Path, rng: random.Random | None) -> None:
    """Every document in a file of its own with a random name (rng), or one file per area
    (provider/, tenants/<t>/) with its documents in reverse order (no rng)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for path, docs in files.items():
        if path == "unet.yaml":
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(yaml.safe_dump_all(docs))
            continue
        groups.setdefault(area_of(path), []).extend(docs)
    for area, docs in groups.items():
        if rng is None:
            out = {f"{area}/all.yaml": list(reversed(docs))}
        else:
            names = rng.sample(range(10**6), len(docs))
            nest = ["", "a/", "b/c/"]
            out = {f"{area}/{rng.choice(nest)}{n:06d}.yaml": [d] for n, d in zip(names, docs,
                                                                             strict=True)}
        for path, content in out.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(yaml.safe_dump_all(content))


def test_same_inputs_give_byte_identical_plans(tmp_path: Path) -> None:
    head = edited_head(tmp_path / "head")
    inputs = {"head": {"path": "head"}, "base": {"path": "base"}}
    first = dumps(plan_between(validate_repo(EXAMPLE), validate_repo(head), inputs))
    second = dumps(plan_between(validate_repo(EXAMPLE), validate_repo(head), inputs))
    assert first == second
    assert json.loads(first)["has_changes"]


def test_plan_does_not_depend_on_file_order_or_layout(tmp_path: Path) -> None:
    head = edited_head(tmp_path / "head")
    expected = layout_independent(plan_document(plan_between(BASE, validated(head), {})))
    files = read_files(head)
    for name, rng in (("one-per-file", random.Random(7)), ("merged-reversed", None)):
        root = tmp_path / name
        write_layout(files, root, rng)
        base_root = tmp_path / f"{name}-base"
        write_layout(EXAMPLE_FILES, base_root, rng)
        plan = plan_between(validated(base_root), validated(root), {})
        assert layout_independent(plan_document(plan)) == expected, name


def test_planning_a_revision_against_itself_changes_nothing() -> None:
    plan = plan_between(BASE, BASE, {})
    assert not plan.has_changes and plan.waves == [] and plan.ok
    assert {r.action for r in plan.resources} == {"no-op"}


# --- random edits ---------------------------------------------------------------------------


def docs_of(files: Files, kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(path, d) for path, docs in sorted(files.items()) for d in docs
            if d.get("kind") == kind]


def tenant_of(path: str) -> str:
    return path.split("/")[1]


def remove_doc(files: Files, path: str, doc: dict[str, Any]) -> None:
    files[path] = [d for d in files[path] if d is not doc]


def fresh_name(files: Files, kind: str, prefix: str) -> str:
    taken = {d["metadata"]["name"] for _p, d in docs_of(files, kind)}
    return next(f"{prefix}-{n}" for n in range(100) if f"{prefix}-{n}" not in taken)


def subnets(files: Files) -> list[tuple[str, dict[str, Any]]]:
    return docs_of(files, "Subnet")


def groups_of(files: Files, tenant: str, vn: str) -> list[str]:
    return sorted({"default"} | {d["metadata"]["name"] for p, d in docs_of(files, "SecurityGroup")
                                 if tenant_of(p) == tenant and d["spec"]["virtualNetwork"] == vn})


def add_instance(files: Files, rng: random.Random) -> None:
    path, subnet = rng.choice(subnets(files))
    tenant, vn = tenant_of(path), subnet["spec"]["virtualNetwork"]
    groups = groups_of(files, tenant, vn)
    files.setdefault(f"tenants/{tenant}/generated.yaml", []).append({
        "apiVersion": "network.osac.io/v1alpha1", "kind": "ComputeInstance",
        "metadata": {"name": fresh_name(files, "ComputeInstance", "gen")},
        "spec": {"networkAttachments": [{
            "subnet": subnet["metadata"]["name"],
            "securityGroups": rng.sample(groups, rng.randint(1, min(2, len(groups))))}]}})


def remove_instance(files: Files, rng: random.Random) -> None:
    found = docs_of(files, "ComputeInstance")
    if found:
        remove_doc(files, *rng.choice(found))


def toggle_groups(files: Files, rng: random.Random) -> None:
    workloads = [item for kind in ("ComputeInstance", "BaremetalInstance", "Cluster")
                 for item in docs_of(files, kind)]
    path, workload = rng.choice(workloads)
    attachment = rng.choice(workload["spec"]["networkAttachments"])
    own = next(a["subnet"] for a in workload["spec"]["networkAttachments"] if "subnet" in a)
    vn = next(d["spec"]["virtualNetwork"] for p, d in subnets(files)
              if tenant_of(p) == tenant_of(path) and d["metadata"]["name"] == own)
    groups = groups_of(files, tenant_of(path), vn)
    attachment["securityGroups"] = rng.sample(groups, rng.randint(1, len(groups)))


REMOTE_CIDRS = ["0.0.0.0/0", "192.0.2.0/24", "10.10.0.0/16", "198.51.100.7/32", "::/0",
                "2001:db8::/32"]


def random_rule(rng: random.Random, groups: list[str]) -> dict[str, Any]:
    protocol = rng.choice(["tcp", "udp", "icmp", "all"])
    rule: dict[str, Any] = {"protocol": protocol}
    if protocol in ("tcp", "udp") and rng.random() < 0.8:
        first = rng.choice([22, 80, 443, 5432, 8000])
        rule.update(portFrom=first, portTo=first + rng.choice([0, 0, 99]))
    if protocol == "icmp" and rng.random() < 0.5:
        rule["icmpType"] = rng.choice([0, 8])
    if groups and rng.random() < 0.3:
        rule["securityGroup"] = rng.choice(groups)
    else:
        rule["cidr"] = rng.choice(REMOTE_CIDRS)
    return rule


def add_rule(files: Files, rng: random.Random) -> None:
    path, group = rng.choice(docs_of(files, "SecurityGroup"))
    declared = [n for n in groups_of(files, tenant_of(path), group["spec"]["virtualNetwork"])
                if n != "default"]
    rules = group["spec"].setdefault(rng.choice(["ingress", "egress"]), [])
    rule = random_rule(rng, declared)
    if rule not in rules:
        rules.insert(rng.randint(0, len(rules)), rule)


def remove_rule(files: Files, rng: random.Random) -> None:
    _path, group = rng.choice(docs_of(files, "SecurityGroup"))
    rules = group["spec"].get(rng.choice(["ingress", "egress"])) or []
    if rules:
        rules.pop(rng.randrange(len(rules)))


def add_subnet(files: Files, rng: random.Random) -> None:
    tenant, vn, pattern, thirds = rng.choice([
        ("acme", "prod", "10.10.{}.0/24", range(20, 60)),
        ("globex", "corp", "10.10.{}.0/24", range(20, 60)),
        ("initech", "lab", "192.168.{}.0/24", range(2, 16))])
    cidr = ipaddress.ip_network(pattern.format(rng.choice(thirds)))
    for path, subnet in subnets(files):
        if tenant_of(path) == tenant and subnet["spec"]["virtualNetwork"] == vn and \
                cidr.overlaps(ipaddress.ip_network(subnet["spec"]["ipv4Cidr"])):
            return
    files.setdefault(f"tenants/{tenant}/generated.yaml", []).append({
        "apiVersion": "network.osac.io/v1alpha1", "kind": "Subnet",
        "metadata": {"name": fresh_name(files, "Subnet", "gsub")},
        "spec": {"virtualNetwork": vn, "ipv4Cidr": str(cidr), "dhcp": rng.random() < 0.8}})


def remove_subnet(files: Files, rng: random.Random) -> None:
    """A subnet and every workload attached to it (their attachments become pending)."""
    path, subnet = rng.choice(subnets(files))
    tenant, name = tenant_of(path), subnet["metadata"]["name"]
    remove_doc(files, path, subnet)
    for kind in ("ComputeInstance", "BaremetalInstance", "Cluster"):
        for wpath, workload in docs_of(files, kind):
            if tenant_of(wpath) == tenant and any(
                    a.get("subnet") == name for a in workload["spec"]["networkAttachments"]):
                remove_doc(files, wpath, workload)


def remove_external_attachment(files: Files, rng: random.Random) -> None:
    found = [(p, d) for p, d in docs_of(files, "ExternalIPAttachment")
             if d["spec"]["target"].get("endpoint") != "api"]  # a Cluster needs its api
    if found:
        remove_doc(files, *rng.choice(found))


def fix_address(files: Files, rng: random.Random) -> None:
    """Give a port a fixed address: an immutable change, the port is replaced."""
    path, instance = rng.choice(docs_of(files, "ComputeInstance"))
    attachment = instance["spec"]["networkAttachments"][0]
    subnet = next(d for p, d in subnets(files) if tenant_of(p) == tenant_of(path)
                  and d["metadata"]["name"] == attachment["subnet"])
    network = ipaddress.ip_network(subnet["spec"]["ipv4Cidr"])
    attachment["ipAddress"] = str(network[rng.randint(100, 199)])


def move_subnet(files: Files, rng: random.Random) -> None:
    """Change a subnet's immutable IPv4 CIDR: its switch and everything on it is replaced."""
    path, subnet = rng.choice([(p, d) for p, d in subnets(files) if "ipv4Cidr" in d["spec"]])
    tenant, spec = tenant_of(path), subnet["spec"]
    vn = next(d for p, d in docs_of(files, "VirtualNetwork")
              if tenant_of(p) == tenant and d["metadata"]["name"] == spec["virtualNetwork"])
    others = [ipaddress.ip_network(d["spec"]["ipv4Cidr"]) for p, d in subnets(files)
              if tenant_of(p) == tenant and d is not subnet and "ipv4Cidr" in d["spec"]
              and d["spec"]["virtualNetwork"] == spec["virtualNetwork"]]
    old = ipaddress.ip_network(spec["ipv4Cidr"])
    free = [net for net in ipaddress.ip_network(vn["spec"]["ipv4Cidr"]).subnets(
        new_prefix=old.prefixlen) if net != old and not any(net.overlaps(o) for o in others)]
    spec["ipv4Cidr"] = str(rng.choice(free))
    for name in ("gateway", "allocationRanges", "excludeAddresses", "routes"):
        spec.pop(name, None)  # they name addresses of the old CIDR
    for kind in ("ComputeInstance", "BaremetalInstance"):
        for wpath, workload in docs_of(files, kind):
            for attachment in workload["spec"]["networkAttachments"]:
                if tenant_of(wpath) == tenant and attachment.get("subnet") == subnet["metadata"][
                        "name"]:
                    attachment.pop("ipAddress", None)


def prune_off(files: Files) -> None:
    files["unet.yaml"][0]["spec"]["prune"] = False


def remove_named(files: Files, kind: str, name: str) -> None:
    for path, doc in docs_of(files, kind):
        if doc["metadata"]["name"] == name:
            remove_doc(files, path, doc)


EDITS: dict[str, Callable[[Files, random.Random], None]] = {
    f.__name__: f for f in (add_instance, remove_instance, toggle_groups, add_rule, remove_rule,
                            add_subnet, remove_subnet, remove_external_attachment, fix_address,
                            move_subnet)}


# --- the in-memory backend ------------------------------------------------------------------


def apply_plan(plan: Plan, observed: Iterable[BackendObject]) -> dict[str, BackendObject]:
    """Carry out the plan's waves on `observed`, checking each step as a backend would."""
    state = index_objects(observed)
    changes = {c.uid: c for c in plan.changes}
    wave_of: dict[str, int] = {}
    for index, wave in enumerate(plan.waves):
        before = dict(state)
        deleted = {step.uid for step in wave if step.action is Action.DELETE}
        for step in (s.id for s in wave):
            action, uid = step.split(" ", 1)
            assert step not in wave_of, f"{step} appears twice"
            wave_of[step] = index
            change = changes[uid]
            if action == Action.DELETE:
                assert uid in state, f"{step}: nothing to delete"
                del state[uid]
                continue
            assert action in (Action.CREATE, Action.UPDATE) and change.after is not None
            assert (uid in before) == (action == Action.UPDATE), f"{step}: {uid in before=}"
            for dep in change.after.depends:  # must exist before the step, and stay
                dep_uid = f"{change.after.manager}:{dep}"
                assert dep_uid in before and dep_uid not in deleted, f"{step} needs {dep}"
            state[uid] = change.after
        for obj in state.values():  # OVSDB drops rows whose parent is gone
            if obj.parent is not None:
                assert f"{obj.manager}:{obj.parent[0]}" in state, f"{obj.uid} orphaned"
    expected_steps = {f"{a} {c.uid}" for c in plan.changes for a in c.action.steps}
    assert set(wave_of) == expected_steps
    check_wave_dependencies(plan, wave_of)
    return state


def check_wave_dependencies(plan: Plan, wave_of: dict[str, int]) -> None:
    for change in plan.changes:
        manager = change.obj.manager
        for action in change.action.steps:
            step = f"{action} {change.uid}"
            if action in (Action.CREATE, Action.UPDATE) and change.after is not None:
                for dep in change.after.depends:
                    dep_step = f"{Action.CREATE} {manager}:{dep}"
                    if dep_step in wave_of:
                        assert wave_of[dep_step] < wave_of[step], (step, dep_step)
            if action is Action.DELETE and change.before is not None:
                for dep in change.before.depends:  # dep is a parent or referenced row
                    dep_step = f"{Action.DELETE} {manager}:{dep}"
                    if dep_step in wave_of:
                        assert wave_of[dep_step] > wave_of[step], (step, dep_step)


def assert_matches_truth(planned: BackendObject, truth: BackendObject) -> None:
    """`planned` may say "known after apply" where only the apply knows; nothing else differs."""
    assert not truth.unknown, truth.uid
    assert (planned.table, planned.owner, planned.parent, dict(planned.refs)) == \
        (truth.table, truth.owner, truth.parent, dict(truth.refs)), planned.uid
    assert planned.fields.keys() == truth.fields.keys(), planned.uid
    for name, value in planned.fields.items():
        if name in planned.unknown:
            continue
        assert value == truth.fields[name], (planned.uid, name)
        assert UNKNOWN not in json.dumps(value, default=str), f"{planned.uid} {name} unmarked"
    for name, value in truth.meta.items():
        if name == TAG_IMMUTABLE and planned.unknown:
            continue  # may hash a value only the apply knows (a CUDN's vlan id)
        if name in planned.meta or not name.startswith(TAG_ALLOCATION):
            assert planned.meta.get(name) == value, (planned.uid, name)
    assert set(planned.meta) <= set(truth.meta), planned.uid


#: How much a resource's action changes, and how much a row's action needs of its resource:
#: a row created, updated or deleted in a resource that stays is an update of it; a row
#: replaced interrupts it, so the resource is replaced (or created or deleted as a whole).
RESOURCE_RANK = {"no-op": 0, "update": 1, "create": 2, "delete": 2, "replace": 2}
ROW_RANK = {"no-op": 0, "update": 1, "create": 1, "delete": 1, "replace": 2}


def assert_actions_not_milder_than_rows(plan: Plan) -> None:
    for resource in plan.resources:
        for change in resource.changes:
            row = change.action
            assert RESOURCE_RANK[resource.action] >= ROW_RANK[row], \
                f"{resource.address} {resource.action} while {change.uid} {row}"


def check_plan_applies(head: Validation) -> None:
    plan = plan_between(BASE, head, {})
    assert_actions_not_milder_than_rows(plan)
    state = apply_plan(plan, BASE_OBJECTS)
    prune = bool(render_desired(head, observed_allocations(BASE_OBJECTS)).model.config.prune)
    kept = {} if prune else {o.uid: o for o in BASE_OBJECTS}
    # With the flag plan_between used for the head: exactly its desired objects.
    planned = index_objects(render_desired(head, observed_allocations(BASE_OBJECTS),
                                           new_are_unknown=True).objects)
    assert state == {**kept, **planned}
    # With every allocation known: the same objects, up to values only the apply knows.
    truth = index_objects(render_desired(head, observed_allocations(BASE_OBJECTS)).objects)
    assert state.keys() == kept.keys() | truth.keys()
    for uid, obj in truth.items():
        assert_matches_truth(state[uid], obj)
        for dep in obj.depends:
            assert f"{obj.manager}:{dep}" in truth, f"{uid} depends on a missing {dep}"
    # After the apply, the backend holds the truth: planning again changes nothing.
    again = index_objects(render_desired(head, observed_allocations(truth.values())).objects)
    assert again == truth
    assert_unique_addresses(truth.values())  # with kept rows: see the xfail test below


def assert_unique_addresses(objects: Iterable[BackendObject]) -> None:
    """No two ports of one switch share a MAC or an IP address."""
    seen: dict[tuple[str, str], str] = {}
    for obj in objects:
        if obj.table != "Logical_Switch_Port" or obj.fields["type"] or obj.parent is None:
            continue
        for entry in obj.fields["addresses"]:
            for address in entry.split():
                other = seen.setdefault((obj.parent[0], address), obj.key)
                assert other == obj.key, f"{other} and {obj.key} both use {address}"


# UNET_PLAN_EXAMPLES=1000 for a longer campaign; the default keeps the suite fast.
@settings(max_examples=int(os.environ.get("UNET_PLAN_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.lists(st.tuples(st.sampled_from(sorted(EDITS)), st.integers(0, 2**32)),
                min_size=1, max_size=6), st.booleans())
def test_applying_the_plan_gives_the_head(edits: list[tuple[str, int]], prune: bool) -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    for name, seed in edits:
        EDITS[name](files, random.Random(seed))
    if not prune:
        prune_off(files)
    head = validate_memory(files)
    assume(head.ok)
    check_plan_applies(head)


def test_applying_the_initial_plan_gives_the_example() -> None:
    plan = plan_between(None, BASE, {})
    state = apply_plan(plan, [])
    assert state == index_objects(render_desired(BASE, {}, new_are_unknown=True).objects)


def test_every_edit_alone_keeps_the_example_valid() -> None:
    """The generators are meant to keep the repo valid; most single edits must."""
    valid = 0
    for _name, edit in sorted(EDITS.items()):
        for seed in range(3):
            files = copy.deepcopy(EXAMPLE_FILES)
            edit(files, random.Random(seed))
            head = validate_memory(files)
            valid += head.ok
            if head.ok:
                check_plan_applies(head)
    assert valid >= 0.8 * 3 * len(EDITS)


def test_rows_kept_by_prune_off_survive_a_replaced_parent() -> None:
    """web-2 leaves the repo (kept: prune is off) while its subnet moves: OVSDB would drop
    its port with the old switch, so the plan must recreate the port under the new one."""
    files = copy.deepcopy(EXAMPLE_FILES)
    prune_off(files)
    remove_named(files, "ComputeInstance", "web-2")
    web = next(d for _p, d in subnets(files) if d["metadata"]["name"] == "web")
    web["spec"].update(ipv4Cidr="10.10.30.0/24", gateway="10.10.30.1")
    head = validate_memory(files)
    assert head.ok
    check_plan_applies(head)
    plan = plan_between(BASE, head, {})
    port = next(c for c in plan.changes if c.uid.endswith("ComputeInstance/web-2/0"))
    assert port.is_replace and port.after == port.before
    kept = next(r for r in plan.resources if r.address == "ComputeInstance/acme/web-2")
    assert kept.reason.startswith("kept") and kept.action == "replace"


def test_prune_off_never_gives_a_kept_address_to_a_new_port() -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    prune_off(files)
    remove_named(files, "ComputeInstance", "web-2")
    files["tenants/acme/generated.yaml"] = [{
        "apiVersion": "network.osac.io/v1alpha1", "kind": "ComputeInstance",
        "metadata": {"name": "web-9"},
        "spec": {"networkAttachments": [{"subnet": "web", "securityGroups": ["web"]}]}}]
    head = validate_memory(files)
    assert head.ok
    truth = render_desired(head, observed_allocations(BASE_OBJECTS)).objects
    kept = [o for o in BASE_OBJECTS if "web-2" in o.key]
    assert_unique_addresses([*kept, *truth])


def test_objects_that_depend_on_each_other_are_a_cycle_error() -> None:
    """A renderer's bug, named: the steps in the circle, never an endless wait."""
    from unet.reconciler.objects import BackendObject
    from unet.reconciler.order import CycleError, order

    a = BackendObject("m", "T", "a", "X/a", {}, {"ref": ("b",)})
    b = BackendObject("m", "T", "b", "X/b", {}, {"ref": ("a",)})
    free = BackendObject("m", "T", "c", "X/c", {})
    changes = [Change(o.uid, None, o, Action.CREATE, "new") for o in (a, b, free)]
    with pytest.raises(CycleError, match=r"create m:a, create m:b"):
        order(changes)
    assert [[s.id for s in wave] for wave in order(changes[2:])] == [["create m:c"]]
