"""Allocation that cannot succeed is a plan error, never a half-known value in a backend."""

from __future__ import annotations

from pathlib import Path

from unet.reconciler.planner import plan_between
from unet.reconciler.validate import validate_repo

TWO_VMS_IN_A_SLASH_30 = """---
apiVersion: network.osac.io/v1alpha1
kind: Subnet
metadata:
  name: tiny
spec:
  virtualNetwork: corp  # region-b: no VIP block
  ipv4Cidr: 10.10.250.0/30
  dhcp: false
""" + "".join(f"""---
apiVersion: network.osac.io/v1alpha1
kind: ComputeInstance
metadata:
  name: tiny-{n}
spec:
  networkAttachments:
    - subnet: tiny
""" for n in (1, 2))


def test_a_full_subnet_is_a_plan_error(example_copy: Path) -> None:
    (example_copy / "tenants" / "globex" / "tiny.yaml").write_text(TWO_VMS_IN_A_SLASH_30)
    head = validate_repo(example_copy)
    assert head.ok, [d for d in head.diagnostics if d.is_error]  # valid: one address is free
    plan = plan_between(None, head, {})
    problems = [d for d in plan.diagnostics if d.code == "SUBNET_TOO_SMALL"]
    assert len(problems) == 1 and "tiny-2" in problems[0].message
    assert not plan.ok
