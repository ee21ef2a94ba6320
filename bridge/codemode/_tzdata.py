"""Time zones without a filesystem: the IANA database is read into memory at build time.

The sandbox has no /usr/share/zoneinfo, and package data files are not readable at
run time, so `zoneinfo` is pointed at the bytes captured in the snapshot.
"""

from __future__ import annotations

import io
import zoneinfo
import zoneinfo._common
import zoneinfo._tzpath

_ZONES: dict[str, bytes] = {}


def capture() -> None:
    """Reads every zone of the `tzdata` package (present at build time only)."""
    import importlib.resources

    try:
        package = importlib.resources.files("tzdata")  # imports it
    except ImportError:
        return
    root = package / "zoneinfo"
    names = (package / "zones").read_text().split()
    for name in names:
        node = root.joinpath(*name.split("/"))
        try:
            _ZONES[name] = node.read_bytes()
        except OSError:
            continue
    # zoneinfo only reads the stream it gets, so a BytesIO serves where the stub says BufferedReader.
    zoneinfo._common.load_tzdata = _load_tzdata  # type: ignore[assignment]
    zoneinfo._tzpath.available_timezones = available_timezones
    zoneinfo.available_timezones = available_timezones


def _load_tzdata(key: str) -> io.BytesIO:
    try:
        return io.BytesIO(_ZONES[key])
    except KeyError:
        raise zoneinfo.ZoneInfoNotFoundError(f"No time zone found with key {key}") from None


def available_timezones() -> set[str]:
    """Every IANA zone name known in the sandbox."""
    return set(_ZONES)
