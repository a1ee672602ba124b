"""Where unet follows the final revision of the OSAC unified networking API (issue 15):
each test changes the example repo the way an OSAC user would and checks what unet plans.
"""

from __future__ import annotations

import copy
from typing import Any

from unet.reconciler.desired import render_desired
from unet.reconciler.diff import Action
from unet.reconciler.planner import plan_between

from .conftest import ROOT
from .test_plan_props import EXAMPLE_FILES, Files, validate_memory

API = "network.osac.io/v1alpha1"


def _docs(files: Files, rel: str, kind: str, name: str) -> dict[str, Any]:
    return next(d for d in files[rel] if d["kind"] == kind and d["metadata"]["name"] == name)


def test_a_cluster_without_its_prerequisites_is_planned_with_a_warning() -> None:
    """OSAC hands the order of a cluster's pieces to the template: without its `api`
    attachment and NATGateway a Cluster is still planned, and the plan says what that
    means."""
    files = copy.deepcopy(EXAMPLE_FILES)
    files["tenants/acme/cluster-k1.yaml"] = [
        d for d in files["tenants/acme/cluster-k1.yaml"]
        if not (d["kind"] == "ExternalIPAttachment" and d["spec"]["target"].get("endpoint")
                == "api")]
    files["tenants/acme/external.yaml"] = [d for d in files["tenants/acme/external.yaml"]
                                           if d["kind"] != "NATGateway"]
    head = validate_memory(files)
    assert head.ok, [d.message for d in head.diagnostics if d.is_error]
    [warning] = [d for d in head.diagnostics if d.code == "CLUSTER_PREREQUISITE_MISSING"]
    assert not warning.is_error
    assert "its API is unreachable from outside until one exists" in warning.message
    assert "NATGateway on VirtualNetwork 'prod'" in warning.message
    ports = {o.fields["name"] for o in render_desired(head, {}).objects
             if o.table == "Logical_Switch_Port"}
    assert "unet.acme.cluster.k1.0" in ports, "the Cluster is planned"
    plan = plan_between(validate_memory(EXAMPLE_FILES), head, {})
    assert plan.ok


def test_the_provider_may_pin_a_tenant_to_some_network_classes() -> None:
    """Tenant.spec.networkClasses: unset, every class of the tenant's regions (existing
    repos stay valid); set, a network of another class is NETWORK_CLASS_NOT_ALLOWED. A
    name there that is no class could be meant for any: the list is not held against the
    tenant's networks until it is fixed."""
    assert validate_memory(EXAMPLE_FILES).ok
    files = copy.deepcopy(EXAMPLE_FILES)
    tenants = "provider/tenants/acme.yaml"
    acme = _docs(files, tenants, "Tenant", "acme")
    acme["spec"]["networkClasses"] = ["standard-a"]
    assert validate_memory(files).ok, "the class its networks use"
    acme["spec"]["networkClasses"] = ["standard-b"]
    problems = {(d.code, d.path, d.message) for d in validate_memory(files).diagnostics
                if d.is_error}
    assert ("NETWORK_CLASS_NOT_ALLOWED", "/spec/networkClass",
            "tenant acme may not use NetworkClass 'standard-a' (spec.networkClass)") in problems
    acme["spec"]["networkClasses"] = ["standard-b", "gold"]
    problems = {(d.code, d.path, d.message) for d in validate_memory(files).diagnostics
                if d.is_error}
    assert [(code, path) for code, path, _ in problems] == [("REF_NOT_FOUND",
                                                             "/spec/networkClasses/1")]


def _plan(files: Files) -> Any:
    head = validate_memory(files)
    assert head.ok, [d.message for d in head.diagnostics if d.is_error]
    return plan_between(validate_memory(EXAMPLE_FILES), head, {})


def test_attachments_are_immutable_and_security_groups_are_not() -> None:
    """Adding, removing or reordering attachments recreates every port of the workload,
    said by IMMUTABLE_CHANGED; changing an attachment's groups changes it in place."""
    files = copy.deepcopy(EXAMPLE_FILES)
    web1 = _docs(files, "tenants/acme/compute.yaml", "ComputeInstance", "web-1")
    web1["spec"]["networkAttachments"][0]["primary"] = True
    web1["spec"]["networkAttachments"].append({"subnet": "db", "securityGroups": ["db"]})
    plan = _plan(files)
    resource = next(r for r in plan.resources if r.address == "ComputeInstance/acme/web-1")
    assert resource.action == "replace"
    ports = {c.obj.key: c.action for c in plan.changes
             if c.obj.table == "Logical_Switch_Port" and "/web-1/" in c.obj.key}
    assert ports == {"Logical_Switch_Port/acme/ComputeInstance/web-1/0": Action.REPLACE,
                     "Logical_Switch_Port/acme/ComputeInstance/web-1/1": Action.CREATE}
    assert any(d.code == "IMMUTABLE_CHANGED" and "ComputeInstance/acme/web-1" in d.message
               for d in plan.diagnostics)
    # Removing a secondary NIC recreates the primary one too, as docs/api.md says (it
    # said only "the ports whose subnet changes" were).
    files = copy.deepcopy(EXAMPLE_FILES)
    app1 = _docs(files, "tenants/globex/compute.yaml", "ComputeInstance", "app-1")
    del app1["spec"]["networkAttachments"][1]
    ports = {c.obj.key: c.action for c in _plan(files).changes
             if c.obj.table == "Logical_Switch_Port" and "/app-1/" in c.obj.key}
    assert ports == {"Logical_Switch_Port/globex/ComputeInstance/app-1/0": Action.REPLACE,
                     "Logical_Switch_Port/globex/ComputeInstance/app-1/1": Action.DELETE}
    api = " ".join((ROOT / "docs" / "api.md").read_text().split())
    assert "or changing one's subnet or fixed address (or MAC), replaces every port of the " \
        "workload" in api

    files = copy.deepcopy(EXAMPLE_FILES)
    web1 = _docs(files, "tenants/acme/compute.yaml", "ComputeInstance", "web-1")
    web1["spec"]["networkAttachments"][0]["securityGroups"] = ["web", "db"]
    plan = _plan(files)
    resource = next(r for r in plan.resources if r.address == "ComputeInstance/acme/web-1")
    assert resource.action == "update"
    assert not any(c.is_replace for c in plan.changes)


def test_a_protected_group_may_change_its_rules_and_its_members() -> None:
    """Protection stops a delete or a replace of the resource; changing a rule (one ACL
    row goes, another comes) or who uses the group (a VM moving to a hosting cluster
    changes the ACLs naming it as a remote) is an update, as in Terraform."""
    from unet.reconciler.models import PREVENT_DESTROY_ANNOTATION

    files = copy.deepcopy(EXAMPLE_FILES)
    web = _docs(files, "tenants/acme/security-groups.yaml", "SecurityGroup", "web")
    web["metadata"]["annotations"] = {PREVENT_DESTROY_ANNOTATION: "true"}
    base = validate_memory(files)
    web["spec"]["ingress"][1]["portFrom"] = web["spec"]["ingress"][1]["portTo"] = 8080
    _docs(files, "tenants/acme/compute.yaml", "ComputeInstance", "web-2")["spec"][
        "hostingCluster"] = "hosting-a2"
    plan = plan_between(base, validate_memory(files), {})
    assert plan.ok, [d.message for d in plan.diagnostics if d.is_error]
    group = next(r for r in plan.resources if r.address == "SecurityGroup/acme/web")
    assert group.action == "update"
    assert any(c.action is Action.DELETE and c.obj.owner == group.address and
               c.obj.table == "ACL" for c in plan.changes), "an ACL row did go"


def test_dhcp_extras_are_checked_and_rendered_where_ovn_has_them() -> None:
    """leaseTime, domainName and ntpServers (PlasmaVMC's subnet options): DHCPv4 gets all
    three, DHCPv6 the domain as its search list; OVN's DHCPv6 has no NTP option, so an
    IPv6 NTP server is refused rather than dropped."""
    objects = {o.key: o for o in render_desired(validate_memory(EXAMPLE_FILES), {}).objects}
    v4 = objects["DHCP_Options/acme/db/v4"].fields["options"]
    assert (v4["lease_time"], v4["domain_name"], v4["ntp_server"]) == \
        ("3600", '"db.acme.example"', "{192.0.2.123}")
    assert objects["DHCP_Options/acme/db/v6"].fields["options"]["domain_search"] == \
        '"db.acme.example"'
    assert objects["DHCP_Options/acme/web/v4"].fields["options"]["lease_time"] == "43200"
    files = copy.deepcopy(EXAMPLE_FILES)
    _docs(files, "tenants/acme/network.yaml", "Subnet", "db")["spec"]["ntpServers"] = [
        "fd00::123"]
    [problem] = [d for d in validate_memory(files).diagnostics if d.is_error]
    assert (problem.code, problem.path) == ("ADDRESS_INVALID", "/spec/ntpServers/0")
    assert "IPv4 expected" in problem.message


def test_a_subnet_without_a_gateway_is_an_isolated_segment() -> None:
    """`gateway: null` (not leaving it out): no router port, no router option; DHCP
    answers from the first host, which is therefore never handed out."""
    objects = {o.key: o for o in render_desired(validate_memory(EXAMPLE_FILES), {}).objects}
    assert "Logical_Router_Port/globex/backup" not in objects
    assert "Logical_Switch_Port/globex/backup/router" not in objects
    options = objects["DHCP_Options/globex/backup/v4"].fields["options"]
    assert "router" not in options and options["server_id"] == "10.10.3.1"
    port = objects["Logical_Switch_Port/globex/ComputeInstance/backup-1/0"]
    assert port.fields["addresses"][0].split()[1] == "10.10.3.2"
    files = copy.deepcopy(EXAMPLE_FILES)
    del _docs(files, "tenants/globex/network.yaml", "Subnet", "backup")["spec"]["gateway"]
    objects = {o.key: o for o in render_desired(validate_memory(files), {}).objects}
    assert objects["Logical_Router_Port/globex/backup"].fields["networks"] == ["10.10.3.1/24"]


def test_protection_refuses_a_row_deleted_for_good() -> None:
    """A protected VM moving to a hosting cluster loses its fabric port (an Address_Set
    is no port): that is a destroy, refused, not an update."""
    from unet.reconciler.models import PREVENT_DESTROY_ANNOTATION

    files = copy.deepcopy(EXAMPLE_FILES)
    web1 = _docs(files, "tenants/acme/compute.yaml", "ComputeInstance", "web-1")
    web1["metadata"]["annotations"] = {PREVENT_DESTROY_ANNOTATION: "true"}
    base = validate_memory(files)
    web1["spec"]["hostingCluster"] = "hosting-a1"
    plan = plan_between(base, validate_memory(files), {})
    assert [d.message for d in plan.diagnostics if d.code == "PREVENT_DESTROY"] == [
        "the plan would delete ComputeInstance/acme/web-1, which is protected"]


def test_without_a_nat_gateway_routes_to_appliances_inside_stay_open() -> None:
    """The no-egress drop spares the network, broadcast, multicast and the destinations
    its subnets route through a next hop inside it (an appliance)."""
    files = copy.deepcopy(EXAMPLE_FILES)
    files["tenants/acme/external.yaml"] = [d for d in files["tenants/acme/external.yaml"]
                                           if d["kind"] != "NATGateway"]
    acls = [o.fields["match"] for o in render_desired(validate_memory(files), {}).objects
            if o.table == "ACL" and o.fields["priority"] == 1003]
    # (and services-a, the provider network k1 and web-k1 attach to)
    assert acls == ["inport == @unet.acme.prod && ip4 && ct.new && ip4.dst != "
                    "{10.10.0.0/16, 172.16.0.0/12, 192.168.80.0/24, 255.255.255.255, "
                    "224.0.0.0/4}"]
