"""Type information from tool JSON Schemas: expressions, TypedDicts, signatures, docstrings, stub modules."""

from __future__ import annotations

import ast
import inspect
import json
import os
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from wasmexec._tools.stubs import (
    MAX_DEPTH,
    NO_OUTPUT_SCHEMA_RESULT,
    StubWriter,
    example_payload,
    module_stub,
    tool_docstring,
    tool_parameters,
    tool_signature,
    type_expression,
)

CORPUS = Path(__file__).resolve().parents[1] / "data" / "tools-corpus"  # real servers' tools/list output
CORPUS_FILES = sorted(CORPUS.glob("*.json"))


def corpus_tools(path: Path) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = json.loads(path.read_text())["tools"]
    return tools


def export_name(tool: dict[str, Any]) -> str:
    return str(tool["name"]).replace("-", "_")


def corpus_stub(path: Path) -> str:
    tools = corpus_tools(path)
    return module_stub(f"tools.{path.stem}", path.stem, [(export_name(t), t) for t in tools])


def every_corpus_tool() -> list[Any]:
    return [pytest.param(t, id=f"{p.stem}:{t['name']}") for p in CORPUS_FILES for t in corpus_tools(p)]


def load_module(text: str, name: str) -> types.ModuleType:
    """Executes stub text as a module of its own (not left in ``sys.modules``)."""
    module = types.ModuleType(name)
    exec(compile(text, name, "exec"), module.__dict__)
    return module


def hints(module: types.ModuleType, obj: Any) -> dict[str, Any]:
    """Evaluated annotations of a class or function defined in `module`."""
    return typing.get_type_hints(obj, globalns=vars(module), include_extras=True)


def typeddicts_of(module: types.ModuleType) -> dict[str, Any]:
    return {name: value for name, value in vars(module).items() if typing.is_typeddict(value)}


def assert_valid(instance: Any, schema: Any) -> None:
    validator = validator_for(schema, default=Draft202012Validator)
    validator(schema).validate(instance)


def tool(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required or []}
    return {"name": "do_it", "inputSchema": schema, **extra}


# --- the corpus -----------------------------------------------------------------------------


@pytest.fixture(params=CORPUS_FILES, ids=lambda p: p.stem)
def corpus_file(request: pytest.FixtureRequest) -> Path:
    """Each server of the corpus; the tests using it are skipped when the corpus is absent."""
    path: Path = request.param
    return path


def test_every_corpus_server_gives_a_stub_module_that_compiles_and_parses(corpus_file: Path) -> None:
    text = corpus_stub(corpus_file)
    compile(text, corpus_file.name, "exec")
    tree = ast.parse(text)
    functions = [node.name for node in tree.body if isinstance(node, ast.AsyncFunctionDef)]
    assert functions == [export_name(t) for t in corpus_tools(corpus_file)]


def test_every_corpus_stub_module_runs_and_its_typeddicts_resolve(corpus_file: Path) -> None:
    module = load_module(corpus_stub(corpus_file), f"_stub_{corpus_file.stem.replace('-', '_')}")
    for name, cls in typeddicts_of(module).items():
        assert hints(module, cls), name
    for tool_ in corpus_tools(corpus_file):
        function = getattr(module, export_name(tool_))
        assert inspect.iscoroutinefunction(function)
        assert inspect.getdoc(function)
        hints(module, function)


def test_every_typeddict_a_corpus_stub_annotates_with_is_defined(corpus_file: Path) -> None:
    module = load_module(corpus_stub(corpus_file), "_stub_names")
    defined = set(typeddicts_of(module))
    tree = ast.parse(corpus_stub(corpus_file))
    used = {
        node.id
        for fn in tree.body
        if isinstance(fn, ast.AsyncFunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.Name) and node.id[0].isupper() and node.id not in dir(typing)
    }
    assert used <= defined


def test_every_corpus_stub_module_passes_mypy_strict_apart_from_empty_bodies(tmp_path: Path) -> None:
    mypy_api = pytest.importorskip("mypy.api")
    if not CORPUS_FILES:
        pytest.skip(f"no tools corpus at {CORPUS}")
    for path in CORPUS_FILES:
        (tmp_path / f"{path.stem.replace('-', '_')}.py").write_text(corpus_stub(path))
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    args = ["--config-file", str(tmp_path / "mypy.ini"), "--strict", "--disable-error-code=empty-body"]
    stdout, stderr, status = mypy_api.run([*args, "--cache-dir", os.devnull, str(tmp_path)])
    assert status == 0, stdout + stderr


@pytest.mark.parametrize("tool_", every_corpus_tool())
def test_example_payload_is_valid_for_every_corpus_input_and_output_schema(tool_: dict[str, Any]) -> None:
    for key in ("inputSchema", "outputSchema"):
        if key in tool_:
            assert_valid(example_payload(tool_[key]), tool_[key])


def test_identical_item_schemas_of_a_server_share_one_typeddict() -> None:
    path = CORPUS / "server-memory.json"
    if not path.exists():
        pytest.skip(f"no tools corpus at {CORPUS}")
    text = corpus_stub(path)
    assert text.count("class EntitiesItem(TypedDict):") == 1
    assert "EntitiesItem2" not in text
    assert "async def read_graph() -> ReadGraphResult:" in text


# --- type_expression ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, "str"),
        ({"type": "integer"}, "int"),
        ({"type": "number"}, "float"),
        ({"type": "boolean"}, "bool"),
        ({"type": "null"}, "None"),
        ({"type": "array", "items": {"type": "string"}}, "list[str]"),
        ({"type": "array"}, "list[Any]"),
        ({"type": "object"}, "dict[str, Any]"),
        ({"type": "object", "properties": {"a": {"type": "string"}}}, "dict[str, Any]"),
        (True, "Any"),
        ({}, "Any"),
        (False, "Never"),
    ],
)
def test_plain_types_map_to_builtin_annotations(schema: Any, expected: str) -> None:
    assert type_expression(schema) == expected


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"enum": ["a", "b"]}, "Literal['a', 'b']"),
        ({"type": "integer", "enum": [1, 2]}, "Literal[1, 2]"),
        ({"enum": [True, "x", None]}, "Literal[True, 'x'] | None"),
        ({"enum": [1.5, "x"]}, "Literal['x'] | float"),
        ({"const": "resource"}, "Literal['resource']"),
        ({"const": None}, "None"),
        ({"oneOf": [{"const": "a"}, {"const": "b"}]}, "Literal['a', 'b']"),
    ],
)
def test_enum_and_const_become_literals(schema: Any, expected: str) -> None:
    assert type_expression(schema) == expected


@pytest.mark.parametrize("combinator", ["oneOf", "anyOf"])
def test_one_of_and_any_of_become_unions(combinator: str) -> None:
    schema = {combinator: [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]}
    assert type_expression(schema) == "str | list[int]"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": ["string", "null"]},
        {"type": "string", "nullable": True},
        {"anyOf": [{"type": "null"}, {"type": "string"}]},
    ],
    ids=["type-list", "openapi-nullable", "any-of-null"],
)
def test_every_spelling_of_nullable_gives_an_optional_type_with_none_last(schema: Any) -> None:
    assert type_expression(schema) == "str | None"


@pytest.mark.parametrize(
    ("ref", "root"),
    [
        ("#/$defs/Count", {"$defs": {"Count": {"type": "integer"}}}),
        ("#/definitions/Count", {"definitions": {"Count": {"type": "integer"}}}),
        ("#/$defs/a~1b~0c", {"$defs": {"a/b~c": {"type": "integer"}}}),
        ("#/$defs/with%20space", {"$defs": {"with space": {"type": "integer"}}}),
        ("#/items/0", {"items": [{"type": "integer"}]}),
    ],
    ids=["2020-12", "draft-07", "escaped-pointer", "percent-encoded", "array-index"],
)
def test_refs_resolve_against_the_root_in_both_dialects(ref: str, root: Any) -> None:
    assert type_expression({"$ref": ref}, root) == "int"
    assert type_expression({"type": "array", "items": {"$ref": ref}}, root) == "list[int]"


def test_additional_properties_give_a_dict_of_their_type() -> None:
    assert type_expression({"type": "object", "additionalProperties": {"type": "integer"}}) == "dict[str, int]"
    assert type_expression({"type": "object", "additionalProperties": False}) == "dict[str, Never]"


def test_pattern_properties_give_a_dict_of_the_union_of_their_types() -> None:
    schema = {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "^b": {"type": "string"}}}
    assert type_expression(schema) == "dict[str, int | str]"


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (
            {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
            "tuple[str, int]",
        ),
        (
            {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
            "tuple[str, int, *tuple[Any, ...]]",
        ),
        (
            {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False},
            "tuple[str, int]",
        ),
        (
            {"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "boolean"}},
            "tuple[str, *tuple[bool, ...]]",
        ),
    ],
    ids=["prefix-items-closed", "prefix-items-open", "items-array-closed", "items-array-open"],
)
def test_tuples_in_both_dialects(schema: Any, expected: str) -> None:
    assert type_expression(schema) == expected


def test_all_of_with_one_schema_is_that_schema() -> None:
    assert (
        type_expression({"allOf": [{"$ref": "#/$defs/S"}], "description": "x"}, {"$defs": {"S": {"type": "string"}}})
        == "str"
    )


def test_keywords_that_only_narrow_a_declared_type_are_ignored() -> None:
    assert type_expression({"type": "string", "not": {"enum": [""]}}) == "str"
    assert type_expression({"type": "object", "properties": {}, "oneOf": [{"required": ["a"]}]}) == "dict[str, Any]"


@pytest.mark.parametrize(
    "schema",
    [
        {"not": {"type": "string"}},
        {"if": {"type": "string"}, "then": {"minLength": 1}},
        {"$ref": "https://example.com/other.json"},
        {"$ref": "#/$defs/Missing"},
        {"allOf": [{"type": "string"}, {"type": "integer"}]},
        {"type": "tuple"},
    ],
    ids=["not", "if-then-else", "external-ref", "unresolvable-ref", "all-of-scalars", "unknown-type"],
)
def test_what_python_types_cannot_say_is_any_and_the_writer_says_why(schema: Any) -> None:
    assert type_expression(schema) == "Any"
    writer = StubWriter()
    writer.annotation({"type": "object", "properties": {"field": schema}}, None, "Holder")
    field_lines = writer.render().splitlines()
    comment = field_lines[field_lines.index("    field: NotRequired[Any]") - 1]
    assert comment.startswith("    # Any: ")


def test_a_schema_nested_too_deeply_ends_in_any_instead_of_recursing_forever() -> None:
    schema: dict[str, Any] = {}
    inner = schema
    for _ in range(MAX_DEPTH * 10):
        inner["type"] = "array"
        inner["items"] = {}
        inner = inner["items"]
    assert type_expression(schema).count("list[") == MAX_DEPTH


def test_a_ref_cycle_without_objects_is_any() -> None:
    root = {"$defs": {"L": {"type": "array", "items": {"$ref": "#/$defs/L"}}}, "$ref": "#/$defs/L"}
    assert type_expression(root) == "list[Any]"


# --- StubWriter -----------------------------------------------------------------------------


def test_the_writer_makes_a_typeddict_named_after_the_hint_with_optional_keys_not_required() -> None:
    writer = StubWriter()
    schema = {
        "type": "object",
        "description": "A user.",
        "properties": {"login": {"type": "string", "description": "Handle."}, "age": {"type": "integer"}},
        "required": ["login"],
    }
    assert writer.annotation(schema, None, "github user") == "GithubUser"
    assert writer.render() == (
        "# A user.\nclass GithubUser(TypedDict):\n    # Handle.\n    login: str\n    age: NotRequired[int]"
    )


def test_keys_that_are_not_identifiers_use_the_functional_typeddict_syntax() -> None:
    writer = StubWriter()
    schema = {"type": "object", "properties": {"from": {"type": "string"}, "x-y": {"type": "integer"}}}
    writer.annotation(schema, None, "Edge")
    text = writer.render()
    assert 'Edge = TypedDict(\n    "Edge",' in text
    module = load_module(f"from typing import *\n{text}", "_stub_functional")
    assert hints(module, module.Edge) == {
        "from": typing.NotRequired[str],
        "x-y": typing.NotRequired[int],
    }


def test_a_key_that_python_would_name_mangle_uses_the_functional_syntax() -> None:
    writer = StubWriter()
    writer.annotation({"type": "object", "properties": {"__secret": {"type": "string"}}}, None, "M")
    assert '"__secret": NotRequired[str],' in writer.render()


def test_a_recursive_schema_refers_to_its_own_typeddict_by_a_forward_reference() -> None:
    root = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                },
                "required": ["name"],
            }
        },
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/Node"}},
    }
    writer = StubWriter()
    assert writer.annotation(root, None, "Forest") == "Forest"
    text = writer.render()
    assert "children: NotRequired['list[Node]']" in text
    assert "parent: NotRequired['Node | None']" in text
    assert text.index("class Node(") < text.index("class Forest(")
    module = load_module(f"from typing import *\n{text}", "_stub_recursive")
    (children,) = typing.get_args(hints(module, module.Node)["children"])
    assert typing.get_args(children) == (module.Node,)


def test_a_schema_that_refers_to_its_root_is_recursive_too() -> None:
    writer = StubWriter()
    linked = {"type": "object", "properties": {"value": {"type": "integer"}, "next-node": {"$ref": "#"}}}
    assert writer.annotation(linked, None, "linked list") == "LinkedList"
    text = writer.render()
    assert "\"next-node\": NotRequired['LinkedList']," in text
    module = load_module(f"from typing import *\n{text}", "_stub_linked")
    assert hints(module, module.LinkedList)["next-node"] == typing.NotRequired[module.LinkedList]


def test_all_of_several_objects_merges_them_into_one_typeddict() -> None:
    writer = StubWriter()
    schema = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "integer"}}},
        ]
    }
    assert writer.annotation(schema, None, "Both") == "Both"
    assert writer.render() == "class Both(TypedDict):\n    a: str\n    b: NotRequired[int]"


def test_class_names_are_unique_and_avoid_typing_names_and_reserved_names() -> None:
    writer = StubWriter(reserved=["Fetch"])
    first = {"type": "object", "properties": {"a": {"type": "string"}}}
    second = {"type": "object", "properties": {"b": {"type": "string"}}}
    assert writer.annotation(first, None, "item") == "Item"
    assert writer.annotation(second, None, "item") == "Item2"
    assert writer.annotation(first, None, "item") == "Item", "the same schema keeps its class"
    assert writer.annotation({**first}, None, "Any") == "Any2"
    assert writer.annotation({**first}, None, "fetch") == "Fetch2"
    assert writer.annotation({**first}, None, "3d point") == "T3dPoint"


def test_a_referenced_definition_is_named_after_its_definition() -> None:
    writer = StubWriter()
    root = {"$defs": {"TimeResult": {"type": "object", "properties": {"t": {"type": "string"}}}}}
    assert (
        writer.annotation({"type": "array", "items": {"$ref": "#/$defs/TimeResult"}}, root, "x") == "list[TimeResult]"
    )


def test_union_members_are_named_after_their_discriminator() -> None:
    writer = StubWriter()
    schema = {
        "anyOf": [
            {"type": "object", "properties": {"type": {"const": "text"}, "text": {"type": "string"}}},
            {"type": "object", "properties": {"type": {"const": "image"}, "data": {"type": "string"}}},
        ]
    }
    assert writer.annotation(schema, None, "block") == "TextBlock | ImageBlock"


def test_an_empty_writer_renders_nothing() -> None:
    assert StubWriter().render() == ""


# --- tools ----------------------------------------------------------------------------------


def test_parameters_list_required_first_then_optional_each_in_schema_order() -> None:
    params = tool_parameters(
        tool(
            {
                "z": {"type": "string"},
                "a": {"type": "integer", "default": 3, "description": "Count."},
                "m": {"type": "string", "enum": ["x", "y"]},
                "b": {"type": "boolean"},
            },
            required=["m", "z"],
        )
    )
    assert [p["name"] for p in params] == ["z", "m", "a", "b"]
    assert params[0] == {"name": "z", "python_name": "z", "annotation": "str", "required": True, "description": ""}
    assert params[1]["enum"] == ["x", "y"]
    assert params[2] == {
        "name": "a",
        "python_name": "a",
        "annotation": "int",
        "required": False,
        "default": 3,
        "description": "Count.",
    }


def test_a_json_null_default_is_a_default() -> None:
    (param,) = tool_parameters(tool({"base": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}}))
    assert param["default"] is None
    assert param["annotation"] == "str | None"


@pytest.mark.parametrize("name", ["from", "class", "my-name", "2nd", "ﬁle", ""])
def test_property_names_that_are_not_usable_identifiers_have_no_python_name(name: str) -> None:
    (param,) = tool_parameters(tool({name: {"type": "string"}}))
    assert param["python_name"] is None


def test_enum_and_description_come_through_a_ref() -> None:
    schema = {
        "type": "object",
        "$defs": {"Color": {"enum": ["red", "blue"], "type": "string", "description": "A color."}},
        "properties": {"color": {"$ref": "#/$defs/Color"}},
    }
    (param,) = tool_parameters({"name": "paint", "inputSchema": schema})
    assert param["annotation"] == "Literal['red', 'blue']"
    assert param["enum"] == ["red", "blue"]
    assert param["description"] == "A color."


def test_the_signature_has_required_parameters_then_keyword_only_optional_ones_with_defaults() -> None:
    issue = tool(
        {
            "owner": {"type": "string"},
            "repo": {"type": "string"},
            "body": {"type": "string"},
            "labels": {"type": "array", "items": {"type": "string"}, "default": []},
        },
        required=["owner", "repo"],
        outputSchema={"type": "object", "properties": {"id": {"type": "integer"}}},
    )
    assert tool_signature("create_issue", issue) == (
        "async def create_issue(owner: str, repo: str, *, body: str | None = None, labels: list[str] = [])"
        " -> CreateIssueResult"
    )


def test_the_signature_without_an_output_schema_returns_any() -> None:
    assert tool_signature("ping", {"name": "ping", "inputSchema": {"type": "object"}}) == "async def ping() -> Any"


def test_parameters_that_are_not_identifiers_leave_the_signature_for_a_catch_all() -> None:
    relate = tool({"from": {"type": "string"}, "to": {"type": "string"}, "extra": {"type": "string"}}, ["from", "to"])
    assert (
        tool_signature("relate", relate)
        == "async def relate(to: str, *, extra: str | None = None, **extra_: Any) -> Any"
    )
    assert '"from" (str, required, not a Python name, pass it in **{"from": ...})' in tool_docstring("relate", relate)


def test_an_export_name_that_is_not_an_identifier_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Python identifier"):
        tool_signature("get-sum", tool({}))
    with pytest.raises(ValueError, match="repeat"):
        module_stub("tools.x", "x", [("a", tool({})), ("a", tool({}))])


def test_the_docstring_has_summary_description_args_returns_and_an_example() -> None:
    fetch = tool(
        {
            "url": {"type": "string", "format": "uri", "description": "URL to fetch"},
            "mode": {"type": "string", "enum": ["raw", "markdown"], "default": "markdown"},
            "max_length": {"type": "integer", "default": 5000, "description": "Most\ncharacters."},
        },
        ["url"],
        description="Fetches a URL.\n\nReturns markdown by default.",
    )
    assert tool_docstring("fetch", fetch) == (
        "Fetches a URL.\n"
        "\n"
        "Returns markdown by default.\n"
        "\n"
        "Args:\n"
        "    url (str, required): URL to fetch\n"
        "    mode (Literal['raw', 'markdown'], optional, default 'markdown', one of ['raw', 'markdown'])\n"
        "    max_length (int, optional, default 5000): Most characters.\n"
        "\n"
        "Returns:\n"
        f"    {NO_OUTPUT_SCHEMA_RESULT}\n"
        "\n"
        "Example:\n"
        "    await fetch(url='https://example.com')"
    )


def test_the_docstring_of_a_tool_without_description_names_the_tool_and_shows_the_output_keys() -> None:
    sums = tool(
        {"a": {"type": "number"}, "b": {"type": "number", "examples": [2.5]}},
        ["a", "b"],
        outputSchema={
            "type": "object",
            "description": "The sum.",
            "properties": {"sum": {"type": "number"}, "note": {"type": "string"}},
            "required": ["sum"],
        },
    )
    doc = tool_docstring("add", sums)
    assert doc.startswith("Calls tool do_it.\n\nArgs:\n")
    assert "Returns:\n    AddResult: The sum.\n\n    # The sum.\n    class AddResult(TypedDict):\n" in doc
    assert "        sum: float\n        note: NotRequired[str]\n" in doc
    assert doc.endswith("Example:\n    await add(a=0.0, b=2.5)")


# --- module_stub ----------------------------------------------------------------------------


def test_a_stub_module_imports_only_the_typing_names_it_uses() -> None:
    text = module_stub("tools.t", "t", [("echo", tool({"m": {"type": "string"}}, ["m"]))])
    assert "from typing import Any\n" in text
    assert '__all__ = ["echo"]' in text


def test_server_text_cannot_inject_code_into_a_stub_module() -> None:
    evil = 'x"""\nimport os\n"""\\'
    output = {"type": "object", "properties": {evil: {"enum": [evil], "description": "\rimport os"}}}
    hostile = tool(
        {"p": {"type": "string", "description": "a\rimport os\x00 b", "default": evil}},
        description=evil,
        outputSchema=output,
    )
    text = module_stub(evil, evil, [("hostile", hostile)])
    tree = ast.parse(text)
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]
    assert [getattr(node, "module", None) for node in imports] == ["__future__", "typing"]
    calls = [node.func for node in ast.walk(tree) if isinstance(node, ast.Call)]
    assert [getattr(func, "id", None) for func in calls] == ["TypedDict"]
    module = load_module(text, "_stub_hostile")
    assert str(inspect.getdoc(module.hostile)).startswith('x"""\n\nimport os\n"""\\\n')
    assert module.hostile.__kwdefaults__ == {"p": evil}
    assert hints(module, module.HostileResult) == {evil: typing.NotRequired[typing.Literal[evil]]}


def test_stub_functions_note_why_a_parameter_is_any() -> None:
    text = module_stub("tools.t", "t", [("check", tool({"v": {"not": {"type": "string"}}}, ["v"]))])
    assert "# v: Any: 'not' cannot be expressed as a Python type\nasync def check(v: Any) -> Any:" in text


# --- example_payload ------------------------------------------------------------------------


def test_an_example_payload_fills_required_properties_only_and_follows_refs() -> None:
    schema = {
        "$defs": {"Mode": {"enum": ["fast", "slow"]}},
        "type": "object",
        "properties": {
            "mode": {"$ref": "#/$defs/Mode"},
            "paths": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "when": {"type": "string", "format": "date-time"},
            "count": {"type": "integer", "minimum": 5},
            "ratio": {"type": "number", "exclusiveMaximum": -1},
            "name": {"type": "string", "default": "n"},
            "free": {"type": "string"},
        },
        "required": ["mode", "paths", "when", "count", "ratio", "name"],
    }
    payload = example_payload(schema)
    assert payload == {
        "mode": "fast",
        "paths": ["string", "string"],
        "when": "2024-01-01T00:00:00Z",
        "count": 5,
        "ratio": -2.0,
        "name": "n",
    }
    assert_valid(payload, schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "minLength": 10, "maxLength": 12},
        {"type": "string", "maxLength": 3},
        {"type": ["null", "integer"], "minimum": 1, "exclusiveMinimum": 1},
        {"type": "integer", "maximum": -3.5},
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "integer",
            "minimum": 2,
            "exclusiveMinimum": True,
        },
        {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]}]},
        {"allOf": [{"type": "object", "required": ["a"]}, {"properties": {"a": {"type": "boolean"}}}]},
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 3},
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "items": [{"type": "integer"}],
            "additionalItems": False,
        },
        {"type": "object", "required": ["k"], "additionalProperties": {"type": "integer"}},
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"x": {"type": "boolean"}},
            "$ref": "#/definitions/x",
        },
    ],
)
def test_an_example_payload_is_valid_for_its_schema(schema: Any) -> None:
    assert_valid(example_payload(schema), schema)


def test_an_example_payload_of_a_schema_that_requires_itself_stays_finite() -> None:
    schema = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    payload = example_payload(schema)
    depth = 0
    while isinstance(payload, dict):
        payload, depth = payload["next"], depth + 1
    assert depth <= MAX_DEPTH


def test_an_example_payload_prefers_the_schemas_examples_then_default_then_enum_to_a_placeholder() -> None:
    schema = {
        "type": "object",
        "properties": {
            "zone": {"type": "string", "examples": ["Europe/Berlin", "UTC"], "default": "UTC"},
            "unit": {"type": "string", "default": "celsius", "enum": ["kelvin", "celsius"]},
            "level": {"type": "string", "enum": ["info", "debug"]},
            "tags": {"type": "array", "items": {"type": "string", "examples": ["urgent"]}, "minItems": 1},
        },
        "required": ["zone", "unit", "level", "tags"],
    }
    assert example_payload(schema) == {"zone": "Europe/Berlin", "unit": "celsius", "level": "info", "tags": ["urgent"]}


def test_an_example_payload_skips_a_declared_example_of_the_wrong_type() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "examples": ["five"]}}, "required": ["n"]}
    payload = example_payload(schema)
    assert payload == {"n": 0}
    assert_valid(payload, schema)
