import keyword

import pytest

from wasmexec._tools.naming import export_names, function_base_name, module_base_name, module_names


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        ("get.user", "get_user"),
        ("get-user", "get_user"),
        ("getUser", "get_user"),
        ("GetUser", "get_user"),
        ("fetch_HTTPResponse", "fetch_http_response"),
        ("list", "list"),
        ("class", "class_"),
        ("2fa_check", "_2fa_check"),
        ("match", "match"),  # a soft keyword is a valid identifier
        ("a  b/c", "a_b_c"),
        ("__private__", "private"),
        ("", "tool"),
        ("日本", "tool"),
    ],
)
def test_tool_names_become_python_function_names(tool: str, expected: str) -> None:
    assert function_base_name(tool) == expected
    assert function_base_name(tool).isidentifier() and not keyword.iskeyword(function_base_name(tool))


def test_collisions_get_numbered_suffixes_in_case_insensitive_alphabetical_order() -> None:
    names = export_names(["getUser", "get.user", "GetUser", "get-user", "other"])
    assert names == {"get-user": "get_user", "get.user": "get_user__2", "GetUser": "get_user__3",
                     "getUser": "get_user__4", "other": "other"}  # fmt: skip


def test_a_suffix_never_collides_with_a_real_name() -> None:
    names = export_names(["a", "A", "a__2", "b", "b__2", "B"])
    assert len(set(names.values())) == len(names)  # "b__2" → "b_2": runs of "_" collapse
    assert names["A"] == "a" and names["a"] == "a__2"  # ties in lowercase go by code point


@pytest.mark.parametrize(
    ("server", "expected"),
    [("google-drive", "google_drive"), ("GitHub", "github"), ("my.server v2", "my_server_v2"), ("2x", "_2x"),
     ("import", "import_")],
)  # fmt: skip
def test_server_ids_become_module_names(server: str, expected: str) -> None:
    assert module_base_name(server) == expected


def test_module_name_collisions_are_numbered() -> None:
    assert module_names(["google-drive", "google_drive"]) == {"google-drive": "google_drive",
                                                              "google_drive": "google_drive__2"}  # fmt: skip
