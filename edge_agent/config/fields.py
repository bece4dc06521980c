"""The one validator every agent.toml section goes through: a table of keys, each with the
check that turns the TOML value into the typed field (or a ConfigError naming the key).

A section is ``(Key("workers", positive_int), Key("uds", optional_path), ...)``;
:func:`parse_table` refuses unknown keys (listing the known ones), runs each key's check and
returns the keyword arguments of the section's frozen dataclass. Cross-key rules (two keys
that go together) stay with the section, after the table.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.errors import ConfigError

Check = Callable[[str, Any], Any]
"""``check(full_key, raw_value) -> typed value``; raises ConfigError naming ``full_key``."""


@dataclass(frozen=True)
class Key:
    """One key of a section: its TOML name, its check, and the dataclass field it fills
    (default: the same name)."""

    name: str
    check: Check
    field: str | None = None


def parse_table(section: str, data: Any, keys: Sequence[Key]) -> dict[str, Any]:
    """``data`` (the TOML table ``[section]``) checked against ``keys``: the keyword arguments
    of the section's dataclass (only the keys present)."""
    table = expect_table(section, data)
    known = {k.name: k for k in keys}
    out: dict[str, Any] = {}
    for name, value in table.items():
        spec = known.get(name)
        if spec is None:
            raise ConfigError(f"config key '{section}.{name}' is unknown; known keys: "
                              f"{sorted(known)}")
        out[spec.field or name] = spec.check(f"{section}.{name}", value)
    return out


def expect_table(key: str, value: Any) -> dict[str, Any]:
    """``value`` when it is a TOML table, else a ConfigError naming ``key``."""
    if not isinstance(value, dict):
        raise ConfigError(f"config key '{key}': expected a table ([{key}]), got {value!r}")
    return value


def typed(key: str, value: Any, expected: type | tuple[type, ...]) -> Any:
    """``value`` when it is an ``expected`` (a bool is never a number)."""
    names = (expected,) if isinstance(expected, type) else expected
    if isinstance(value, bool) and bool not in names:
        raise ConfigError(f"config key '{key}': expected "
                          f"{' or '.join(t.__name__ for t in names)}, got {value!r}")
    if not isinstance(value, expected):
        raise ConfigError(f"config key '{key}': expected "
                          f"{' or '.join(t.__name__ for t in names)}, got {value!r}")
    return value


def of_type(expected: type | tuple[type, ...]) -> Check:
    """A check that only verifies the type (str, bool, list, ...)."""
    return lambda key, value: typed(key, value, expected)


boolean = of_type(bool)
string = of_type(str)


def non_negative_int(key: str, value: Any) -> int:
    """An integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"config key '{key}': expected an integer, got {value!r}")
    if value < 0:
        raise ConfigError(f"config key '{key}': must be >= 0, got {value}")
    return value


def positive_int(key: str, value: Any) -> int:
    """An integer > 0."""
    if non_negative_int(key, value) == 0:
        raise ConfigError(f"config key '{key}': must be > 0")
    return int(value)


def at_least_one(key: str, value: Any) -> int:
    """An integer >= 1 (instances, streams)."""
    if non_negative_int(key, value) == 0:
        raise ConfigError(f"config key '{key}': must be >= 1")
    return int(value)


def seconds(*, allow_zero: bool) -> Check:
    """A number of seconds, > 0 (or >= 0 when ``allow_zero``)."""

    def check(key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"config key '{key}': expected seconds (a number), got {value!r}")
        if value < 0 or (value == 0 and not allow_zero):
            raise ConfigError(f"config key '{key}': must be > 0 seconds, got {value}")
        return float(value)

    return check


def in_range(expected: type | tuple[type, ...], low: float, high: float | None = None) -> Check:
    """A number of ``expected`` type between ``low`` and ``high`` (inclusive)."""

    def check(key: str, value: Any) -> Any:
        typed(key, value, expected)
        if value < low or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"{low}-{high}"
            raise ConfigError(f"config key '{key}': {value} is out of range ({bounds})")
        return value

    return check


def mib(*, allow_zero: bool) -> Check:
    """A number of MiB (int or float) as bytes; > 0 (or >= 0 when ``allow_zero``)."""

    def check(key: str, value: Any) -> int:
        if (isinstance(value, bool) or not isinstance(value, int | float) or value < 0
                or (value == 0 and not allow_zero)):
            bound = ">= 0" if allow_zero else "> 0"
            raise ConfigError(f"config key '{key}': expected a number of MiB {bound}, "
                              f"got {value!r}")
        return int(value * (1 << 20))

    return check


def one_of(choices: Sequence[str], *, upper: bool = False) -> Check:
    """A string among ``choices`` (compared upper-cased when ``upper``)."""

    def check(key: str, value: Any) -> str:
        text = typed(key, value, str)
        text = text.upper() if upper else text
        if text not in choices:
            raise ConfigError(f"config key '{key}': {value!r} is not one of "
                              f"{', '.join(choices)}")
        return str(text)

    return check


def strings(key: str, value: Any) -> tuple[str, ...]:
    """A list of strings, as a tuple."""
    for item in typed(key, value, list):
        if not isinstance(item, str):
            raise ConfigError(f"config key '{key}': {item!r} is not a string")
    return tuple(value)


def address(example: str) -> Check:
    """HOST:PORT, or None for "" / "none" / "off"."""
    return lambda key, value: parse_address(typed(key, value, str), f"config key '{key}'",
                                            example)


def path_under(base_dir: Path | None) -> Check:
    """A path; a relative one is taken relative to ``base_dir`` (the agent.toml's directory)."""

    def check(key: str, value: Any) -> Path:
        p = Path(typed(key, value, str)).expanduser()
        return p if p.is_absolute() or base_dir is None else base_dir / p

    return check


def parse_address(value: str, where: str, example: str = "127.0.0.1:8001") -> str | None:
    """Validate HOST:PORT (port 0 = any free port); "", "none" or "off" mean no listener (None).

    ``where`` names the setting in the ConfigError (a config key or a flag)."""
    if value.strip().lower() in ("", "none", "off"):
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{where}: expected HOST:PORT (e.g. {example}), got {value!r}")
    return value


def ipv4_interfaces(values: Sequence[str], where: str) -> tuple[str, ...]:
    """``values`` as a tuple, each checked to be an IPv4 address (ConfigError naming ``where``)."""
    for ip in values:
        try:
            if ipaddress.ip_address(ip).version != 4:
                raise ValueError
        except ValueError:
            raise ConfigError(f"{where}: {ip!r} is not an IPv4 address; give the address of "
                              "an interface to advertise on (e.g. 192.168.1.20)") from None
    return tuple(values)


def section_of(data: Mapping[str, Any], name: str) -> Any:
    """``data[name]`` or an empty table."""
    return data.get(name, {})
