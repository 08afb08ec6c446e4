"""Configuration: the defaults shipped in the package (assetcdn/shared/default.toml, read with importlib.resources so a
wheel install has them too), then an optional --config file, then ASSETCDN_<SECTION>_<KEY>."""

from __future__ import annotations

import copy
import functools
import os
import tomllib
from collections.abc import Mapping
from importlib import resources
from typing import Any

DEFAULT_CONFIG = "default.toml"  # package data beside this module


def default_config_text() -> str:
    """The embedded defaults as shipped (what `assetcdn defaults` prints for an operator to copy)."""
    return resources.files(__package__).joinpath(DEFAULT_CONFIG).read_text(encoding="utf-8")


@functools.cache
def _parsed_defaults() -> dict[str, dict[str, Any]]:
    # Parsed once per process (each load takes a deep copy): every application a process builds loads
    # settings, and the shipped file does not change while it runs.
    parsed: dict[str, dict[str, Any]] = tomllib.loads(default_config_text())
    return parsed


class SettingsError(ValueError):
    """A config file or `ASSETCDN_*` variable a process cannot start with, named in the message: the commands say it
    on one line (exit status 2), not in a traceback."""


class Settings:
    """Read-only view over the merged configuration: ``settings.get("edge", "cache_size_mb")``."""

    def __init__(self, data: Mapping[str, Mapping[str, Any]]) -> None:
        self._data = {section: dict(values) for section, values in data.items()}

    def get(self, section: str, key: str) -> Any:
        return self._data[section][key]

    def section(self, section: str) -> dict[str, Any]:
        return dict(self._data[section])

    def with_overrides(self, section: str, **values: Any) -> Settings:
        data = {s: dict(v) for s, v in self._data.items()}
        data.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
        return Settings(data)



def delays_setting(raw: Any, key: str, *, retries_required: bool) -> tuple[float, ...]:
    """A list of delays in seconds (`key`, such as ``webhooks.retry_delays_s``): a TOML list or number, or
    the comma-separated text an environment variable carries. None may be negative; `retries_required`:
    at least one, each above 0 (a retry schedule that cannot be empty)."""
    items = raw.split(",") if isinstance(raw, str) else [raw] if isinstance(raw, int | float) else list(raw)
    delays = tuple(float(item) for item in items if str(item).strip())
    if retries_required and (not delays or any(delay <= 0 for delay in delays)):
        raise ValueError(f"{key} must list at least one delay, each above 0 seconds")
    if any(delay < 0 for delay in delays):
        raise ValueError(f"{key} must not be negative")
    return delays


TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


def _coerce(raw: str, like: Any) -> Any:
    if isinstance(like, list):  # the same TOML array a config file would hold
        try:
            return tomllib.loads(f"value = {raw}")["value"]
        except tomllib.TOMLDecodeError as exc:
            if raw.strip() and not raw.lstrip().startswith("["):
                return raw  # the comma-separated form documented for lists of delays (their readers split it)
            raise ValueError(f"not a TOML array: {raw!r} ({exc})") from None
    if isinstance(like, bool):
        word = raw.strip().lower()
        if word not in TRUE_WORDS and word not in FALSE_WORDS:  # `y`, `enabled`: not taken for false unsaid
            raise ValueError(f"not true or false: {raw!r}")
        return word in TRUE_WORDS
    if isinstance(like, int):
        try:
            return int(raw)
        except ValueError:
            # A number with a fraction, as a config file may give it (`max_object_mb = 0.5`): the readers of
            # such settings take floats (a size in MB read as float(...) * 1024 * 1024).
            number = float(raw)
            return int(number) if number.is_integer() else number
    if isinstance(like, float):
        return float(raw)
    return raw


def _file_value(section: str, key: str, default: Any, value: Any, config_file: Any) -> Any:
    """A config file's value as the setting's readers take it: a switch true or false (a quoted "false", read as
    true, would let loopback origins through), a number a number, also when quoted (`"9788"`, read as the number,
    as an environment variable is); SettingsError naming it otherwise (read as it was, it stopped a process with a
    traceback: `can only concatenate str`)."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        wrong = "must be true or false"
    elif isinstance(default, int | float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return _coerce(value, default)
            except ValueError:
                pass
        wrong = f"must be a number like {default!r}"
    else:
        return value
    raise SettingsError(f"[{section}] {key} {wrong}, not {value!r} (the config file {config_file})")


def load_settings(config_file: str | os.PathLike[str] | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    environ = os.environ if environ is None else environ
    data = copy.deepcopy(_parsed_defaults())
    config_file = config_file or environ.get("ASSETCDN_CONFIG") or None
    if config_file:
        try:
            with open(config_file, "rb") as fh:
                loaded = tomllib.load(fh)
        except OSError as exc:
            raise SettingsError(f"the config file {config_file} cannot be read ({exc.strerror or exc})") from None
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"the config file {config_file} is not TOML: {exc}") from None
        for section, values in loaded.items():
            if not isinstance(values, dict):  # `edge_port = 9788` above every [section]
                raise SettingsError(f"the config file {config_file} sets {section} outside any [section]: "
                                    "each setting goes under its own (`assetcdn defaults` prints them so)")
            defaults = data.get(section, {})
            data.setdefault(section, {}).update(
                {key: _file_value(section, key, defaults.get(key), value, config_file) for key, value in values.items()})
    for section, values in data.items():
        for key, value in values.items():
            env_name = f"ASSETCDN_{section.upper()}_{key.upper()}"
            if env_name in environ:
                try:
                    values[key] = _coerce(environ[env_name], value)
                except ValueError as exc:  # named, not only "invalid literal for int()" in a traceback
                    raise SettingsError(f"{env_name} ([{section}] {key}) must be true or false (1, yes, on; 0, no, "
                                        f"off), not {environ[env_name]!r}" if isinstance(value, bool) else
                                        f"{env_name} ([{section}] {key}) must be a number like {value!r}, not "
                                        f"{environ[env_name]!r}" if isinstance(value, int | float) else
                                        f"{env_name} ([{section}] {key}): {exc}") from None
    return Settings(data)
