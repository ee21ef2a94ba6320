"""Checks tool arguments against the tool's inputSchema before the server sees them.

The dialect is chosen per schema (`$schema`, defaulting to 2020-12, MCP's default;
the TypeScript reference servers declare draft-07). A failure names every failing
field by JSON pointer with what was expected and what was received, plus an example
payload, so the agent can fix the call in one go.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from wasmexec._toolhost import HostCallError
from wasmexec._tools import stubs as _stubs

#: Enough failing fields for any real mistake; more would only flood the model's context.
MAX_REPORTED_ERRORS = 20
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


@lru_cache(maxsize=1024)
def _validator(schema_json: str) -> Any:
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
    from jsonschema.validators import validator_for  # type: ignore[import-untyped]

    schema = json.loads(schema_json)
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except Exception:
        return None
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def json_pointer(path: Any) -> str:
    """RFC 6901 pointer of a jsonschema error path ("" is the whole document)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _received(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    kind = "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)
    return f"{kind} {text[:80]}{'…' if len(text) > 80 else ''}"


def _expected(error: Any) -> str:
    keyword, value = error.validator, error.validator_value
    if keyword == "required":
        missing = error.message.split("'")[1] if "'" in error.message else value
        return f"required property {missing!r}"
    if keyword == "additionalProperties":
        return "no properties besides those in the schema"
    if keyword in ("type", "enum", "const", "format", "pattern", "minimum", "maximum", "minLength", "maxLength",
                   "minItems", "maxItems", "multipleOf", "exclusiveMinimum", "exclusiveMaximum"):  # fmt: skip
        return f"{keyword} {json.dumps(value, ensure_ascii=False)[:120]}"
    return f"{keyword} constraint"


def schema_errors(schema: dict[str, Any], arguments: dict[str, Any]) -> list[dict[str, str]]:
    """Every way `arguments` fails `schema` (empty when valid or when the schema is unusable)."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    if validator is None:
        return []
    found = sorted(validator.iter_errors(arguments), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [
        {"pointer": json_pointer(error.absolute_path), "keyword": str(error.validator), "expected": _expected(error),
         "received": _received(error.instance), "message": error.message[:300]}
        for error in found[:MAX_REPORTED_ERRORS]
    ]  # fmt: skip


def validate_arguments(entry: Any, arguments: dict[str, Any]) -> None:
    """Raises an ``invalid-argument`` HostCallError (SchemaValidationError in the guest) on failure."""
    errors = schema_errors(entry.input_schema, arguments)
    if not errors:
        return
    first = errors[0]
    where = first["pointer"] or "the arguments"
    raise HostCallError(
        "invalid-argument",
        f"{entry.export_name}() arguments do not match the schema of {entry.server_id}.{entry.tool_name}: "
        f"{where}: expected {first['expected']}, got {first['received']}"
        + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
        f"Fix the fields in .errors; an example payload is in .detail['example']; "
        f"discovery.get_tool({entry.server_id!r}, {entry.tool_name!r}) shows the schema.",
        tool=entry.tool_name, export_name=entry.export_name, server_id=entry.server_id, errors=errors,
        example=_stubs.example_payload(entry.input_schema, entry.input_schema),
    )  # fmt: skip
