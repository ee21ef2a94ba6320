"""Python type information from MCP tool JSON Schemas: annotations, signatures, docstrings, stub modules.

A tool's ``inputSchema`` becomes a function signature (one parameter per property) and its
``outputSchema`` the return type. Both dialects met in practice are read: draft-07
(``definitions``, ``items`` as a list for tuples) from TypeScript servers and 2020-12 (``$defs``,
``prefixItems``) from Python servers.

Choices a reader of the output should know:

* An object with ``properties`` is a TypedDict when a `StubWriter` collects definitions and
  ``dict[str, Any]`` otherwise. Keys beyond ``properties`` are not typed.
* Keywords that only narrow a declared type (``not``, ``if``, ``oneOf`` beside ``type``) are
  ignored; a schema made only of what Python types cannot say is ``Any``, and the writer says why.
* A tuple that allows items after its prefix is ``tuple[A, B, *tuple[T, ...]]``.
* ``patternProperties`` give ``dict[str, P1 | P2]``; keys matching no pattern are not typed.
* Stub modules declare ``async def f(...) -> T: ...``: importable, and clean under mypy --strict
  except for its ``empty-body`` check (which does not apply to a ``.pyi`` copy).
* Work per schema is bounded (`MAX_DEPTH`, `MAX_STEPS`), so a hostile schema cannot stall the host,
  and server text reaches generated code only as comments, docstrings or literals, escaped.

Modules, each on top of the ones before it: `_types` (type expressions as text), `_text`
(names and escaping), `_schema` (reading schemas, bounded walks), `_annotate` (schema to type),
`_writer` (TypedDict definitions), `_examples` (example payloads), `_functions` (a tool's
parameters, signature and docstring), `_module` (whole stub modules).
"""

from __future__ import annotations

from wasmexec._tools.stubs._annotate import type_expression
from wasmexec._tools.stubs._examples import MAX_EXAMPLE_SIZE, example_payload
from wasmexec._tools.stubs._functions import (
    NEEDS_APPROVAL_NOTE,
    NO_OUTPUT_SCHEMA_RESULT,
    tool_docstring,
    tool_parameters,
    tool_returns,
    tool_signature,
)
from wasmexec._tools.stubs._module import module_stub
from wasmexec._tools.stubs._schema import MAX_DEPTH, MAX_STEPS
from wasmexec._tools.stubs._text import COMMENT_WIDTH
from wasmexec._tools.stubs._writer import StubWriter

__all__ = [
    "COMMENT_WIDTH",
    "MAX_DEPTH",
    "MAX_EXAMPLE_SIZE",
    "MAX_STEPS",
    "NEEDS_APPROVAL_NOTE",
    "NO_OUTPUT_SCHEMA_RESULT",
    "StubWriter",
    "example_payload",
    "module_stub",
    "tool_docstring",
    "tool_parameters",
    "tool_returns",
    "tool_signature",
    "type_expression",
]
