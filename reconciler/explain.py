"""`unet codes CODE`: what a diagnostic code means, an example of it, and the fix, as
`rustc --explain` does. The examples are the cases of examples/broken/ (one defect each,
and `expected.txt`, what `unet validate` prints for it); an installed unet has no source
tree, and says where to find them."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .diagnostics import CODES, PLAN_TIME_CODES
from .errors import UsageError

BROKEN = Path(__file__).resolve().parent.parent / "examples" / "broken"
MARK = "# Broken:"

#: The fix of the codes whose example gives no hint, and of the plan-time codes (no example).
FIXES = {
    "SCHEMA_REQUIRED": "add the field; `unet schema --print` gives editors the schema, "
                       "which completes required fields",
    "SCHEMA_TYPE": "write the value the schema asks for (the message names the type, the "
                   "values allowed or the bound)",
    "SUBNET_OVERLAP": "give each subnet of the VirtualNetwork its own part of the network's "
                      "CIDR",
    "RANGE_OVERLAP": "make the allocation ranges disjoint",
    "POOL_OVERLAP": "give the ExternalIPPool CIDRs no tenant network of the region uses, "
                    "and no other pool",
    "MTU_INVALID": "use an MTU within the bounds (at least 1280 where the subnet has IPv6)",
    "RULE_ICMP_INVALID": "give icmp type and code within 0-255, a type with any code, and "
                         "icmp fields only on protocol icmp or icmpv6",
    "ENDPOINT_REQUIRED": "name the Cluster's `endpoint` (api or ingress) the external IP is for",
    "TARGET_PENDING": "declare the target, or name one that exists; nothing is wrong if it "
                      "is coming in a later change",
    "INTERFACE_INVALID": "use an interface the HostType declares, once per instance",
    "PLUGIN_CONFIG_INVALID": "fix the NetworkManager's `config` as the message of its plugin "
                             "says (docs/plugins.md)",
    "IMMUTABLE_CHANGED": "nothing, if replacing the object is meant; otherwise keep the "
                         "field's old value",
    "PREVENT_DESTROY": "take `preventDestroy` off the object first (its own change), or keep "
                       "the object",
    "SHARD_SPLITS_TENANT": "run the shard with every region of the Tenant (`--region` "
                           "repeated), or the whole repo",
    "PEERING_REGION_MISMATCH": "peer networks of one region (a network's region cannot "
                               "change: a network in the other region, peered, instead)",
    "SHARD_REGION_UNKNOWN": "name the regions as the Tenants and NetworkManagers of "
                            "provider/ do (`--region`, repeated)",
    "SHARD_SPLITS_MANAGER": "run the shard with every region the NetworkManager serves, or "
                            "the whole repo",
    "PRUNE_DISABLED": "delete the objects by hand, or set `prune: true` in unet.yaml",
    "EMPTY_DESIRED_STATE": "if emptying the installation is meant, set `allowEmpty: true` in "
                           "unet.yaml for that change",
    "ALLOCATION_UNRECORDED": "plan and apply with the fabric's manager too (leave out "
                             "`--manager`), so that it records the values first",
    "NAME_CONFLICT": "rename the manifest, or remove (or adopt) the object that holds the name",
    "HOLDS_FOREIGN_OBJECTS": "remove the other objects from it first, or keep the object",
    "ALLOCATION_IN_USE": "keep the value allocatable while it is in use, or move its user "
                         "first",
    "SEGMENT_RANGE_EXHAUSTED": "widen the class's `segmentRange`, or free segment ids",
    "BACKEND_UNOBSERVED": "make the backend reachable, or leave its manager out with "
                          "`--manager`",
    "STALE_PLAN": "make the plan again (`unet plan -o FILE`) and apply that",
}


@dataclass(frozen=True)
class Example:
    case: str
    defect: list[str]  # the `# Broken:` comment, `file:line | text`
    output: str        # what `unet validate` prints in the case's folder

    def to_json(self) -> dict[str, Any]:
        return {"case": self.case, "folder": f"examples/broken/{self.case}",
                "defect": self.defect, "output": self.output}


def code_named(text: str) -> str:
    """The code `text` names: SUBNET_OVERLAP, subnet_overlap or subnet-overlap."""
    code = text.strip().upper().replace("-", "_")
    if code in CODES:
        return code
    near = difflib.get_close_matches(code, list(CODES), n=1)
    raise UsageError(f"no diagnostic code {text}" + (f"; did you mean {near[0]}?" if near
                                                     else "") + " (`unet codes` lists them)")


def explanation(code: str) -> dict[str, Any]:
    info = CODES[code]
    examples = _examples(code)
    hints = [line.split("hint:", 1)[1].strip() for e in examples
             for line in e.output.splitlines() if line.strip().startswith("hint:")]
    return {"code": code, "severity": str(info.severity), "category": info.category,
            "when": info.when, "fix": FIXES.get(code) or (hints[0] if hints else None),
            "examples": [e.to_json() for e in examples],
            "from_plans": code in PLAN_TIME_CODES, "examples_found": BROKEN.is_dir()}


def _examples(code: str) -> list[Example]:
    if not BROKEN.is_dir():
        return []
    kebab = code.lower().replace("_", "-")
    cases = sorted(p for p in BROKEN.iterdir()
                   if p.is_dir() and p.name.split("--")[0] == kebab)
    return [Example(case.name, _defect(case), _output(case)) for case in cases]


def _output(case: Path) -> str:
    expected = case / "expected.txt"
    return expected.read_text() if expected.is_file() else ""


def _defect(case: Path) -> list[str]:
    """The comment marking the defect (the output quotes the line it is about)."""
    quoted: list[str] = []
    for path in sorted(p for p in case.rglob("*.yaml") if p.is_file() and not p.is_symlink()):
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(lines):
            if MARK in line:
                quoted += _block(path.relative_to(case).as_posix(), lines, number)
    return quoted


def _block(file: str, lines: list[str], start: int) -> list[str]:
    end = start + 1
    while end < len(lines) and lines[end].strip().startswith("#"):
        end += 1
    return [f"{file}:{n + 1} | {lines[n].strip()}" for n in range(start, end)]


def render_text(document: dict[str, Any]) -> str:
    out = [f"{document['code']} ({document['severity']}, {document['category']})", "",
           f"  {document['when']}", ""]
    for example in document["examples"]:
        out += [f"Example: {example['folder']}", ""]
        out += [f"  {line}" for line in example["defect"]] + [""]
        out += ["  unet validate prints:", ""]
        out += [f"    {line}" if line else "" for line in example["output"].splitlines()]
        out.append("")
    if not document["examples"]:
        out += ["Example: " + ("none: the code comes from a plan, not from validate"
                               if document["from_plans"] or document["examples_found"] else
                               "see examples/broken/ in unet's source (this unet is "
                               "installed without it)"), ""]
    out.append(f"Fix: {document['fix']}")
    return "\n".join(out) + "\n"


def render_markdown(document: dict[str, Any]) -> str:
    out = [f"### `{document['code']}` ({document['severity']})", "", document["when"], ""]
    for example in document["examples"]:
        out += [f"Example: `{example['folder']}`", "", "```text",
                *example["defect"], "```", "", "```text", example["output"].rstrip(), "```",
                ""]
    out.append(f"**Fix:** {document['fix']}")
    return "\n".join(out) + "\n"
