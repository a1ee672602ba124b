"""Plans for people: text for terminals, Markdown for pull requests and job summaries.

Both render the plan's JSON document, so a saved plan (`unet show plan.json`)
reads exactly like a fresh one. Deletes and replaces always come first.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .console import painter
from .diff import Action
from .plan import ACTION_ORDER

PR_COMMENT_LIMIT = 65_535  # GitHub's limit for one comment body
SYMBOL = {Action.CREATE: "+", Action.UPDATE: "~", Action.DELETE: "-", Action.REPLACE: "-/+",
          Action.NOOP: " "}
VERB = {Action.CREATE: "will be created", Action.UPDATE: "will be updated in place",
        Action.DELETE: "will be deleted", Action.REPLACE: "must be replaced",
        Action.NOOP: "unchanged"}
ORDER = {action: index for index, action in enumerate(ACTION_ORDER)}
_action = Action.from_json


def summary_line(doc: dict[str, Any]) -> str:
    counts = doc["counts"]
    parts = [f"{counts['delete']} to delete", f"{counts['replace']} to replace",
             f"{counts['create']} to create", f"{counts['update']} to update"]
    return "Plan: " + ", ".join(parts) + f"; {counts['no-op']} unchanged."


def _inputs_line(doc: dict[str, Any]) -> str:
    inputs = doc.get("inputs", {})
    head = inputs.get("head", {})
    base = inputs.get("base")
    where = f"head {head.get('rev') or head.get('path', '.')}"
    if head.get("commit"):
        where += f" ({head['commit'][:12]})"
    if base:
        where = f"base {base.get('rev')} ({str(base.get('commit', ''))[:12]}) → " + where
        if base.get("valid") is False:
            where += (f"; the base has {_count(base.get('errors', 0), 'error')} and was not "
                      "rendered: every object shows as created")
    mode = "between two revisions" if doc["mode"] == "pr" else "against the live backends"
    return f"unet plan {mode}, installation {doc['installation']}: {where}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def row_label(change: dict[str, Any]) -> str:
    """How the manager that renders it calls a backend object (format 1.2 and later)."""
    return change.get("label") or f"{change['table']} {change['key']}"


def _value(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def _change_lines(change: dict[str, Any]) -> list[str]:
    action = _action(change["actions"])
    lines = [f"{SYMBOL[action]} {row_label(change)}"]
    held = (change["before"] or {}).get("holds")
    if held and action.deletes:
        lines.append("    ! holds what unet does not own: " + ", ".join(held))
    if action in (Action.UPDATE, Action.REPLACE):
        forces = set(change.get("forces_replacement") or ())
        if "parent" in forces:
            lines.append(f"    ~ parent: {change['before']['parent'][0]} → "
                         f"{change['after']['parent'][0]}  # forces replacement")
        for field in change["changes"]:
            if field["path"].startswith("meta"):
                continue  # bookkeeping tags: in the JSON plan, not worth a reader's time
            marker = "  # forces replacement" if field["path"] in forces else ""
            lines.append("    " + _field_line(field) + marker)
        moved = "parent" in forces  # its line above says it all
        if (action.is_replace and not moved) or change["drift"] or len(lines) == 1:
            lines.append(f"    # {change['reason']}")
    elif change["unknown"]:
        lines.append(f"    # known after apply: {', '.join(change['unknown'])}")
    return lines


def _field_line(field: dict[str, Any]) -> str:
    path = field["path"].removeprefix("fields.")
    if field["before"] is None or field["after"] is None:  # a member of a set: no index
        head, _, last = path.rpartition(".")
        path = head if last.isdigit() else path
    if field["before"] is None:
        return f"+ {path}: {_value(field['after'])}"
    if field["after"] is None:
        return f"- {path}: {_value(field['before'])}"
    return f"~ {path}: {_value(field['before'])} → {_value(field['after'])}"


def _resources(doc: dict[str, Any]) -> list[dict[str, Any]]:
    changed = [r for r in doc["resources"] if _action(r["actions"]).changes]
    return sorted(changed, key=lambda r: (ORDER[_action(r["actions"])], r["address"]))


def exposure_lines(doc: dict[str, Any]) -> list[str]:
    exp = doc["exposure"]
    lines = [f"+ opens {e['rule']}" for e in exp["rules_opened"]]
    lines += [f"- closes {e['rule']}" for e in exp["rules_closed"]]
    lines += [f"+ attaches {e['address']} → {e['target']}: new connections in to it "
              f"({e['owner']})" for e in exp["ips_attached"]]
    lines += [f"- detaches {e['address']} from {e['target']} ({e['owner']})"
              for e in exp["ips_detached"]]
    lines += [f"+ NAT gateway {e['address']} for {e['target']}: new connections out from it "
              f"({e['owner']})" for e in exp["nat_added"]]
    lines += [f"- NAT gateway {e['address']} for {e['target']} ({e['owner']})"
              for e in exp["nat_removed"]]
    lines += [f"! drift opens {e['rule']} — repair closes it ({e['owner']})"
              for e in exp.get("drift_opened", ())]
    return lines


#: Reachability entries a plan shows; the rest are counted per tenant (all are in the JSON).
REACH_SHOWN = 50
#: Tenants the rest is counted for by name (most entries first); the others as a number.
REACH_TENANTS_NAMED = 10


def reachability_lines(doc: dict[str, Any], limit: int = REACH_SHOWN) -> list[str]:
    """`!` opens to the internet, `+` lets in from inside, `-` no longer lets in."""
    entries = doc.get("reachability", [])
    lines = [_reach_line(e) for e in entries[:limit]]
    rest = entries[limit:]
    if rest:
        tenants: dict[str, int] = {}
        for entry in rest:
            tenant = entry["nic"].split("/", 1)[0]
            tenants[tenant] = tenants.get(tenant, 0) + 1
        most = sorted(tenants.items(), key=lambda item: (-item[1], item[0]))
        named = ", ".join(f"{tenant} {count}" for tenant, count in most[:REACH_TENANTS_NAMED])
        others = len(most) - REACH_TENANTS_NAMED
        if others > 0:
            named += f", and {others} other tenant{'s' if others > 1 else ''}"
        lines.append(f"  … and {len(rest)} more: {named} (every entry is in the JSON plan)")
    return lines


def internet_facing(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """What a change newly opens to the internet."""
    return [e for e in doc.get("reachability", []) if e["internet"] and e["change"] == "gained"]


def _reach_line(entry: dict[str, Any]) -> str:
    gained = entry["change"] == "gained"
    sign = ("!" if entry["internet"] else "+") if gained else "-"
    verb = "can now be reached with" if gained else "can no longer be reached with"
    members = f" ({', '.join(entry['members'])})" if entry.get("members") else ""
    return f"{sign} {entry['nic']} {verb} {entry['opening']}{members} — {entry['cause']}"


def _diagnostic_lines(doc: dict[str, Any]) -> list[str]:
    out = []
    for d in doc["diagnostics"]:
        where = f" {d['file']}:{d['line']}" if d.get("file") and d.get("line") else ""
        out.append(f"{d['severity']} {d['code']}{where}: {d['message']}")
        if d.get("hint"):
            out.append(f"    hint: {d['hint']}")
    return out


# --- text -----------------------------------------------------------------------------------


def render_text(doc: dict[str, Any], colour: bool = False) -> str:
    paint = _painter(colour)
    out = [_inputs_line(doc), ""]
    changes = {c["id"]: c for c in doc["backend_changes"]}
    for resource in _resources(doc):
        action = _action(resource["actions"])
        out.append(paint(action, f"{SYMBOL[action]:>3} {resource['address']} {VERB[action]}")
                   + f"  ({resource['reason']})")
        for uid in resource["backend_changes"]:
            change = changes[uid]
            if _action(change["actions"]).changes:
                out += ["      " + line for line in _change_lines(change)]
        out.append("")
    drift = [changes[uid] for uid in doc["drift"]]
    if drift:
        out.append(f"Drift: {_count(len(drift), 'backend object')} changed outside unet:")
        out += ["  " + line for c in drift for line in _change_lines(c)]
        out.append("")
    reach = reachability_lines(doc)
    if reach:
        out += ["Reachability (who can reach what, per workload NIC):"]
        out += ["  " + paint("delete" if e[0] == "!" else "bold" if e[0] == "+" else "no-op", e)
                for e in reach]
        out.append("")
    exposure = exposure_lines(doc)
    if exposure:
        out += ["Exposure (what this plan opens to the outside):"]
        # What opens to the outside is the danger: red; what closes is green.
        out += ["  " + paint("delete" if e[0] in "+!" else "create", e) for e in exposure]
        out.append("")
    if doc["diagnostics"]:
        out += ["Diagnostics:"] + ["  " + line for line in _diagnostic_lines(doc)] + [""]
    rows = doc["row_counts"]
    out.append(paint("bold", summary_line(doc)))
    out.append(f"Backend rows: {rows['delete']} to delete, {rows['replace']} to replace, "
               f"{rows['create']} to create, {rows['update']} to update, in "
               f"{_count(len(doc['waves']), 'wave')}.")
    if not doc["valid"]:
        out.append(paint("delete", "The plan has errors (see Diagnostics): it cannot be "
                                   "applied."))
    elif not doc["has_changes"]:
        out.append("No changes. The backends match the repo.")
    return "\n".join(out) + "\n"


def _painter(colour: bool) -> Callable[[str, str], str]:
    styles = {"create": "green", "delete": "red", "replace": "magenta", "update": "yellow",
              "bold": "bold", "no-op": "dim"}
    paint = painter(colour)
    return lambda kind, text: paint(styles[kind], text)


# --- Markdown -------------------------------------------------------------------------------


def render_markdown(doc: dict[str, Any], limit: int = PR_COMMENT_LIMIT, marker: str = "") -> str:
    """Summary first (it always survives); resource details cut from the end to fit `limit`."""
    head = _markdown_summary(doc, marker)
    changes = {c["id"]: c for c in doc["backend_changes"]}
    resources = _resources(doc)
    note = "\n_{n} not shown here (GitHub's size limit); " \
           "`unet show plan.json` prints the whole plan._\n"
    body = head
    for index, resource in enumerate(resources):  # rendered lazily: most may be cut
        block = _markdown_resource(changes, resource)
        rest = len(resources) - index
        shown = note.format(n=_count(rest, "more changed resource"))
        if len(body) + len(block) + len(shown) > limit:
            return body + shown
        body += block
    return body


def _markdown_summary(doc: dict[str, Any], marker: str) -> str:
    counts = doc["counts"]
    rows = doc["row_counts"]
    lines = [marker, f"### unet plan: {_inputs_line(doc).split(': ', 1)[1]}", ""] if marker \
        else [f"### unet plan: {_inputs_line(doc).split(': ', 1)[1]}", ""]
    if counts["delete"] or counts["replace"]:
        lines.append(f"> [!WARNING]\n> **{counts['delete']} to delete, {counts['replace']} to "
                     "replace.** Check these first.")
        lines.append("")
    lines += ["| | delete | replace | create | update | unchanged |",
              "|---|---|---|---|---|---|",
              f"| resources | {counts['delete']} | {counts['replace']} | {counts['create']} | "
              f"{counts['update']} | {counts['no-op']} |",
              f"| backend rows | {rows['delete']} | {rows['replace']} | {rows['create']} | "
              f"{rows['update']} | {rows['no-op']} |", ""]
    if doc["drift"]:
        lines += [f"**Drift:** {_count(len(doc['drift']), 'backend object')} changed outside unet "
                  "and will be repaired.", ""]
    opened = internet_facing(doc)
    if opened:
        lines += ["> [!WARNING]", f"> **Opens to the internet: {_count(len(opened), 'way')} "
                  "in.**"] + [f"> - `{e['nic']}`: {_escape(e['opening'])} — {e['cause']}"
                              for e in opened[:20]] + [""]
    reach = reachability_lines(doc)
    if reach:
        lines += ["#### Reachability", "", "```diff", *reach, "```", ""]
    exposure = exposure_lines(doc)
    if exposure:
        lines += ["#### Exposure", "", "```diff", *exposure[:200], "```", ""]
        if len(exposure) > 200:
            lines += [f"_{_count(len(exposure) - 200, 'more exposure line')} in the full plan._",
                      ""]
    diagnostics = _diagnostic_lines(doc)
    if diagnostics:
        lines += ["#### Diagnostics", "", "```", *diagnostics[:100], "```", ""]
    if not doc["valid"]:
        lines += ["**The plan has errors (see Diagnostics): it cannot be applied.**", ""]
    elif not doc["has_changes"]:
        lines += ["No changes: the backends already match.", ""]
    elif _resources(doc):
        lines += ["#### Changes", ""]
    return "\n".join(lines) + "\n"


def _markdown_resource(changes: dict[str, dict[str, Any]], resource: dict[str, Any]) -> str:
    action = _action(resource["actions"])
    lines = [f"<details><summary><code>{SYMBOL[action]}</code> <b>{resource['address']}</b> "
             f"{VERB[action]} — {_escape(resource['reason'])}</summary>", "", "```diff"]
    for uid in resource["backend_changes"]:
        change = changes[uid]
        if change["actions"] != ["no-op"]:
            lines += _change_lines(change)
    lines += ["```", "</details>", ""]
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    return text.replace("<", "&lt;").replace(">", "&gt;")
