"""What the engines' flag builders share. Each engine has a catalog, {flag: the specs of that
flag over ranges of its versions (catalog indices)}, and a table of the fields autotune handles
specially; from those, one logic: a spec for a version, the flags a version has, a config key's
canonical field (aliases resolved, the launcher's own keys refused, two keys for one option
refused: vLLM's builder lets aliases agree on one value with `merge_equal`, since the sweep adds
tp_size beside tensor_parallel_size), the flag a field uses where its spelling changed, emission
order, one engine option per flag, switches and choices."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from autotune.errors import ConfigError, UnknownNameError


class Spanned(Protocol):
    """A catalog spec: the first and last catalog index (version) it holds for."""

    @property
    def first(self) -> int: ...

    @property
    def last(self) -> int: ...


S = TypeVar("S", bound=Spanned)

# v: one value, b: a bare switch, n: a switch with --no-, l: a list, o: an optional value.
FlagKind = Literal["v", "b", "n", "l", "o"]


@dataclass(frozen=True)
class CatalogFlag:
    """One flag as an engine's argparse parser defines it over a range of catalog indices."""

    flag: str
    first: int
    last: int
    kind: FlagKind
    deprecated: bool
    dest: str


F = TypeVar("F", bound=CatalogFlag)


def read_catalog(rows: str, spec: Callable[[list[str]], F]) -> dict[str, tuple[F, ...]]:
    """{flag: its specs} from a generated catalog's `|`-separated rows (`spec` reads a row's
    cells)."""
    table: dict[str, list[F]] = {}
    for row in rows.splitlines():
        flag_spec = spec(row.split("|"))
        table.setdefault(flag_spec.flag, []).append(flag_spec)
    return {k: tuple(v) for k, v in table.items()}


def kind_cell(cell: str) -> tuple[FlagKind, bool]:
    """A catalog's kind cell -> (kind, deprecated): `n!` is a deprecated `n`."""
    return cell.rstrip("!"), cell.endswith("!")  # type: ignore[return-value]


# (first index, last index, flag): a field's spelling over a range of versions.
Candidate = tuple[int, int, str]


def mechanical_flag(name: str) -> str:
    """`field_name` -> `--field-name`, the rule for fields without a spelling of their own."""
    return "--" + name.replace("_", "-")


def spec_at(specs: Iterable[S], i: int) -> S | None:
    """The spec that holds for catalog index `i`, or None."""
    for spec in specs:
        if spec.first <= i <= spec.last:
            return spec
    return None


def flags_at(catalog: Mapping[str, Sequence[S]], i: int) -> set[str]:
    """Every flag the catalog has for index `i`."""
    return {flag for flag in catalog if spec_at(catalog[flag], i) is not None}


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted index ranges with overlapping and adjacent ones joined."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def canonical_name(
    name: str,
    *,
    fields: Mapping[str, object],
    aliases: Mapping[str, str],
    reserved: Mapping[str, str],
    catalog: Mapping[str, object],
    what: str,
    known: Callable[[], Sequence[str]],
) -> str:
    """The fields table's name for a config key: a table field, an alias resolved, or a field
    whose mechanical flag the catalog has.

    Raises:
        UnknownNameError: none of those (`what` names the kind of name; close matches from
            `known`).
    """
    if name in fields:
        return name
    if name in aliases:
        return aliases[name]
    if name not in reserved and mechanical_flag(name) in catalog:
        return name
    raise UnknownNameError(what, name, known())


def flag_at(
    candidates: Iterable[Candidate], catalog: Mapping[str, Sequence[S]], i: int
) -> tuple[str, S] | None:
    """The first candidate spelling whose range holds `i` and that the catalog has at `i`."""
    for first, last, flag in candidates:
        if first <= i <= last:
            spec = spec_at(catalog.get(flag, ()), i)
            if spec is not None:
                return flag, spec
    return None


def ranges_having(
    candidates: Iterable[Candidate], catalog: Mapping[str, Sequence[S]]
) -> list[tuple[int, int]]:
    """The index ranges where some candidate spelling is in the catalog (for error messages)."""
    have: list[tuple[int, int]] = []
    for first, last, flag in candidates:
        have += [
            (max(first, s.first), min(last, s.last))
            for s in catalog.get(flag, ())
            if max(first, s.first) <= min(last, s.last)
        ]
    return have


def emission_order(by_canonical: Mapping[str, object], fields: Iterable[str]) -> list[str]:
    """The fields table's order, then the other fields alphabetically."""
    table = list(fields)
    order = [n for n in table if n in by_canonical]
    return order + sorted(n for n in by_canonical if n not in table)


def claim_dest(dests: dict[str, str], dest: str, key: str) -> None:
    """Record that config key `key` sets the engine option `dest`.

    Raises:
        ConfigError: another key set it already.
    """
    if dest in dests:
        raise ConfigError(
            f"sets the same engine option ({dest}) as {dests[dest]!r}; keep one", field=key
        )
    dests[dest] = key


def switch_tokens(name: str, flag: str, negatable: bool, value: Any) -> list[str]:
    """A switch: `flag` for true; for false `--no-flag` when it has one, else nothing.

    Raises:
        ConfigError: the value is not a bool.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{flag} is a switch: expects true or false, got {value!r}", field=name)
    if value:
        return [flag]
    return ["--no-" + flag[2:]] if negatable else []


def check_choices(
    name: str, flag: str, tokens: Iterable[str], choices: Sequence[str], release: str
) -> None:
    """Each token must be one of `choices` (when there are any) in `release` ("vLLM 0.20.0").

    Raises:
        ConfigError: a token that is not.
    """
    for token in tokens:
        if choices and token not in choices:
            raise ConfigError(
                f"{token!r} is not valid for {flag} in {release}; valid: {', '.join(choices)}",
                field=name,
            )


def by_canonical_field(
    config: Mapping[str, Any],
    reserved: Mapping[str, str],
    canonical_field: Callable[[str], str],
    *,
    merge_equal: bool = False,
) -> dict[str, tuple[str, Any]]:
    """{canonical field: (key as written, value)}. With `merge_equal`, two keys for one option
    may both be given when they agree (or one is None).

    Raises:
        ConfigError: a reserved key (model, host, port: launcher arguments) or two keys that
            name the same option (with `merge_equal`: with two different values).
        UnknownNameError: from `canonical_field`.
    """
    out: dict[str, tuple[str, Any]] = {}
    for key, value in config.items():
        if key in reserved:
            raise ConfigError(
                f"is set by the launcher's {reserved[key]!r} argument, not by the config",
                field=key,
            )
        canonical = canonical_field(key)
        if canonical in out:
            other, before = out[canonical]
            if not merge_equal:
                raise ConfigError(f"sets the same option as {other!r}; keep one", field=key)
            if before == value or value is None:
                continue
            if before is not None:
                raise ConfigError(
                    f"sets the same option as {other!r} to another value ({value!r} vs "
                    f"{before!r}); keep one",
                    field=key,
                )
        out[canonical] = (key, value)
    return out
