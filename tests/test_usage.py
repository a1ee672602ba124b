"""How full the pools, subnets and segment ranges are (`unet show usage`, POOL_NEARLY_FULL,
the daemon's gauges), against a real OVN Northbound.

- Applied whole, what the fabric records is what the repo's own allocation takes: the
  live figures equal the offline ones, space by space.
- Values the backends keep (prune off) take room the repo no longer asks for: the live
  figures and a plan against the backends count them, `validate` and `--offline` do not.
- A tenant's view holds its subnets and the shared spaces it draws from, nobody else's.
- The daemon exports the same figures as gauges.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from unet.reconciler.daemon.loop import Options, Reconciler
from unet.reconciler.daemon.metrics import Metrics

from .support.gitops import edit
from .support.ovnlab import OvnLab
from .support.ovnrun import apply, plan_json, unet
from .test_k8s_contract import make_env  # noqa: F401  (a fixture)

SPARE = """---
apiVersion: network.osac.io/v1alpha1
kind: ExternalIP
metadata:
  name: spare
spec:
  pool: public-a
"""
#: public-a cut to seven addresses (initech's fixed .100 among them): the example's
#: ExternalIPs and routers use six, 86 %.
SMALL_POOL = ("start: 203.0.113.10\n      end: 203.0.113.200\n",
              "start: 203.0.113.95\n      end: 203.0.113.101\n")


def usage(cwd: Path, repo: Path, *extra: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    result = unet(cwd, "show", "usage", str(repo), "--format", "json", *extra)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["format_version"] == "1.0"
    return {(s["kind"], s["tenant"], s["name"], s["family"]): s for s in document["spaces"]}


def live(cwd: Path, repo: Path, *extra: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return usage(cwd, repo, "--manager", "ovn", *extra)


def nearly_full(diagnostics: list[dict[str, Any]]) -> list[str]:
    return [d["message"] for d in diagnostics if d["code"] == "POOL_NEARLY_FULL"]


def test_what_the_fabric_records_is_what_the_repo_takes_once_applied(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    offline = usage(tmp_path, repo, "--offline")
    before = live(tmp_path, repo)
    assert before.keys() == offline.keys()
    assert all(space["used"] == 0 for space in before.values()), "nothing recorded yet"
    pool = offline[("ExternalIPPool", None, "public-a", None)]
    # .10-.200 less the excluded .53; three ExternalIPs of acme, one of initech, and the
    # router addresses of two networks without a NATGateway
    assert (pool["size"], pool["used"], pool["free"]) == (190, 6, 184)
    assert offline[("NetworkClass", None, "standard-a", None)]["size"] == 1000
    assert offline[("Subnet", "acme", "web", 4)]["used"] > 0

    assert apply(tmp_path, repo).returncode == 0
    after = live(tmp_path, repo)
    differ = {key: (after[key]["used"], offline[key]["used"]) for key in offline
              if after[key]["used"] != offline[key]["used"]}
    assert differ == {}, "recorded and demanded disagree"
    assert after == offline

    text = unet(tmp_path, "show", "usage", str(repo), "--manager", "ovn").stdout
    assert text.splitlines()[0].split() == ["SPACE", "SIZE", "USED", "FREE", "USE%"]
    assert "ExternalIPPool public-a" in text and "NetworkClass standard-a segment range" in text


def test_a_tenant_sees_its_subnets_and_the_shared_spaces_it_draws_from(
        tmp_path: Path, example_copy: Path) -> None:
    spaces = usage(tmp_path, example_copy, "--offline", "--tenant", "initech")
    assert {key[0] for key in spaces} == {"ExternalIPPool", "Subnet", "VIPBlock", "NetworkClass"}
    assert {key[1] for key in spaces if key[0] in ("Subnet", "VIPBlock")} == {"initech"}
    assert ("ExternalIPPool", None, "public-b", None) not in spaces, "globex's pool alone"
    assert not any(key[0] == "ProviderNetwork" for key in spaces), "shared with globex alone"
    globex = usage(tmp_path, example_copy, "--offline", "--tenant", "globex")
    storage = globex[("ProviderNetwork", None, "storage-b", 4)]  # db-metal's storage NIC
    assert storage["used"] == 1 and storage["size"] == 100, storage
    # globex has region-b alone: region-a's pool, open to all tenants, is none of its
    # (an ExternalIP of it would be REGION_NOT_ALLOWED).
    assert ("ExternalIPPool", None, "public-a", None) not in globex, "another region's pool"
    assert ("ExternalIPPool", None, "public-b", None) in globex
    missing = unet(tmp_path, "show", "usage", str(example_copy), "--offline", "--tenant",
                   "nobody")
    assert missing.returncode == 1 and "no Tenant named 'nobody'" in missing.stderr


def test_values_kept_in_the_backends_fill_a_pool_that_the_repo_alone_does_not(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    edit(repo, "provider/pools.yaml", *SMALL_POOL)
    spare = repo / "tenants" / "initech" / "spare.yaml"
    spare.write_text(SPARE)
    checked = unet(tmp_path, "validate", str(repo), "--format", "json")
    assert nearly_full(json.loads(checked.stdout)["diagnostics"]) == [
        "ExternalIPPool public-a is 100 % full: 7 of 7 addresses used, 0 free"]
    assert apply(tmp_path, repo).returncode == 0

    edit(repo, "unet.yaml", "prune: true", "prune: false")
    spare.unlink()  # gone from the repo, kept in the backends
    checked = unet(tmp_path, "validate", str(repo), "--format", "json")
    assert nearly_full(json.loads(checked.stdout)["diagnostics"]) == []
    key = ("ExternalIPPool", None, "public-a", None)
    assert usage(tmp_path, repo, "--offline")[key]["used"] == 6
    assert live(tmp_path, repo)[key]["used"] == 7
    _code, planned = plan_json(tmp_path, repo)
    found = [d for d in planned["diagnostics"] if d["code"] == "POOL_NEARLY_FULL"]
    assert [d["message"] for d in found] == [
        "ExternalIPPool public-a is 100 % full: 7 of 7 addresses used, 0 free"]
    assert found[0]["file"] == "provider/pools.yaml" and found[0]["severity"] == "warning"


def test_with_prune_on_a_plan_counts_the_values_it_frees_as_free(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    edit(repo, "provider/pools.yaml", *SMALL_POOL)
    spare = repo / "tenants" / "initech" / "spare.yaml"
    spare.write_text(SPARE)
    assert apply(tmp_path, repo).returncode == 0
    spare.unlink()  # prune is on: the plan deletes its reservation
    key = ("ExternalIPPool", None, "public-a", None)
    assert live(tmp_path, repo)[key]["used"] == 7, "still recorded before the apply"
    _code, planned = plan_json(tmp_path, repo)
    assert nearly_full(planned["diagnostics"]) == []
    assert apply(tmp_path, repo).returncode == 0
    assert live(tmp_path, repo)[key]["used"] == 6


def test_a_backend_that_cannot_be_read_fails_the_usage(
        lab: OvnLab, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No figures from a backend that was not read (the hosting clusters, here): exit 1
    saying which, as docs/output-formats.md says, never a table of zeros."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    assert apply(tmp_path, repo).returncode == 0
    for only in ([], ["--manager", "kubernetes"]):
        result = unet(tmp_path, "show", "usage", str(repo), "--format", "json", *only)
        assert result.returncode == 1, (only, result.stdout)
        assert result.stdout == "" and "NetworkManager 'kubernetes'" in result.stderr, \
            result.stderr
    assert live(tmp_path, repo)[("ExternalIPPool", None, "public-a", None)]["used"] == 6


def test_a_k8s_manager_alone_counts_what_its_fabric_records(
        make_env: Any) -> None:  # noqa: F811  (the fixture imported above)
    """The allocations of a k8s manager's subnets are recorded by their fabric manager,
    which `--manager kubernetes` reads too (as show status and plan do), never changes."""
    env = make_env()
    assert env.apply()[0] == 0
    code, out, err = env.unet("show", "usage", str(env.repo), "--manager", "kubernetes",
                              "--format", "json")
    assert code == 0, err
    alone = {(s["kind"], s["tenant"], s["name"], s["family"]): s["used"]
             for s in json.loads(out)["spaces"]}
    code, out, err = env.unet("show", "usage", str(env.repo), "--format", "json")
    assert code == 0, err
    both = {(s["kind"], s["tenant"], s["name"], s["family"]): s["used"]
            for s in json.loads(out)["spaces"]}
    assert alone == both and both[("Subnet", "acme", "web", 4)] > 0


def test_the_daemon_exports_the_usage_as_gauges(lab: OvnLab, repo: Path,
                                               tmp_path: Path) -> None:
    edit(repo, "provider/pools.yaml", *SMALL_POOL)
    reconciler = Reconciler(Options(path=repo, managers=["ovn"], state_dir=tmp_path / "state",
                                    workdir=repo))
    run = reconciler.run_once()
    assert run.result == "applied", run.message
    metrics = Metrics()
    metrics.observe(run)
    metrics.usage(reconciler.usage)
    from prometheus_client import generate_latest

    samples = {(s.name, s.labels.get("kind"), s.labels.get("name"), s.labels.get("family")):
               s.value for family in text_string_to_metric_families(
                   generate_latest(metrics.registry).decode()) for s in family.samples}
    pool = ("ExternalIPPool", "public-a", "")
    assert samples[("unet_pool_size", *pool)] == 7
    assert samples[("unet_pool_used", *pool)] == 6
    assert samples[("unet_pool_free", *pool)] == 1
    recorded = live(tmp_path, repo)
    web = recorded[("Subnet", "acme", "web", 4)]
    assert samples[("unet_pool_used", "Subnet", "web", "4")] == web["used"] > 0

    metrics.usage(None)  # a run that planned nothing keeps the figures
    assert generate_latest(metrics.registry).decode().count("unet_pool_used{") == len(recorded)


def test_validate_names_a_nearly_full_subnet_and_segment_range_where_they_are_sized(
        example_copy: Path) -> None:
    from unet.reconciler.validate import validate_repo

    # initech's build subnet: ports get one address (its one VM has it), VIPs the
    # class's /28 block; standard-a's VLANs cut to the four its bridged subnets use and
    # the provider network services-a's, moved into them
    edit(example_copy, "tenants/initech/network.yaml", "ipv4Cidr: 192.168.1.0/24",
         "ipv4Cidr: 192.168.1.0/27\n  allocationRanges:\n    - {start: 192.168.1.2, "
         "end: 192.168.1.2}")
    edit(example_copy, "provider/classes.yaml", "end: 1999", "end: 1004")
    edit(example_copy, "provider/networks.yaml", "segmentId: 1950", "segmentId: 1004")
    found = {d.message: d for d in validate_repo(example_copy).diagnostics
             if d.code == "POOL_NEARLY_FULL"}
    assert sorted(found) == [
        "NetworkClass standard-a segment range is 100 % full: 5 of 5 segment ids used, 0 free",
        "Subnet initech/build IPv4 is 100 % full: 1 of 1 addresses used, 0 free"]
    segment = found[sorted(found)[0]]
    assert (segment.file, segment.path) == ("provider/classes.yaml", "/spec/segmentRange")
    subnet = found[sorted(found)[1]]
    assert (subnet.file, subnet.path) == ("tenants/initech/network.yaml", "/spec/ipv4Cidr")
    assert subnet.line == 20 and not subnet.is_error


def test_a_space_with_room_left_is_never_shown_full() -> None:
    from types import SimpleNamespace

    from unet.reconciler.usage import Usage

    def shown(used: int, size: int) -> str:
        return Usage(SimpleNamespace(size=size), used).shown_percent  # type: ignore[arg-type]

    assert [shown(249, 250), shown(250, 250), shown(1, 1000), shown(0, 0)] == \
        ["99", "100", "0", "100"]


def test_an_ipv6_subnet_reads_as_a_power_of_two_not_twenty_digits(
        tmp_path: Path, example_copy: Path) -> None:
    """The demo's table: a /64 holds 2^64 addresses less a few; twenty digits in its size
    and free columns pushed every other figure off to the right. JSON keeps them exact."""
    text = unet(tmp_path, "show", "usage", str(example_copy), "--offline").stdout
    line = next(row for row in text.splitlines() if row.startswith("Subnet acme/db IPv6"))
    assert line.split() == ["Subnet", "acme/db", "IPv6", "~2^64", "1", "~2^64", "0%"], line
    assert max(len(row) for row in text.splitlines()) < 70, text
    exact = usage(tmp_path, example_copy, "--offline")[("Subnet", "acme", "db", 6)]
    assert exact["size"] == 2**64 - 2 and exact["free"] == 2**64 - 3, exact


def test_recorded_values_of_every_kind_are_counted_without_error(example_copy: Path) -> None:
    """A router's IPv6 gateway address (`gateway/<tenant>/<network>/ipv6`) is no workload's
    port: it was read as one (index 'ipv6'), and every live plan stopped on it."""
    from unet.reconciler.model import Model
    from unet.reconciler.objects import Held
    from unet.reconciler.usage import recorded
    from unet.reconciler.validate import validate_repo

    model = Model(validate_repo(example_copy).context)  # type: ignore[arg-type]
    held = {"gateway/acme/prod/ipv6": Held("2001:db8::5", None),
            "gateway/acme/prod": Held("203.0.113.20", None),
            "ipv4/acme/ComputeInstance/web-k1/1": Held("10.99.0.5", None),
            "ipv4/acme/ComputeInstance/nobody/0": Held("10.10.1.77", None)}
    assert recorded(model, held)
