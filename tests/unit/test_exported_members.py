import wasmexec


def test_all_lists_exactly_the_public_names() -> None:
    helpers = {"annotations", "importlib", "TYPE_CHECKING", "Any"}
    public = {name for name in dir(wasmexec) if not name.startswith("_")} - helpers
    assert set(wasmexec.__all__) - {"__version__"} == public
    assert wasmexec.__all__ == sorted(wasmexec.__all__)


def test_every_exported_name_resolves() -> None:
    for name in wasmexec.__all__:
        assert getattr(wasmexec, name) is not None


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="nope"):
        wasmexec.nope  # noqa: B018
