"""A tool as a Python function: its parameters, ``async def`` signature and docstring."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from wasmexec._tools.stubs._annotate import schema_type
from wasmexec._tools.stubs._examples import example_payload
from wasmexec._tools.stubs._schema import MISSING, Context, properties_of, ref_view, required_keys, resolve
from wasmexec._tools.stubs._text import indent, is_python_name, one_line, shown_name
from wasmexec._tools.stubs._types import ANY, NONE, PyType, union
from wasmexec._tools.stubs._writer import StubWriter

#: What the docstring promises for a tool without ``outputSchema``.
NO_OUTPUT_SCHEMA_RESULT: Final = "the tool's result (text, or the whole result)"
#: What the docstring says of a tool that needs approval (the policy decides; see `policy.Policy`).
NEEDS_APPROVAL_NOTE: Final = (
    "Needs approval: the user is asked before each call; ApprovalDeniedError if refused or no one can answer."
)


@dataclass(frozen=True)
class StubParam:
    """One input property as a function parameter."""

    name: str
    python_name: str | None
    kind: PyType
    required: bool
    default: Any  # MISSING when the schema has none
    description: str
    enum: list[Any] | None
    schema: Any


def parameters_of(tool: Mapping[str, Any], writer: StubWriter | None) -> list[StubParam]:
    """One parameter per input property: required ones first, schema order within each group."""
    root = tool.get("inputSchema")
    schema = resolve(root, root)
    props = properties_of(schema)
    required = required_keys(schema)
    ctx = Context(root, writer)
    params = [_param(key, sub, key in required, ctx) for key, sub in props.items()]
    return sorted(params, key=lambda p: not p.required)


def _param(key: str, schema: Any, required: bool, ctx: Context) -> StubParam:
    view = ref_view(schema, ctx.root)
    enum = view.get("enum")
    return StubParam(
        name=key,
        python_name=key if is_python_name(key) else None,
        kind=schema_type(schema, ctx, key),
        required=required,
        default=view.get("default", MISSING),
        description=view["description"] if isinstance(view.get("description"), str) else "",
        enum=list(enum) if isinstance(enum, list) else None,
        schema=schema,
    )


def return_type(tool: Mapping[str, Any], export_name: str, writer: StubWriter | None) -> PyType:
    """The type of the tool's ``outputSchema`` (the structured content), else ``Any``."""
    schema = tool.get("outputSchema")
    if schema is None:
        return ANY
    if writer is not None:
        return writer._annotate(schema, schema, f"{export_name}Result")
    return schema_type(schema, Context(schema), "Result")


def tool_returns(export_name: str, tool: Mapping[str, Any], observed: Any = None) -> dict[str, str]:
    """What a call returns, as Python: the annotation and the TypedDicts it names.

    Args:
        export_name: The function name; the result's TypedDict is named after it (``GetSumResult``).
        tool: A tool in MCP wire form; its ``outputSchema`` is used when it has one.
        observed: Without an ``outputSchema``: a schema of the results seen so far
            (`shapes.observed_schema`), typed the same way, else nothing is known.

    Returns:
        ``return_type`` (e.g. ``"GetSumResult"``, ``"str"``, ``"Any"``) and ``typed_dicts`` (the class
        definitions it uses, ``""`` when none).
    """
    check_export_name(export_name)
    schema = tool.get("outputSchema")
    if schema is None:
        schema = observed
    if schema is None:
        return {"return_type": "Any", "typed_dicts": ""}
    writer = StubWriter(reserved=[export_name])
    annotation = writer._annotate(schema, schema, f"{export_name}Result").text
    return {"return_type": annotation, "typed_dicts": writer.render()}


def check_export_name(name: str) -> None:
    """Raises ValueError unless `name` can name a Python function."""
    if not is_python_name(name):
        raise ValueError(f"export name {name!r} is not a Python identifier")


def tool_parameters(tool: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool's parameters, required ones first, each in schema order.

    Args:
        tool: A tool in MCP wire form (``name``, ``inputSchema``, ...).

    Returns:
        Dicts with ``name`` (the property name), ``python_name`` (None when the name is not a usable
        identifier), ``annotation``, ``required``, ``default`` (only when the schema has one),
        ``description`` and ``enum`` (only when the schema has one).
    """
    return [_parameter_entry(p) for p in parameters_of(tool, None)]


def _parameter_entry(param: StubParam) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": param.name,
        "python_name": param.python_name,
        "annotation": param.kind.text,
        "required": param.required,
    }
    if param.default is not MISSING:
        entry["default"] = param.default
    entry["description"] = param.description
    if param.enum is not None:
        entry["enum"] = param.enum
    return entry


def tool_signature(export_name: str, tool: Mapping[str, Any]) -> str:
    """The ``async def`` line (without the colon) a stub shows for a tool.

    Required parameters come first; optional ones are keyword-only and default to their JSON
    default, else None (so a caller should leave out optional arguments left at None). Parameters
    whose names are not usable identifiers are left out, and a ``**extra: Any`` catch-all (renamed
    if a parameter is called ``extra``) stands for them. The return type is that of
    ``outputSchema`` (the structured content; a TypedDict named ``<Export>Result`` for an object
    with properties, see `tool_returns`), else ``Any``.

    Raises:
        ValueError: `export_name` is not a Python identifier.
    """
    check_export_name(export_name)
    returns = PyType((tool_returns(export_name, tool)["return_type"],))
    return signature_line(export_name, parameters_of(tool, None), returns)


def signature_line(export_name: str, params: list[StubParam], returns: PyType) -> str:
    """``async def name(...) -> T`` from parameters already made."""
    named = [p for p in params if p.python_name]
    parts = [f"{p.python_name}: {p.kind.text}" for p in named if p.required]
    optional = [_optional_parameter(p) for p in named if not p.required]
    if optional:
        parts += ["*", *optional]
    if len(named) < len(params):
        parts.append(f"**{_extra_name(params)}: Any")
    return f"async def {export_name}({', '.join(parts)}) -> {returns.text}"


def _optional_parameter(param: StubParam) -> str:
    if param.default is MISSING or param.default is None:
        return f"{param.python_name}: {union([param.kind, NONE]).text} = None"
    return f"{param.python_name}: {param.kind.text} = {param.default!r}"


def _extra_name(params: list[StubParam]) -> str:
    taken = {p.name for p in params}
    name = "extra"
    while name in taken:
        name += "_"
    return name


def tool_docstring(
    export_name: str, tool: Mapping[str, Any], *, observed: Any = None, needs_approval: bool = False
) -> str:
    """The docstring a stub shows for a tool: summary, description, Args, Returns, Example.

    The Returns section shows the TypedDicts of the ``outputSchema``; without one, those of
    `observed` (a schema of the results seen so far) marked as observed, not promised.

    Args:
        export_name: The function name the example call uses.
        tool: A tool in MCP wire form.
        observed: See `tool_returns`.
        needs_approval: Adds a line saying each call is asked of the user first.
    """
    return docstring_text(export_name, tool, parameters_of(tool, None), None, observed, needs_approval)


def docstring_text(
    export_name: str,
    tool: Mapping[str, Any],
    params: list[StubParam],
    writer: StubWriter | None,
    observed: Any = None,
    needs_approval: bool = False,
) -> str:
    """The docstring from parameters already made; `writer` names the TypedDicts of the result
    (which are then defined elsewhere, by the writer); without one they are shown here."""
    sections = [
        _summary(tool),
        NEEDS_APPROVAL_NOTE if needs_approval else "",
        _args_section(params),
        _returns_section(tool, export_name, writer, observed),
        _example_section(export_name, tool, params),
    ]
    return "\n\n".join(s for s in sections if s)


def _summary(tool: Mapping[str, Any]) -> str:
    description = tool.get("description")
    text = description.replace("\r\n", "\n").replace("\r", "\n").strip() if isinstance(description, str) else ""
    first, _, rest = text.partition("\n")
    first = first.strip() or f"Calls tool {one_line(tool.get('name'))}."
    return f"{first}\n\n{rest.strip()}" if rest.strip() else first


def _args_section(params: list[StubParam]) -> str:
    if not params:
        return ""
    return "Args:\n" + "\n".join(f"    {_arg_line(p)}" for p in params)


def _arg_line(param: StubParam) -> str:
    facts = [param.kind.text, "required" if param.required else "optional"]
    if param.default is not MISSING:
        facts.append(f"default {param.default!r}")
    if param.enum is not None:
        facts.append(f"one of {param.enum!r}")
    if param.python_name is None:
        facts.append(f"not a Python name, pass it in **{{{json.dumps(param.name)}: ...}}")
    head = f"{shown_name(param.name)} ({', '.join(facts)})"
    description = one_line(param.description)
    return f"{head}: {description}" if description else head


def _returns_section(tool: Mapping[str, Any], export_name: str, writer: StubWriter | None, observed: Any) -> str:
    schema = tool.get("outputSchema")
    if schema is None:
        if observed is None:
            return f"Returns:\n    {NO_OUTPUT_SCHEMA_RESULT}"
        shown = tool_returns(export_name, tool, observed)
        line = f"{shown['return_type']} (observed in earlier results; the tool has no output schema)"
        return _with_definitions(f"Returns:\n    {line}", shown["typed_dicts"])
    if writer is not None:
        line = return_type(tool, export_name, writer).text + _keys_note(schema, writer)
        definitions = ""
    else:
        shown = tool_returns(export_name, tool)
        line, definitions = shown["return_type"], shown["typed_dicts"]
    description = one_line(ref_view(schema, schema).get("description"))
    head = f"Returns:\n    {line}: {description}" if description else f"Returns:\n    {line}"
    return _with_definitions(head, definitions)


def _with_definitions(head: str, definitions: str) -> str:
    return f"{head}\n\n{indent(definitions, '    ')}" if definitions else head


def _keys_note(schema: Any, writer: StubWriter | None) -> str:
    """`` with keys a (str), b (int, optional)`` for an object output."""
    target = resolve(schema, schema)
    required = required_keys(target)
    ctx = Context(schema, writer)
    keys = [
        f"{shown_name(key)} ({schema_type(sub, ctx, key).text}{'' if key in required else ', optional'})"
        for key, sub in properties_of(target).items()
    ]
    return f" with keys {', '.join(keys)}" if keys else ""


def _example_section(export_name: str, tool: Mapping[str, Any], params: list[StubParam]) -> str:
    root = tool.get("inputSchema")
    required = [p for p in params if p.required]
    args = [f"{p.python_name}={example_payload(p.schema, root)!r}" for p in required if p.python_name]
    extra = {p.name: example_payload(p.schema, root) for p in required if not p.python_name}
    if extra:
        args.append(f"**{extra!r}")
    return f"Example:\n    await {export_name}({', '.join(args)})"
