"""codemode: what agent code sees inside the wasmexec sandbox.

    from codemode import errors
    from codemode.errors import CodemodeError

Tool discovery (``codemode.discovery``) and the ``servers.*`` modules build on the
host interface in ``codemode._host``.
"""

from codemode import errors

__all__ = ["errors"]
