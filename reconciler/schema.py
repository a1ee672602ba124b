"""Stage `schema`: structural validation of documents, then typed models.

The JSON Schemas are generated from the pydantic models and committed under
`schemas/` (an installed unet ships them as `reconciler/schemas/`); validation
reads those files. A compiled validator (fastjsonschema) accepts the common,
valid document quickly; a document it rejects is run through jsonschema to
collect every error with its path.

There are two forms. The per-kind files are what validation checks shapes with.
The combined `unet.schema.json` is for editors: self-contained, and stricter by
the models' `editor_only` keywords, rules whose specific codes and hints the
semantic stage reports for `unet validate`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import fastjsonschema
import jsonschema
import pydantic
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, models_json_schema
from pydantic_core import core_schema

from .diagnostics import Diagnostic, json_pointer
from .load import Document
from .models import API_VERSION, DNS_LABEL, EDITOR_ONLY, KINDS, immutable_note

_PACKAGE = Path(__file__).resolve().parent
SCHEMA_ID_BASE = "https://unet.dev/schemas/v1alpha1/"
COMBINED_SCHEMA = "unet.schema.json"


class _ManifestSchema(GenerateJsonSchema):
    """Schemas for people and editors: no generated titles, optional fields not nullable."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        value = super().model_schema(schema)
        value.pop("title", None)
        return value

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        value = super().default_schema(schema)
        if value.get("default", 0) is None:
            del value["default"]
        return value


def schema_file_name(kind: str) -> str:
    return f"{kind}.schema.json"


def source_schema_dir() -> Path | None:
    """`schemas/` of the source tree unet runs from; None when it runs installed."""
    root = _PACKAGE.parent
    if (root / "pyproject.toml").is_file() and (root / "schemas").is_dir():
        return root / "schemas"
    return None


def schema_dir() -> Path:
    """The folder of the schemas this unet validates with: the ones a wheel ships
    (`reconciler/schemas/`), else the source tree's `schemas/`."""
    shipped = _PACKAGE / "schemas"
    return shipped if shipped.is_dir() else source_schema_dir() or shipped


def generate_schemas() -> dict[str, dict[str, Any]]:
    """File name → JSON Schema, for every kind plus the combined editor schema."""
    files: dict[str, dict[str, Any]] = {}
    for kind, model in KINDS.items():
        schema = model.model_json_schema(schema_generator=_ManifestSchema)
        _note_immutable(schema, schema, kind)
        files[schema_file_name(kind)] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": SCHEMA_ID_BASE + schema_file_name(kind),
            "title": kind,
            **_editor_form(schema, editor=False),
        }
    files[COMBINED_SCHEMA] = _combined_schema()
    return files


def _combined_schema() -> dict[str, Any]:
    """Every kind in one file, under `$defs`, so that an editor needs nothing else; with
    the editor-only keywords."""
    refs, top = models_json_schema([(model, "validation") for model in KINDS.values()],
                                   schema_generator=_ManifestSchema)
    ref_of = {kind: refs[(model, "validation")] for kind, model in KINDS.items()}
    for kind in KINDS:
        _note_immutable(top, _resolve(top, ref_of[kind]), kind)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID_BASE + COMBINED_SCHEMA,
        "title": "unet manifest",
        "description": "Any unet manifest; the kind selects the schema.",
        "type": "object",
        "required": ["apiVersion", "kind"],
        "properties": {
            "apiVersion": {"const": API_VERSION},
            "kind": {"enum": sorted(KINDS)},
        },
        "allOf": [
            {
                "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                "then": ref_of[kind],
            }
            for kind in sorted(KINDS)
        ],
        "$defs": _editor_form(top["$defs"], editor=True),
    }


def _note_immutable(root: dict[str, Any], schema: dict[str, Any], kind: str) -> None:
    """Append to the description of each immutable field of `kind` (in `schema`, whose
    `$ref`s point into `root`) what changing it replaces, from the model's own list:
    the editor's hover says it. A definition two kinds share must get one note."""
    note = immutable_note(KINDS[kind])
    for path in KINDS[kind].immutable:
        field = _field_schema(root, schema, path.split("."))
        described = field.get("description", "")
        if "Immutable:" in described:
            if not described.endswith(note):
                raise ValueError(f"{kind} {path}: a shared definition would say two things")
            continue
        field["description"] = f"{described.rstrip('.')}. {note}" if described else note


def _field_schema(root: dict[str, Any], schema: dict[str, Any],
                  parts: list[str]) -> dict[str, Any]:
    for part in parts:
        schema = _resolve(root, schema)
        schema = schema["items"] if part == "*" else schema["properties"][part]
    return schema


def _resolve(root: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The definition a `{"$ref": "#/$defs/Name"}` names; any other schema as it is."""
    ref = schema.get("$ref")
    if ref is None:
        return schema
    found: dict[str, Any] = root["$defs"][ref.removeprefix("#/$defs/")]
    return found


def _editor_form(value: Any, editor: bool) -> Any:
    """`value` without its editor-only keywords, or (`editor`) with them merged in."""
    if isinstance(value, list):
        return [_editor_form(item, editor) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: _editor_form(item, editor) for key, item in value.items() if key != EDITOR_ONLY}
    extra = value.get(EDITOR_ONLY, {}) if editor else {}
    if set(extra) & set(out):
        raise ValueError(f"editor-only keywords {sorted(set(extra) & set(out))} are set "
                         "already")
    return {**out, **extra}


def render_schema_file(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


@cache
def kind_schemas() -> dict[str, dict[str, Any]]:
    """The committed schema of every kind (generated ones when the files are not there)."""
    folder = schema_dir()
    if folder.is_dir():
        return {
            kind: json.loads((folder / schema_file_name(kind)).read_text())
            for kind in KINDS
        }
    generated = generate_schemas()
    return {kind: generated[schema_file_name(kind)] for kind in KINDS}


@cache
def _fast_validator(kind: str) -> Any:
    return fastjsonschema.compile(kind_schemas()[kind])


@cache
def _full_validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(kind_schemas()[kind])


@dataclass(slots=True)
class Manifest:
    """A document that passed the schema, with its typed model."""

    doc: Document
    obj: Any  # one of models.Resource

    @property
    def kind(self) -> str:
        return self.obj.kind  # type: ignore[no-any-return]

    @property
    def name(self) -> str:
        return self.obj.metadata.name  # type: ignore[no-any-return]

    @property
    def tenant(self) -> str | None:
        return self.doc.tenant

    @property
    def identity(self) -> tuple[str, str | None, str]:
        return (self.kind, self.tenant if self.obj.scope == "tenant" else None, self.name)

    @property
    def ref(self) -> str:
        """`Kind/tenant/name` for tenant kinds, `Kind/name` otherwise."""
        kind, tenant, name = self.identity
        return f"{kind}/{tenant}/{name}" if tenant else f"{kind}/{name}"

    def data(self) -> Any:
        """The manifest's data: its document's, else (let go once the model was built, see
        `release_data`) what its model holds of what was written, with the defaults the
        model filled in."""
        if self.doc.data is not None:
            return self.doc.data
        return self.obj.model_dump(mode="json", by_alias=True, exclude_unset=True)


def release_data(manifests: list[Manifest]) -> None:
    """Let go of the YAML data of documents that became manifests: everything after the
    schema reads their models, and at 1,000 tenants the data was 85 MB of every run's
    memory beside the models (`Manifest.data` gives it back from the model)."""
    for manifest in manifests:
        manifest.doc.data = None


def validate_documents(documents: list[Document]) -> tuple[list[Manifest], list[Diagnostic]]:
    manifests: list[Manifest] = []
    diagnostics: list[Diagnostic] = []
    for doc in documents:
        if not _shaped(doc, diagnostics):
            continue
        try:
            manifests.append(manifest_of(doc))
        except pydantic.ValidationError as exc:  # the schema and model disagree: still no crash
            diagnostics.extend(_pydantic_problems(doc, exc))
    return manifests, diagnostics


def shape_checked(documents: list[Document]) -> tuple[list[Document], list[Diagnostic]]:
    """What `validate_documents` finds before it builds the models: the documents whose
    shapes pass the schema, and the problems of the others."""
    diagnostics: list[Diagnostic] = []
    return [doc for doc in documents if _shaped(doc, diagnostics)], diagnostics


def _shaped(doc: Document, diagnostics: list[Diagnostic]) -> bool:
    """Whether `doc`'s shape passes the schema; what is wrong with it goes to `diagnostics`."""
    if doc.broken:
        return False  # its syntax error is reported where it was read
    problems = list(_shape_problems(doc))
    diagnostics.extend(problems)
    return not problems


def manifest_of(doc: Document) -> Manifest:
    """The typed manifest of a document whose shape passed the schema."""
    return Manifest(doc, KINDS[doc.data["kind"]].model_validate(doc.data))


def _shape_problems(doc: Document) -> Iterator[Diagnostic]:
    data = doc.data
    if not isinstance(data, dict):
        found = "a list" if isinstance(data, list) else f"a {_type_name(data)}"
        yield _diag(doc, "SCHEMA_TYPE", (), f"a manifest must be a mapping, found {found}",
                    "start the document with apiVersion, kind and metadata")
        return
    kind = data.get("kind")
    if "apiVersion" not in data or "kind" not in data:
        for key in ("apiVersion", "kind"):
            if key not in data:
                yield _diag(doc, "SCHEMA_REQUIRED", (), f"'{key}' is missing",
                            f"every manifest starts with apiVersion: {API_VERSION} and a kind")
        return
    if data["apiVersion"] != API_VERSION:
        yield _diag(doc, "UNKNOWN_KIND", ("apiVersion",),
                    f"unknown apiVersion {data['apiVersion']!r}", f"use {API_VERSION}")
        return
    if not isinstance(kind, str) or kind not in KINDS:
        close = difflib.get_close_matches(str(kind), KINDS, n=1)
        yield _diag(doc, "UNKNOWN_KIND", ("kind",), f"unknown kind {kind!r}",
                    f"did you mean {close[0]}?" if close else
                    "known kinds: " + ", ".join(sorted(KINDS)))
        return
    try:
        _fast_validator(kind)(data)
        return
    except fastjsonschema.JsonSchemaException:
        pass
    errors = sorted(_full_validator(kind).iter_errors(data), key=lambda e: list(e.absolute_path))
    for error in errors:
        yield from _schema_error(doc, error)


def _schema_error(doc: Document, error: jsonschema.ValidationError) -> Iterator[Diagnostic]:
    path = tuple(error.absolute_path)
    instance, validator = error.instance, error.validator
    if validator == "required":
        for key in error.validator_value:
            if isinstance(instance, dict) and key not in instance:
                yield _diag(doc, "SCHEMA_REQUIRED", (*path, key), f"'{key}' is missing",
                            None, line_path=path)
    elif validator == "additionalProperties":
        known = list(error.schema.get("properties", {}))
        for key in instance:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f"did you mean '{close[0]}'?" if close else (
                    "allowed here: " + ", ".join(known) if known else None)
                yield _diag(doc, "SCHEMA_UNKNOWN_FIELD", (*path, key),
                            f"unknown field '{key}'", hint)
    else:
        hint = _HINTS.get((str(path[-1]) if path else "", validator))
        yield _diag(doc, "SCHEMA_TYPE", path, _type_message(error), hint)


#: Hints for shape errors whose fix is not obvious from the message: (field, keyword) → hint.
_HINTS = {
    ("securityGroups", "minItems"): "leave securityGroups out to use the network's default "
                                    "group; to let nothing in, name a group without ingress "
                                    "rules",
}


def _type_message(error: jsonschema.ValidationError) -> str:
    instance, validator, expected = error.instance, error.validator, error.validator_value
    field = str(error.absolute_path[-1]) if error.absolute_path else "the document"
    if isinstance(field, int) or field.isdigit():
        field = "this item"
    if validator == "type":
        return f"{field} must be {_article(expected)}, found {_describe(instance)}"
    if validator in ("enum", "const"):
        options = expected if validator == "enum" else [expected]
        return f"{field} must be one of {', '.join(map(str, options))}; found {_describe(instance)}"
    if validator == "pattern" and expected == DNS_LABEL:
        return (f"{field} {_describe(instance)} is not a DNS label: lower-case letters, digits "
                "and '-', starting and ending with a letter or digit")
    if validator == "pattern":
        return f"{field} {_describe(instance)} does not match the expected form"
    if validator in ("minLength", "maxLength"):
        return f"{field} must have {validator[:3]}imum length {expected}"
    if validator in ("minItems", "maxItems"):
        return f"{field} must have {'at least' if validator == 'minItems' else 'at most'} " \
               f"{expected} item{'s' if expected != 1 else ''}"
    if validator in ("minimum", "maximum"):
        return f"{field} must be {'at least' if validator == 'minimum' else 'at most'} " \
               f"{expected}; found {instance}"
    return f"{field}: {error.message}"


_JSON_TYPES = {"string": "a string", "integer": "an integer", "boolean": "true or false",
               "object": "a mapping", "array": "a list", "number": "a number", "null": "empty"}


def _article(expected: Any) -> str:
    if isinstance(expected, list):
        return " or ".join(_JSON_TYPES.get(str(t), str(t)) for t in expected)
    return _JSON_TYPES.get(expected, str(expected))


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    names: dict[type, str] = {str: "string", int: "integer", float: "number", dict: "mapping",
                              list: "list"}
    return names.get(type(value), type(value).__name__)


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return _article("object")
    if isinstance(value, list):
        return _article("array")
    if value is None:
        return _article("null")
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _pydantic_problems(doc: Document, exc: pydantic.ValidationError) -> Iterator[Diagnostic]:
    for error in exc.errors():
        path = tuple(error["loc"])
        yield _diag(doc, "SCHEMA_TYPE", path, error["msg"], None)


def _diag(doc: Document, code: str, path: tuple[Any, ...], message: str, hint: str | None,
          line_path: tuple[Any, ...] | None = None) -> Diagnostic:
    return Diagnostic(code, message, file=doc.file,
                      line=doc.line_of(path if line_path is None else line_path),
                      path=json_pointer(path), hint=hint)
