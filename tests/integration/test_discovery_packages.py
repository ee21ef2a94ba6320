"""`discovery.packages()` in the default image: the standard library only, known without any work at run time."""

from __future__ import annotations

from tests.helpers import data_of
from wasmexec import Sandbox


def test_the_default_image_lists_no_packages_beyond_the_standard_library(sandbox: Sandbox) -> None:
    code = "from codemode import discovery\nresult = [discovery.packages(), 'packages' in discovery.__all__]"
    assert data_of(sandbox.run_sync(code)) == [[], True]


def test_the_list_is_a_copy_so_code_cannot_change_what_later_calls_see(sandbox: Sandbox) -> None:
    code = ("from codemode import discovery\nfirst = discovery.packages()\nfirst.append({'name': 'x'})\n"
            "result = discovery.packages()")  # fmt: skip
    assert data_of(sandbox.run_sync(code)) == []
