"""Checks tool arguments against the tool's inputSchema before the server sees them.

The dialect is chosen per schema (`$schema`, defaulting to 2020-12, MCP's default;
the TypeScript reference servers declare draft-07). A failure names every failing
field by JSON pointer with what was expected and what was received, plus an example
payload, so the agent can fix the call in one go.

The arguments come from the guest and the check runs on the host, where epochs
cannot stop it, so it is bounded: at most `MAX_VALIDATION_STEPS` keyword checks and
`MAX_VALIDATION_ERRORS` errors (past either, the host leaves the check to the
server, which validates its own input), patterns only on strings of at most
`MAX_PATTERN_SUBJECT_CHARS`, formats on at most `MAX_FORMAT_SUBJECT_CHARS`, no host
check at all for a schema with a backtracking-prone pattern (nested quantifiers),
and the run's deadline checked every `DEADLINE_CHECK_STEPS` steps.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from functools import lru_cache, partial
from typing import Any

from wasmexec._runctx.runstate import check_deadline
from wasmexec._runctx.toolhost import HostCallError
from wasmexec._tools import stubs as _stubs

#: Enough failing fields for any real mistake; more would only flood the model's context.
MAX_REPORTED_ERRORS = 20
#: Errors gathered (then sorted, so the report is stable) before the first `MAX_REPORTED_ERRORS` are kept.
MAX_COLLECTED_ERRORS = 100
#: Keyword checks one validation may make (about 10 µs each): arguments needing more go to the server unchecked.
MAX_VALIDATION_STEPS = 10_000
#: Errors one validation may produce (anyOf/oneOf keep their branches' errors): as above.
MAX_VALIDATION_ERRORS = 10_000
#: Longest string (or property name) a schema pattern runs on: even a safe pattern can backtrack polynomially.
MAX_PATTERN_SUBJECT_CHARS = 1_000
#: Longest string a `format` is checked on (formats such as "regex" compile the value).
MAX_FORMAT_SUBJECT_CHARS = 4_096
#: How often, in keyword checks, the run's deadline is looked at.
DEADLINE_CHECK_STEPS = 256
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


class _Exhausted(Exception):
    """The check would cost more than it is worth; the server checks its own input."""


class _Budget:
    def __init__(self) -> None:
        self.steps = 0
        self.errors = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_VALIDATION_STEPS:
            raise _Exhausted
        if self.steps % DEADLINE_CHECK_STEPS == 0:
            check_deadline("checking the arguments against the tool's schema")

    def error(self) -> None:
        self.errors += 1
        if self.errors > MAX_VALIDATION_ERRORS:
            raise _Exhausted


_budget: ContextVar[_Budget | None] = ContextVar("wasmexec_validation_budget", default=None)
Keyword = Callable[[Any, Any, Any, dict[str, Any]], Any]


def _metered(check: Keyword) -> Keyword:
    """A jsonschema keyword function that spends the current budget on every call and every error."""

    def keyword(validator: Any, value: Any, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
        budget = _budget.get()
        if budget is not None:
            budget.step()
        for error in check(validator, value, instance, schema) or ():
            if budget is not None:
                budget.error()
            yield error

    return keyword


def _skips_long_strings(check: Keyword, limit: int) -> Keyword:
    def keyword(validator: Any, value: Any, instance: Any, schema: dict[str, Any]) -> Any:
        if isinstance(instance, str) and len(instance) > limit:
            return None  # too long to check here; the server checks its own input
        return check(validator, value, instance, schema)

    return keyword


def _skips_long_keys(check: Keyword, only_with_patterns: bool) -> Keyword:
    def keyword(validator: Any, value: Any, instance: Any, schema: dict[str, Any]) -> Any:
        if (
            isinstance(instance, dict)
            and (not only_with_patterns or "patternProperties" in schema)
            and any(len(key) > MAX_PATTERN_SUBJECT_CHARS for key in instance)
        ):
            return None  # property names too long to match patterns against here
        return check(validator, value, instance, schema)

    return keyword


@lru_cache(maxsize=16)
def _bounded_class(cls: Any) -> Any:
    from jsonschema.validators import extend  # type: ignore[import-untyped]

    keywords: dict[str, Keyword] = dict(cls.VALIDATORS)
    keywords["pattern"] = _skips_long_strings(keywords["pattern"], MAX_PATTERN_SUBJECT_CHARS)
    if "format" in keywords:
        keywords["format"] = _skips_long_strings(keywords["format"], MAX_FORMAT_SUBJECT_CHARS)
    for name, only_with_patterns in (("patternProperties", False), ("additionalProperties", True)):
        if name in keywords:
            keywords[name] = _skips_long_keys(keywords[name], only_with_patterns)
    return extend(cls, {name: _metered(check) for name, check in keywords.items()})


def _patterns(schema: Any) -> Iterator[str]:
    """Every regular expression in a schema (`pattern` values, `patternProperties` keys)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str):
                    yield value
                elif key == "patternProperties" and isinstance(value, dict):
                    yield from (name for name in value if isinstance(name, str))
                stack.append(value)


def backtracking_prone(pattern: str) -> bool:
    """Whether a regex has a repeat inside a repeat, or an alternation inside one (`(a+)+`, `(a|a)*`).

    Such patterns can take exponential time in `re`, which cannot be interrupted; an unparsable
    pattern counts as prone too.
    """
    try:
        parsed = re._parser.parse(pattern)  # type: ignore[attr-defined]
    except (re.error, RecursionError, OverflowError, ValueError):
        return True
    return _nested_repeat(parsed, inside_repeat=False)


_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


def _nested_repeat(items: Any, *, inside_repeat: bool) -> bool:
    for op, argument in items:
        name = str(op)
        if name in _REPEATS:
            _, high, body = argument
            repeats = high > 1
            if repeats and inside_repeat:
                return True
            if _nested_repeat(body, inside_repeat=inside_repeat or repeats):
                return True
        elif name == "BRANCH":
            if inside_repeat:
                return True
            if any(_nested_repeat(branch, inside_repeat=False) for branch in argument[1]):
                return True
        elif name in ("SUBPATTERN", "ATOMIC_GROUP", "ASSERT", "ASSERT_NOT"):
            body = argument[-1]
            if _nested_repeat(body, inside_repeat=inside_repeat):
                return True
    return False


@lru_cache(maxsize=1024)
def _validator(schema_json: str) -> Any:
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
    from jsonschema.validators import validator_for

    schema = json.loads(schema_json)
    if any(backtracking_prone(pattern) for pattern in _patterns(schema)):
        return None  # the server checks such arguments itself
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except Exception:
        return None
    return _bounded_class(cls)(schema, format_checker=cls.FORMAT_CHECKER)


def json_pointer(path: Any) -> str:
    """RFC 6901 pointer of a jsonschema error path ("" is the whole document)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


#: Cuts a text to at most the given number of characters; the broker's also hides PII values the
#: call was given, so a cut never leaves part of one (`wasmexec._tools.pii.Given.shown`).
Show = Callable[[str, int], str]


def _cut(text: str, limit: int) -> str:
    return text[:limit]


def _shallow(value: Any, show: Show, depth: int = 2) -> Any:
    """A small copy of `value` for showing it (a failing value may be megabytes)."""
    if isinstance(value, str):
        return show(value, 100)
    if isinstance(value, (list, dict)) and depth == 0:
        return "…"
    if isinstance(value, list):
        return [_shallow(item, show, depth - 1) for item in value[:4]]
    if isinstance(value, dict):
        return {show(str(key), 40): _shallow(item, show, depth - 1)
                for key, item in itertools.islice(value.items(), 4)}  # fmt: skip
    return value


def _received(value: Any, show: Show) -> str:
    text = json.dumps(_shallow(value, show), ensure_ascii=False, default=repr)
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


def schema_errors(schema: dict[str, Any], arguments: dict[str, Any], show: Show = _cut) -> list[dict[str, str]]:
    """How `arguments` fails `schema`, at most `MAX_REPORTED_ERRORS` ways (`show` cuts what they quote).

    Empty when valid, when the schema is unusable or backtracking-prone, or when checking would
    cost more than the budget: the server then checks its own input.

    Raises:
        HostCallError: ``limit-exceeded`` when the run's deadline passes during the check.
    """
    return _errors(_validator(json.dumps(schema, sort_keys=True)), arguments, show)


def schema_checker(schema: dict[str, Any]) -> Callable[[dict[str, Any]], list[dict[str, str]]]:
    """`schema_errors` for a schema fixed for the caller's life (the server's own input schema): its
    validator is made once here, not looked up by re-serialising the schema on every call (~25 µs each)."""
    return partial(_errors, _validator(json.dumps(schema, sort_keys=True)))


def _errors(validator: Any, arguments: dict[str, Any], show: Show = _cut) -> list[dict[str, str]]:
    if validator is None:
        return []
    token = _budget.set(_Budget())
    try:
        collected = list(itertools.islice(validator.iter_errors(arguments), MAX_COLLECTED_ERRORS))
    except (_Exhausted, RecursionError):
        return []
    finally:
        _budget.reset(token)
    found = sorted(collected, key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [
        {"pointer": json_pointer(error.absolute_path), "keyword": str(error.validator), "expected": _expected(error),
         "received": _received(error.instance, show), "message": show(error.message, 300)}
        for error in found[:MAX_REPORTED_ERRORS]
    ]  # fmt: skip


def validate_arguments(entry: Any, arguments: dict[str, Any], show: Show = _cut) -> None:
    """Raises an ``invalid-argument`` HostCallError (SchemaValidationError in the guest) on failure."""
    errors = schema_errors(entry.input_schema, arguments, show)
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
