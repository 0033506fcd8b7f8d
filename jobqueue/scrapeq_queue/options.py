"""Configuration declared once: each setting is a dataclass field made with `option()`.

The worker's and the operator's settings classes declare every option as one field: its type,
its default (with the reason in a comment above it), the environment variable, the command-line
flag and a help sentence. From that one declaration come the argument parser (`add_arguments`),
the reader (`read_settings`: flag, then environment variable, then default) and the
configuration table of docs/worker.md and docs/operator.md (`markdown_table`, written by
`make generate`). It lives in the queue package because that is the one layer both components
stand on.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, TypeVar

_T = TypeVar("_T")
_Settings = TypeVar("_Settings")

METADATA_KEY: Final = "scrapeq.option"


@dataclasses.dataclass(frozen=True)
class Option:
    """One setting. `name` is its field; `env` its variable, then `fallback_env` in order (an
    empty variable defers to the next one); `flag` takes a value unless `switch` (a flag alone
    means true; `negative_flag` means false); `repeatable` flags add up, comma-joined.
    `renamed_from` holds the flags and variables the option had before 0.1.0: a value given
    under one of them is refused with an error naming the option's name now."""

    name: str
    default: Any
    parse: Callable[[str], Any]
    help: str
    env: str
    fallback_env: tuple[str, ...] = ()
    flag: str | None = None
    negative_flag: str | None = None
    switch: bool = False
    repeatable: bool = False
    # How the documentation and --help show the default, when str(default) would mislead.
    shown_default: str | None = None
    renamed_from: tuple[str, ...] = ()

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(flag for flag in (self.flag, self.negative_flag) if flag)

    @property
    def metavar(self) -> str:
        """NAME for a repeatable `--queue NAME`, QUEUES for `--queues QUEUES`."""
        return "NAME" if self.repeatable else self.name.upper()

    @property
    def environment(self) -> tuple[str, ...]:
        return (self.env, *self.fallback_env)

    def show_default(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        value = self.default
        if value is None or value == "":
            return "—"
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, tuple):
            return ",".join(str(item) for item in value) or "(none)"
        return str(value)


def option(
    default: _T,
    *,
    parse: Callable[[str], Any],
    help: str,
    env: str,
    fallback_env: tuple[str, ...] = (),
    flag: str | None = None,
    negative_flag: str | None = None,
    switch: bool = False,
    repeatable: bool = False,
    shown_default: str | None = None,
    renamed_from: tuple[str, ...] = (),
) -> _T:
    """A dataclass field with `default` that is also a configuration option (see Option)."""
    declared = Option(
        name="",
        default=default,
        parse=parse,
        help=help,
        env=env,
        fallback_env=fallback_env,
        flag=flag,
        negative_flag=negative_flag,
        switch=switch,
        repeatable=repeatable,
        shown_default=shown_default,
        renamed_from=renamed_from,
    )
    field: _T = dataclasses.field(default=default, metadata={METADATA_KEY: declared})
    return field


def options_of(settings_class: type[Any]) -> tuple[Option, ...]:
    """Every option of a settings dataclass, in declaration order; the options of a nested
    settings dataclass (a field whose default_factory is one) follow in its place."""
    return tuple(declared for declared, _ in _walk(settings_class))


def _walk(settings_class: type[Any]) -> Iterator[tuple[Option, tuple[str, ...]]]:
    """(option, path of field names from settings_class to it) for every option."""
    for item in dataclasses.fields(settings_class):
        declared = item.metadata.get(METADATA_KEY)
        if isinstance(declared, Option):
            yield dataclasses.replace(declared, name=item.name), (item.name,)
        elif dataclasses.is_dataclass(item.default_factory):
            for inner, path in _walk(item.default_factory):
                yield inner, (item.name, *path)


def read_settings(
    settings_class: type[_Settings],
    flags: argparse.Namespace | Mapping[str, Any] | None,
    environ: Mapping[str, str],
    *,
    error: Callable[[str], Exception],
) -> _Settings:
    """Build `settings_class` from parsed flags (strings, lists of strings or None), then the
    environment, then the declared defaults. A value its option cannot parse raises
    `error("<flag or variable>: <problem>")`; a value under a name the option had before
    raises `error("<old name> is now <name>")`, so that no setting is silently ignored."""
    given = vars(flags) if isinstance(flags, argparse.Namespace) else dict(flags or {})
    values: dict[tuple[str, ...], Any] = {}
    for declared, path in _walk(settings_class):
        _refuse_renamed(declared, given, environ, error)
        raw, source = _raw_value(declared, given, environ)
        if raw is None:
            continue
        try:
            values[path] = declared.parse(raw)
        except ValueError as problem:
            raise error(f"{source}: {problem}") from problem
    return _build(settings_class, values, ())


def _renamed_dest(old_flag: str) -> str:
    """The parser's destination of a flag an option had before (never a field's name)."""
    return f"renamed{old_flag}"


def _refuse_renamed(
    declared: Option,
    given: Mapping[str, Any],
    environ: Mapping[str, str],
    error: Callable[[str], Exception],
) -> None:
    for old in declared.renamed_from:
        if old.startswith("--"):
            if given.get(_renamed_dest(old)) is not None:
                raise error(f"{old} is now {declared.flag}")
        elif old in environ:
            raise error(f"{old} is now {declared.env}")


def _raw_value(
    declared: Option, given: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[str | None, str]:
    raw = given.get(declared.name)
    if isinstance(raw, list):
        raw = ",".join(str(item) for item in raw)
    if raw is not None:
        return str(raw), declared.flag or declared.negative_flag or declared.name
    names = declared.environment
    for index, name in enumerate(names):
        if name in environ and (environ[name] or index == len(names) - 1):
            return environ[name], name
    return None, ""


def _build(
    settings_class: type[_T], values: Mapping[tuple[str, ...], Any], at: tuple[str, ...]
) -> _T:
    arguments: dict[str, Any] = {}
    for item in dataclasses.fields(settings_class):  # type: ignore[arg-type]
        path = (*at, item.name)
        if path in values:
            arguments[item.name] = values[path]
        elif METADATA_KEY not in item.metadata and dataclasses.is_dataclass(item.default_factory):
            arguments[item.name] = _build(item.default_factory, values, path)
    return settings_class(**arguments)


def add_arguments(parser: argparse._ActionsContainer, settings_class: type[Any]) -> None:
    """One flag per option that has one; an unset flag stays None so the environment and the
    default can fill it."""
    for declared in options_of(settings_class):
        where = "env " + " or ".join(declared.environment)
        for old in declared.renamed_from:
            if old.startswith("--"):
                # Accepted only to be refused by read_settings with the option's name now.
                parser.add_argument(
                    old, dest=_renamed_dest(old), default=None, help=argparse.SUPPRESS
                )
        if declared.switch:
            target: argparse._ActionsContainer = parser
            if declared.flag and declared.negative_flag:
                target = parser.add_mutually_exclusive_group()
            for flag, const in ((declared.flag, "true"), (declared.negative_flag, "false")):
                if not flag:
                    continue
                meaning = (
                    f"the opposite of {declared.flag}"
                    if declared.flag and flag != declared.flag
                    else declared.help
                )
                target.add_argument(
                    flag,
                    dest=declared.name,
                    action="store_const",
                    const=const,
                    default=None,
                    help=f"{meaning} [{where}]",
                )
        elif declared.flag:
            parser.add_argument(
                declared.flag,
                dest=declared.name,
                action="append" if declared.repeatable else "store",
                default=None,
                metavar=declared.metavar,
                help=f"{declared.help} [{where}, default: {declared.show_default()}]",
            )


def markdown_table(settings_class: type[Any]) -> str:
    """The documentation's table of every option: flag, environment variable, default, help."""
    lines = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for declared in options_of(settings_class):
        flags = ", ".join(f"`{flag}`" for flag in declared.flags) or "—"
        environment = ", ".join(f"`{name}`" for name in declared.environment)
        meaning = declared.help.replace("|", "\\|")
        lines.append(f"| {flags} | {environment} | {declared.show_default()} | {meaning} |")
    return "\n".join(lines) + "\n"


# --- parsers shared by both components ----------------------------------------------------------


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"not a boolean: {text!r}")


def parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None


def parse_positive_int(text: str) -> int:
    value = parse_int(text)
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")
    return value


def parse_non_negative_int(text: str) -> int:
    value = parse_int(text)
    if value < 0:
        raise ValueError(f"must be at least 0, got {value}")
    return value


def parse_positive_float(text: str) -> float:
    value = parse_float(text)
    if value <= 0:
        raise ValueError(f"must be above 0, got {value}")
    return value


def parse_names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names, blanks and repeats dropped, in their first order. The
    one place a list of names (queues of a worker or a pool, namespaces) loses its repeats: a
    repeated queue would be claimed from, and counted, twice."""
    return tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))
