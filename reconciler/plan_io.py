"""The plan as JSON, both ways: its document (`plan_to_json`), the file `unet plan -o` saves
(the document plus a digest of its own content) and its reader, which refuses anything unet
did not write.

The digest only tells a file changed after unet wrote it; it is no signature. What
binds a saved plan to the repo and the backends is `unet apply FILE` planning again
from the revision the plan names and applying only when the result is the same plan
(commands.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import fastjsonschema

from . import __version__
from .diagnostics import Diagnostic
from .diff import Action, Change, FieldChange
from .errors import UnetError
from .objects import BackendObject
from .plan import FORMAT_VERSION, SUPPORTED_MAJOR, Describe, Plan, ResourcePlan

DIGEST_FIELD = "plan_digest"


class PlanFormatError(UnetError):
    """A file that is not a plan this version of unet wrote, or can read."""


# --- the document --------------------------------------------------------------------------


def plan_to_json(plan: Plan) -> dict[str, Any]:
    wave_of = {step.id: index for index, wave in enumerate(plan.waves) for step in wave}
    return {
        "format_version": FORMAT_VERSION,
        "unet_version": __version__,
        "mode": plan.mode,
        "installation": plan.installation,
        "inputs": plan.inputs,
        "observed_fingerprint": plan.fingerprint,
        "counts": plan.counts,
        "row_counts": plan.row_counts,
        "has_changes": plan.has_changes,
        "valid": plan.ok,
        "diagnostics": [d.to_json() for d in sorted(plan.diagnostics, key=Diagnostic.sort_key)],
        "exposure": plan.exposure,
        "reachability": plan.reachability,
        "resources": [_resource_json(r) for r in plan.resources],
        "backend_changes": [_change_json(c, wave_of, c.uid in plan.drift_ids, plan.describe)
                            for c in plan.changes],
        "drift": sorted(plan.drift_ids),
        "waves": [{"index": i, "steps": [step.id for step in wave]}
                  for i, wave in enumerate(plan.waves)],
        "desired_digests": plan.desired_digests,
        "managers": plan.managers,
    }


def _resource_json(resource: ResourcePlan) -> dict[str, Any]:
    return {
        "address": resource.address,
        "actions": resource.action.to_json(),
        "reason": resource.reason,
        "replaced_by_fields": resource.fields,
        "backend_changes": [c.uid for c in resource.changes],
    }


#: The lists of a plan's entries, one per distinct value (the document is read only): a
#: plan of 155,000 rows held five lists per row, 43 MB, and at 1,000 tenants that document
#: was the peak of a run that printed it.
_LISTS: dict[tuple[Any, ...], list[Any]] = {}


def _shared(values: Iterable[Any]) -> list[Any]:
    """A list of `values` (hashable) that every entry with the same values holds."""
    key = tuple(values)
    found = _LISTS.get(key)
    if found is None:
        found = _LISTS[key] = list(key)
    return found


def _change_json(change: Change, wave_of: dict[str, int], drift: bool,
                 describe: Describe) -> dict[str, Any]:
    obj = change.obj
    if not change.action.changes:  # most rows of a large plan: listed, not repeated
        return {"id": change.uid, "manager": obj.manager, "table": obj.table, "key": obj.key,
                "owner": obj.owner, "actions": _shared(Action.NOOP.to_json()),
                "reason": change.reason, "before": None, "after": None, "changes": _shared(()),
                "forces_replacement": _shared(()), "unknown": _shared(()), "drift": drift,
                "waves": _shared(())}
    waves = sorted({wave_of[f"{a} {change.uid}"] for a in change.action.steps
                    if f"{a} {change.uid}" in wave_of})
    return {
        "id": change.uid,
        "manager": obj.manager,
        "table": obj.table,
        "key": obj.key,
        "owner": obj.owner,
        "label": describe.label(obj),
        "actions": _shared(change.action.to_json()),
        "reason": change.reason,
        "before": _object_json(change.before),
        "after": _object_json(change.after),
        "changes": [{"path": f.path, "before": f.before, "after": f.after}
                    for f in change.fields] if change.fields else _shared(()),
        "forces_replacement": _shared(change.forces),
        "unknown": _shared(sorted(change.after.unknown) if change.after else ()),
        "drift": drift,
        "waves": _shared(waves),
    }


def _plain_dict(value: Mapping[str, Any]) -> dict[str, Any]:
    return value if type(value) is dict else dict(value)


def _object_json(obj: BackendObject | None) -> dict[str, Any] | None:
    if obj is None:
        return None
    out = {  # the object's own dicts, not copies (read only): 155,000 rows of an apply
        "fields": _plain_dict(obj.fields),
        "refs": {k: list(v) for k, v in obj.refs.items()},
        "parent": list(obj.parent) if obj.parent else None,
        "meta": _plain_dict(obj.meta),
        "unknown": _shared(sorted(obj.unknown)),
    }
    if obj.holds:
        out["holds"] = list(obj.holds)
    return out


def plan_digest(document: dict[str, Any]) -> str:
    """Of every field but the digest itself, in the canonical encoding."""
    body = {k: v for k, v in document.items() if k != DIGEST_FIELD}
    return _sha256(json.dumps(body, sort_keys=True, default=str))


def dumps(plan: Plan) -> str:
    """The plan as saved by `unet plan -o`."""
    return document_text(plan_to_json(plan))


def document_text(document: dict[str, Any]) -> str:
    """A plan document as unet writes it: its canonical JSON with the digest added."""
    body = {k: v for k, v in document.items() if k != DIGEST_FIELD}
    text = json.dumps(body, sort_keys=True, default=str)
    return text[:-1] + f', "{DIGEST_FIELD}": "{_sha256(text)}"}}\n'


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def read_plan(path: Path) -> dict[str, Any]:
    """A saved plan, checked: JSON, a known format, its own digest, the shape unet writes."""
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise PlanFormatError(exc.strerror or str(exc)) from exc
    except ValueError as exc:
        raise PlanFormatError(f"not JSON ({exc})") from exc
    except RecursionError as exc:
        raise PlanFormatError("not a unet plan (JSON nested too deeply)") from exc
    if not isinstance(document, dict):
        raise PlanFormatError(f"not a unet plan (a JSON object was expected, not a "
                              f"{type(document).__name__})")
    check_format(document)
    digest = document.get(DIGEST_FIELD)
    if not isinstance(digest, str):
        raise PlanFormatError(f"it has no {DIGEST_FIELD}: it was not written by this unet "
                              "(or by an older one); make a new plan")
    if digest != plan_digest(document):
        raise PlanFormatError("the plan file was changed after unet wrote it (its "
                              f"{DIGEST_FIELD} does not match its content); make a new plan")
    _check_shape(document)
    return document


def check_format(document: dict[str, Any]) -> None:
    version = str(document.get("format_version", ""))
    major = version.split(".")[0]
    if not major.isdigit():
        raise PlanFormatError("not a unet plan (no format_version)")
    if int(major) != SUPPORTED_MAJOR:
        raise PlanFormatError(f"plan format {version} is not supported by this unet "
                              f"(reads {SUPPORTED_MAJOR}.x)")


# The fields unet reads from a saved plan (to show it, to check it before applying); a
# later minor version may add fields, so unknown ones are allowed everywhere.
_TEXT = {"type": "string"}
_TEXTS = {"type": "array", "items": _TEXT}
_MAYBE_TEXT = {"type": ["string", "null"]}
_COUNTS = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0},
           "required": ["delete", "replace", "create", "update", "no-op"]}
_ACTIONS = {"type": "array", "minItems": 1, "maxItems": 2,
            "items": {"enum": ["create", "update", "delete", "no-op"]}}


def _entries(*keys: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "object", "required": list(keys),
                                       "properties": {k: _TEXT for k in keys}}}


_OBJECT = {"type": ["object", "null"], "required": ["fields"],
           "properties": {"fields": {"type": "object"}, "holds": _TEXTS}}
_PLAN_SCHEMA = {
    "type": "object",
    "required": ["mode", "installation", "inputs", "observed_fingerprint", "counts",
                 "row_counts", "has_changes", "valid", "diagnostics", "exposure", "resources",
                 "backend_changes", "drift", "waves", "desired_digests", "managers"],
    "properties": {
        "mode": {"enum": ["live", "pr"]},
        "installation": _TEXT,
        "inputs": {"type": "object", "required": ["head"], "properties": {
            "head": {"type": "object", "required": ["path"],
                     "properties": {"path": _TEXT, "rev": _MAYBE_TEXT, "commit": _TEXT}},
            "base": {"type": "object"}, "refresh_only": {"type": "boolean"}}},
        "observed_fingerprint": _TEXT,
        "counts": _COUNTS,
        "row_counts": _COUNTS,
        "has_changes": {"type": "boolean"},
        "valid": {"type": "boolean"},
        "diagnostics": {"type": "array", "items": {
            "type": "object", "required": ["code", "severity", "message"],
            "properties": {"code": _TEXT, "severity": _TEXT, "message": _TEXT,
                           "file": _MAYBE_TEXT, "line": {"type": ["integer", "null"]},
                           "hint": _MAYBE_TEXT}}},
        "exposure": {"type": "object", "properties": {
            **{name: _entries("rule", "owner")
               for name in ("rules_opened", "rules_closed", "drift_opened")},
            **{name: _entries("address", "target", "owner")
               for name in ("ips_attached", "ips_detached", "nat_added", "nat_removed")}},
            "additionalProperties": {"type": "array"}},
        "reachability": {"type": "array", "items": {
            "type": "object", "required": ["nic", "change", "internet", "opening", "cause"],
            "properties": {"nic": _TEXT, "change": {"enum": ["gained", "lost"]},
                           "internet": {"type": "boolean"}, "opening": _TEXT,
                           "cause": _TEXT}}},
        "resources": {"type": "array", "items": {
            "type": "object", "required": ["address", "actions", "reason", "backend_changes"],
            "properties": {"address": _TEXT, "actions": _ACTIONS, "reason": _TEXT,
                           "backend_changes": _TEXTS}}},
        "backend_changes": {"type": "array", "items": {
            "type": "object",
            "required": ["id", "manager", "table", "key", "owner", "actions", "reason",
                         "before", "after", "changes", "unknown", "drift"],
            "properties": {
                "id": _TEXT, "manager": _TEXT, "table": _TEXT, "key": _TEXT, "owner": _TEXT,
                "label": _TEXT, "actions": _ACTIONS, "reason": _TEXT,
                "before": _OBJECT, "after": _OBJECT, "unknown": _TEXTS,
                "drift": {"type": "boolean"},
                "changes": {"type": "array", "items": {"type": "object", "required": ["path"],
                                                       "properties": {"path": _TEXT}}}}}},
        "drift": _TEXTS,
        "waves": {"type": "array", "items": {"type": "object", "required": ["steps"],
                                             "properties": {"steps": _TEXTS}}},
        "desired_digests": {"type": "object", "additionalProperties": _TEXT},
        "managers": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["plugin"], "properties": {"plugin": _TEXT}}},
    },
}


@functools.cache
def _shape_validator() -> Callable[[Any], Any]:
    return fastjsonschema.compile(_PLAN_SCHEMA)  # a few tens of ms: only when a plan is read


def _check_shape(document: dict[str, Any]) -> None:
    try:
        _shape_validator()(document)
    except fastjsonschema.JsonSchemaValueException as exc:
        raise PlanFormatError(f"not a plan unet wrote: {exc.message}") from exc
    ids = {change["id"] for change in document["backend_changes"]}
    missing = sorted({uid for resource in document["resources"]
                      for uid in resource["backend_changes"]} - ids)
    missing += sorted(set(document["drift"]) - ids)
    if missing:
        raise PlanFormatError(f"not a plan unet wrote: it names backend change {missing[0]}, "
                              "which it does not hold")


def changes_from_json(document: dict[str, Any]) -> list[Change]:
    """The backend changes of a plan document as objects (the benchmark's nbctl script)."""
    out = []
    for item in document["backend_changes"]:
        out.append(Change(item["id"], _object(item, "before"), _object(item, "after"),
                          Action.from_json(item["actions"]), item["reason"],
                          [FieldChange(f["path"], f["before"], f["after"])
                           for f in item["changes"]]))
    return out


def _object(item: dict[str, Any], side: str) -> BackendObject | None:
    data = item[side]
    if data is None:
        return None
    return BackendObject(item["manager"], item["table"], item["key"], item["owner"],
                         data["fields"], {k: tuple(v) for k, v in data["refs"].items()},
                         tuple(data["parent"]) if data["parent"] else None,
                         frozenset(data.get("unknown", ())), data["meta"],
                         tuple(data.get("holds", ())))
