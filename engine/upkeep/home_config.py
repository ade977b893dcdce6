"""One config per home: ``<home>/bide.toml``, and where each effective value came from.

An operator who sets the same flags on every ``bide watch`` puts them in the
home instead::

    durability = "fast"            # or "durable" (the default)
    lease_ttl = 30                 # seconds
    approval_key_file = "hmac.key" # relative to this file
    inbox_max_bytes = 65536

    [watch]
    workers = 8
    overlap_after = 0.025          # seconds a resume runs before one more starts beside it
    max_orphan_age = "24h"         # or a number of seconds
    max_attempts = 5
    rescan = 1.0
    poll = false

Each value comes from the first of: a command-line flag, an environment variable
(``BIDE_LEASE_TTL``, ``BIDE_WATCH_WORKERS``...), the file, the default.
A PostgreSQL home has no directory: its file is named by ``--config FILE`` or
``$BIDE_CONFIG`` (either also overrides ``<home>/bide.toml`` for a directory).
A file that is not TOML, an unknown key, or a value out of range is a
``ConfigError`` naming the file, the key and its line: nothing starts on a
half-read config.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..base.errors import ConfigError
from ..base.render import parse_age

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same reader from PyPI, before it joined the standard library
    import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]

FILE_NAME = "bide.toml"
CONFIG_ENV = "BIDE_CONFIG"
MAX_INBOX_BYTES = 16 * 1024 * 1024  # a decision file is read whole: keep it small


def _durability(v: Any) -> str:
    if v not in ("durable", "fast"):
        raise ValueError(f"must be \"durable\" or \"fast\", not {v!r}")
    return str(v)


def _number(v: Any, *, above: float | None = None, at_least: float | None = None,
            whole: bool = False, at_most: float | None = None) -> Any:
    if isinstance(v, str):
        v = v.strip()
        try:
            v = int(v) if whole else float(v)
        except ValueError:
            raise ValueError(f"must be a {'whole ' if whole else ''}number, not {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, int | float) or (whole and not isinstance(v, int)):
        raise ValueError(f"must be a {'whole ' if whole else ''}number, not {v!r}")
    if not math.isfinite(v) or (above is not None and not v > above) or \
            (at_least is not None and v < at_least) or (at_most is not None and v > at_most):
        bounds = [f"above {above:g}" if above is not None else "",
                  f"at least {at_least:g}" if at_least is not None else "",
                  f"at most {at_most:g}" if at_most is not None else ""]
        raise ValueError(f"must be {' and '.join(b for b in bounds if b)}, not {v!r}")
    return v if whole else float(v)


def _age(v: Any) -> float:
    if isinstance(v, str):
        return parse_age(v)
    return float(_number(v, at_least=0))


def _flag(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(v, str) and v.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false, not {v!r}")


def _path(v: Any) -> Path:
    if not isinstance(v, str | Path) or not str(v):
        raise ValueError(f"must be a file path, not {v!r}")
    return Path(v)


@dataclass(frozen=True)
class Setting:
    """One key of ``bide.toml``: its default, how a value is checked, its flag."""

    key: str  # "lease_ttl", or "watch.workers" for a key of the [watch] table
    default: Any
    check: Callable[[Any], Any]  # the value as used, or ValueError saying what is wrong
    flag: str
    help: str

    @property
    def env(self) -> str:
        return "BIDE_" + self.key.replace(".", "_").upper()


SETTINGS: tuple[Setting, ...] = (
    Setting("durability", "durable", _durability, "--durability",
            "durable fsyncs every commit; fast survives a killed process, not power loss"),
    Setting("lease_ttl", 30.0, lambda v: _number(v, above=0), "--lease-ttl",
            "seconds a worker's lease on a run lasts between renewals"),
    Setting("approval_key_file", None, _path, "--approval-key-file",
            "accept only decision files signed with this HMAC key"),
    Setting("inbox_max_bytes", 64 * 1024,
            lambda v: _number(v, at_least=1, at_most=MAX_INBOX_BYTES, whole=True),
            "--inbox-max-bytes", "decision files larger than this are rejected"),
    Setting("watch.workers", 4, lambda v: _number(v, at_least=1, whole=True), "--workers",
            "runs a watcher resumes at once"),
    Setting("watch.overlap_after", 0.025, lambda v: _number(v, at_least=0), "--overlap-after",
            "seconds a resume runs before another worker starts one beside it (0: all at "
            "once)"),
    Setting("watch.max_orphan_age", 86400.0, _age, "--max-orphan-age",
            "fail orphaned runs older than this instead of resuming them"),
    Setting("watch.max_attempts", 5, lambda v: _number(v, at_least=1, whole=True),
            "--max-attempts", "fail a run whose worker died this many times"),
    Setting("watch.rescan", None, lambda v: _number(v, above=0), "--rescan",
            "seconds between rescans (default: 1; 30 on PostgreSQL)"),
    Setting("watch.poll", False, _flag, "--poll", "poll the inbox instead of events"),
)
BY_KEY = {s.key: s for s in SETTINGS}


@dataclass(frozen=True)
class Value:
    """An effective value and where it came from: ``source`` is default, bide.toml, env
    or flag; ``where`` says exactly (``/h/bide.toml:3``, ``BIDE_LEASE_TTL``, ``--workers``)."""

    value: Any
    source: str
    where: str | None = None


@dataclass(frozen=True)
class HomeConfig:
    """Every setting's effective value (``config["watch.workers"]``) and its source."""

    path: Path | None  # the file read (None: no file)
    values: Mapping[str, Value]
    note: str | None = None  # why there is no file, when that is worth saying

    MAX_INBOX_BYTES: ClassVar[int] = MAX_INBOX_BYTES  # inbox_max_bytes' bound (for flags)

    def __getitem__(self, key: str) -> Any:
        return self.values[key].value

    @staticmethod
    def load(home: str | os.PathLike[str], *,
             config_file: str | os.PathLike[str] | None = None,
             flags: Mapping[str, Any] | None = None,
             environ: Mapping[str, str] | None = None) -> HomeConfig:
        """``load`` (the module's): the effective config of ``home``."""
        return load(home, config_file=config_file, flags=flags, environ=environ)


def find(home: str | os.PathLike[str], config_file: str | os.PathLike[str] | None = None,
         environ: Mapping[str, str] | None = None) -> tuple[Path | None, bool, str | None]:
    """The config file to read, whether it must exist (named explicitly), and a note.

    ``config_file``, else ``$BIDE_CONFIG``, else ``<home>/bide.toml`` for a directory
    home; a ``postgresql://`` home has no directory, so none.
    """
    env = os.environ if environ is None else environ
    if config_file is not None:
        return Path(config_file), True, None
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]), True, None
    if "://" in str(home):
        return None, False, (f"a {str(home).split('://')[0]}:// home has no directory for "
                             f"{FILE_NAME}: name a file with --config FILE or ${CONFIG_ENV}")
    return Path(home) / FILE_NAME, False, None


def load(home: str | os.PathLike[str], *, config_file: str | os.PathLike[str] | None = None,
         flags: Mapping[str, Any] | None = None,
         environ: Mapping[str, str] | None = None) -> HomeConfig:
    """The effective config of ``home``: flags over environment over file over defaults.

    Args:
        flags: values given on the command line, by setting key (None: not given).

    Raises:
        ConfigError: the file cannot be read or parsed, has an unknown key, or a value
            (in it, in the environment or a flag) is out of range.
    """
    env = os.environ if environ is None else environ
    path, required, note = find(home, config_file, env)
    text = _read(path, required)
    found = _parse(path, text) if path is not None and text is not None else {}
    values: dict[str, Value] = {}
    for s in SETTINGS:
        given = (flags or {}).get(s.key)
        if given is not None:
            values[s.key] = Value(_checked(s, given, s.flag), "flag", s.flag)
        elif env.get(s.env):
            values[s.key] = Value(_checked(s, env[s.env], f"${s.env}"), "env", s.env)
        elif s.key in found:
            raw, line = found[s.key]
            assert path is not None
            value = _checked(s, raw, f"{path}:{line}")
            if s.key == "approval_key_file":
                value = path.parent / value  # relative to the file, not to the cwd
            values[s.key] = Value(value, FILE_NAME, f"{path}:{line}")
        else:
            values[s.key] = Value(s.default, "default")
    return HomeConfig(path if text is not None else None, values, note)


def _read(path: Path | None, required: bool) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise ConfigError(path, "no such file") from None
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, f"cannot read it: {exc}") from None


def _parse(path: Path, text: str) -> dict[str, tuple[Any, int]]:
    """The file's settings by key, each with its line; unknown keys refused."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, f"not valid TOML: {exc}") from None
    out: dict[str, tuple[Any, int]] = {}
    for name, value in doc.items():
        if name == "watch" and isinstance(value, dict):
            for sub, v in value.items():
                out[f"watch.{sub}"] = (v, _line(text, sub, table="watch"))
        else:
            out[name] = (value, _line(text, name))
    for key, (_, line) in out.items():
        if key not in BY_KEY:
            known = ", ".join(s.key for s in SETTINGS)
            raise ConfigError(path, f"unknown key {key!r}", key=key, line=line,
                              hint=f"known keys: {known} (a dotted key is in the "
                                   f"[{key.split('.')[0]}] table)" if "." in key else
                              f"known keys: {known}")
    return out


def _line(text: str, key: str, table: str | None = None) -> int:
    """The line where ``key`` is set (in ``[table]``, if given); 0 if not found."""
    start = 0
    lines = text.splitlines()
    if table is not None:
        for i, line in enumerate(lines):
            if re.match(rf"\s*\[\s*{re.escape(table)}\s*\]", line):
                start = i
                break
    dotted = rf"(?:{re.escape(table)}\s*\.\s*)?" if table is not None else ""
    pattern = re.compile(rf"""\s*{dotted}["']?{re.escape(key)}["']?\s*=""")
    for i in range(start, len(lines)):
        if pattern.match(lines[i]):
            return i + 1
    return 0


def _checked(s: Setting, raw: Any, where: str) -> Any:
    try:
        return s.check(raw)
    except ValueError as exc:
        raise ConfigError(where, f"{s.key} {exc}", key=s.key) from None
