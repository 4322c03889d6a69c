"""What the engines' flag builders share. Each engine has a catalog, {flag: the specs of that
flag over ranges of its versions (catalog indices)}, and a table of the fields autotune handles
specially; from those, one logic: a spec for a version, the flags a version has, a config key's
canonical field (aliases resolved, the launcher's own keys refused, two keys for one option
refused: vLLM's builder lets aliases agree on one value with `merge_equal`, since the sweep adds
tp_size beside tensor_parallel_size), the flag a field uses where its spelling changed, emission
order, one engine option per flag, switches and choices.

`FlagTable` holds one engine's data (its catalog, fields, aliases, reserved keys and how it names
its releases) and answers those questions for it; `emit_fields` is the one loop that turns the
fields of a config into argv and environment, asking a `FieldEmitter` (the engine's value checks
and rendering) about each field."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Generic, Literal, Protocol, TypeVar

from autotune.errors import ConfigError, UnknownNameError, UnsupportedFlagError


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


def read_catalog(
    rows: str, spec: Callable[[CatalogFlag, list[str]], F], index: Callable[[str], int]
) -> dict[str, tuple[F, ...]]:
    """{flag: its specs} from a generated catalog's `|`-separated rows,
    `flag|first-last|kind|dest|...`: `index` reads a release cell as a catalog index, `spec`
    makes the engine's spec from the common cells and the engine's own that follow dest."""
    table: dict[str, list[F]] = {}
    for row in rows.splitlines():
        flag, span, kind, dest, *rest = row.split("|")
        first, last = span.split("-")
        kind_, deprecated = kind_cell(kind)
        common = CatalogFlag(flag, index(first), index(last), kind_, deprecated, dest)
        table.setdefault(flag, []).append(spec(common, rest))
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


def switch_tokens(name: str, flag: str, negatable: bool, value: object) -> list[str]:
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
    config: Mapping[str, object],
    reserved: Mapping[str, str],
    canonical_field: Callable[[str], str],
    *,
    merge_equal: bool = False,
) -> dict[str, tuple[str, object]]:
    """{canonical field: (key as written, value)}. With `merge_equal`, two keys for one option
    may both be given when they agree (or one is None).

    Raises:
        ConfigError: a reserved key (model, host, port: launcher arguments) or two keys that
            name the same option (with `merge_equal`: with two different values).
        UnknownNameError: from `canonical_field`.
    """
    out: dict[str, tuple[str, object]] = {}
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


@dataclass(frozen=True)
class FlagTable(Generic[F]):
    """One engine's flag data and the lookups on it.

    engine: the engine's name in messages ("vLLM").
    releases: what the engine calls its releases in messages ("releases", "versions").
    release_name: catalog index -> the release's name ("0.11.1", "0.5.14").
    load: the engine's catalog, {flag: its specs} (cached by the engine).
    fields: the fields table (in emission order); aliases: {alias: field}; reserved: config keys
        that are the launcher's own arguments ({key: the argument}).
    what: the kind of name in unknown-name errors ("vLLM config field").
    negated_names: whether `--no-x` flags count as field names when listing known fields.
    """

    engine: str
    releases: str
    release_name: Callable[[int], str]
    load: Callable[[], Mapping[str, Sequence[F]]]
    fields: Mapping[str, object]
    aliases: Mapping[str, str]
    reserved: Mapping[str, str]
    what: str
    negated_names: bool = True

    def spec(self, flag: str, i: int) -> F | None:
        """How `flag` behaves at catalog index `i`, or None when that release lacks it."""
        return spec_at(self.load().get(flag, ()), i)

    def names(self, i: int) -> set[str]:
        """Every flag the release at catalog index `i` accepts."""
        return flags_at(self.load(), i)

    @cached_property
    def known(self) -> tuple[str, ...]:
        """Every config field name accepted for some catalogued release."""
        names = set(self.fields) | set(self.aliases)
        for flag in self.load():
            if self.negated_names or not flag.startswith("--no-"):
                names.add(flag[2:].replace("-", "_"))
        return tuple(sorted(names - set(self.reserved)))

    def canonical(self, name: str) -> str:
        """The table's name for a config key (aliases resolved).

        Raises:
            UnknownNameError: no catalogued release has the field, with close matches.
        """
        return canonical_name(
            name,
            fields=self.fields,
            aliases=self.aliases,
            reserved=self.reserved,
            catalog=self.load(),
            what=self.what,
            known=lambda: self.known,
        )

    def resolve(
        self, name: str, canonical: str, candidates: Sequence[Candidate], i: int
    ) -> tuple[str, F]:
        """The flag (and its spec) config key `name` (field `canonical`) uses at index `i`:
        the first of `candidates` the catalog has there.

        Raises:
            UnsupportedFlagError: none is, naming the releases that have one.
        """
        found = flag_at(candidates, self.load(), i)
        if found is not None:
            return found
        have = ranges_having(candidates, self.load())
        shown = name if name == canonical else f"{name} (= {canonical})"
        raise self.unsupported(repr(shown), i, have)

    def unsupported(
        self, what: str, i: int, have: Iterable[tuple[int, int]]
    ) -> UnsupportedFlagError:
        """ "config field `what` is not supported by <engine> <release i>; <releases> that have
        it: <have>"."""
        return UnsupportedFlagError(
            f"config field {what} is not supported by {self.engine} {self.release_name(i)}; "
            f"{self.releases} that have it: {self.ranges_text(have)}"
        )

    def ranges_text(self, ranges: Iterable[tuple[int, int]]) -> str:
        """Index ranges as release names, merged: "0.10.0-0.11.0, 0.12.0" ("none" if empty)."""
        name = self.release_name
        parts = [name(a) if a == b else f"{name(a)}-{name(b)}" for a, b in merge_ranges(ranges)]
        return ", ".join(parts) if parts else "none"


class FieldEmitter(Protocol[F]):
    """How one engine turns each field of a config into environment or argv, for one release."""

    def env(self, key: str, canonical: str, value: object) -> tuple[str, str] | None:
        """(variable, value) when the field is set through the environment, else None (and the
        checks the engine does on every field first)."""
        ...

    def flag(self, key: str, canonical: str) -> F:
        """The spec of the flag the field uses in the release."""
        ...

    def tokens(self, key: str, canonical: str, spec: F, value: object) -> list[str]:
        """The argv tokens for the value, flag included."""
        ...


def emit_fields(
    by_canonical: Mapping[str, tuple[str, object]],
    order: Iterable[str],
    emitter: FieldEmitter[F],
) -> tuple[list[str], dict[str, str]]:
    """(argv tokens, environment variables) for the fields of a config, in emission order
    (`order` first); a None value emits nothing; one config key per engine option.

    Raises:
        ConfigError: two keys set one engine option; and what `emitter` raises.
    """
    argv: list[str] = []
    env: dict[str, str] = {}
    dests: dict[str, str] = {}
    for canonical in emission_order(by_canonical, order):
        key, value = by_canonical[canonical]
        if value is None:
            continue
        variable = emitter.env(key, canonical, value)
        if variable is not None:
            env[variable[0]] = variable[1]
            continue
        spec = emitter.flag(key, canonical)
        claim_dest(dests, spec.dest, key)
        argv += emitter.tokens(key, canonical, spec, value)
    return argv, env
