"""What the docs state about the code's defaults is what the code has.

A doc promise the code does not keep is a defect: these read the numbers the docs give
for the OVN manager's timeouts and compare them with its config model, so changing one
without the other fails here.
"""

from __future__ import annotations

import re

from unet.managers.ovn.config import OvnConfig
from unet.managers.sdk import ManagerConfig

from .conftest import ROOT

OVN_MD = (ROOT / "docs" / "ovn.md").read_text()
API_MD = (ROOT / "docs" / "api.md").read_text()


def defaults(config: type[ManagerConfig]) -> dict[str, float]:
    """The numeric defaults of a manager config, by the name manifests use."""
    return {str(field.alias): field.default for field in config.model_fields.values()
            if isinstance(field.default, int | float) and not isinstance(field.default, bool)}


def test_the_ovn_timeouts_table_gives_the_config_defaults() -> None:
    table = dict(re.findall(r"^\| `(\w+Seconds)` \| ([\d.]+) \|", OVN_MD, re.MULTILINE))
    code = defaults(OvnConfig)
    assert set(table) == {name for name in code if name.endswith("TimeoutSeconds")}
    assert {name: float(value) for name, value in table.items()} == \
        {name: code[name] for name in table}


def test_every_timeout_the_ovn_docs_quote_names_its_setting_and_default() -> None:
    """`timed out after N s`, `within N s`: each quoted message names the setting whose
    default N is (the TLS handshake's said 60 s, the connect timeout being 10 s)."""
    code = defaults(OvnConfig)
    quoted = re.findall(r"(?:timed out after|within) (\d+) s\b(\s+\((\w+)\))?", OVN_MD)
    assert len(quoted) >= 3
    for seconds, named, setting in quoted:
        assert named, f"'… {seconds} s' in docs/ovn.md names no setting"
        assert float(seconds) == code[setting], (setting, seconds)


def test_the_api_reference_gives_the_ovn_timeout_defaults() -> None:
    code = defaults(OvnConfig)
    for name in (n for n in code if n.endswith("TimeoutSeconds")):
        stated = re.search(rf"`{name}`[^`]*?default (\d+)", API_MD)
        assert stated, f"docs/api.md gives no default for {name}"
        assert float(stated.group(1)) == code[name], name


def test_the_cache_step_the_docs_show_is_the_example_workflows() -> None:
    """unet's caches live in the user's cache folder (`~/.cache/unet`), not `.unet/cache`
    of the checkout: a `path:` of a cache step shown in the docs is the workflows'."""
    workflows = ROOT / "examples" / "network-repo" / ".github" / "workflows"
    used = {path for file in workflows.glob("*.yml")
            for path in re.findall(r"^\s+path: (.+)$", file.read_text(), re.MULTILINE)}
    assert used == {"~/.cache/unet"}
    for doc in (ROOT / "README.md", *(ROOT / "docs").glob("*.md")):
        for step in re.findall(r"uses: actions/cache[^\n]*\n(?:\s+\S[^\n]*\n)*?\s+path: (.+)",
                               doc.read_text()):
            assert step in used, f"{doc.name} shows a cache step keeping {step}"


def _api_sections() -> dict[str, str]:
    """docs/api.md's `### Kind …` sections, by the first kind their heading names."""
    from unet.reconciler.models import KINDS

    sections: dict[str, str] = {}
    for section in re.split(r"^### ", API_MD, flags=re.MULTILINE)[1:]:
        heading = section.split("\n", 1)[0]
        named = [kind for kind in KINDS if re.match(rf"{kind}\b", heading)]
        if named:
            sections[named[0]] = section
    return sections


def test_the_api_reference_marks_immutable_the_fields_the_planner_replaces_by() -> None:
    """A field table row says `immutable` exactly for the fields in the kind's `immutable`
    list (workloads' attachments are described in prose, not a table)."""
    from unet.reconciler.models import KINDS

    sections = _api_sections()
    assert {"Subnet", "VirtualNetwork", "ExternalIPAttachment", "ProviderNetwork"} <= set(sections)
    for kind, section in sections.items():
        marked: set[str] = set()
        for row in re.findall(r"^\|(.*)\|\s*$", section, re.MULTILINE):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)]
            fields = re.findall(r"`(spec\.[\w.]+)`", cells[0])
            if fields and any(re.search(r"\bimmutable\b", c) for c in cells[2:4]):
                marked |= set(fields)
        tabled = {p for p in KINDS[kind].immutable if "*" not in p}
        assert marked == tabled, kind


def test_the_guides_network_manager_is_valid() -> None:
    """docs/hosting-clusters.md's NetworkManager, its placeholders filled in, passes the
    manifest schema and the kubernetes manager's config."""
    import yaml

    from unet.managers.kubernetes import KubernetesConfig
    from unet.reconciler.models import KINDS

    guide = (ROOT / "docs" / "hosting-clusters.md").read_text()
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", guide, re.DOTALL)
               if "kind: NetworkManager" in b]
    manifest = yaml.safe_load(block.replace("REGION", "region-a").replace("CLUSTER", "c1"))
    KINDS["NetworkManager"].model_validate(manifest)
    config = KubernetesConfig.model_validate(manifest["spec"]["config"])
    assert [c.context for c in config.clusters] == ["c1"]


def test_the_provider_networks_anti_spoofing_promise_says_where_it_holds() -> None:
    """api.md promised that a port on a provider network "sends only from its own MAC and
    addresses". A VM on a hosting cluster attached to one (issue 30) is held to its MAC
    only (IPAM disabled: decisions.md, "Hosting clusters"), and a provider network is
    shared with other tenants and the provider's hosts: the promise must say so."""
    section = API_MD[API_MD.index("### ProviderNetwork"):API_MD.index("### Tenant")]
    promise = section.index("the port is anti-spoofed")
    assert "hosting\ncluster is held to its MAC only" in section[promise:promise + 400]
    decisions = (ROOT / "docs" / "decisions.md").read_text()
    assert "a Cluster or a VM on a hosting cluster cannot attach" not in decisions
