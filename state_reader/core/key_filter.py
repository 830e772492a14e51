"""Key filters: keep only the state rows whose key matches.

``key_filter=`` (``read_state``, ``changes``, ``state-reader show --key-filter``)
takes either

* a callable ``f(keys) -> mask``: ``keys`` is the ``pyarrow.StructArray`` of the
  keys of one partition, the mask anything ``pyarrow.array`` turns into booleans
  of the same length (null = drop), e.g.
  ``lambda k: pyarrow.compute.equal(k.field("user"), "ann")``; or
* a string expression over the key's fields::

      user = 'ann'
      key.user = 'ann' and region_id > 3
      window.start >= '2023-11-14 22:13:20' and not (grp in ('a', 'b') or tag is null)

Syntax (keywords are case-insensitive)::

    expr      := and_expr ('or' and_expr)*
    and_expr  := unary ('and' unary)*
    unary     := 'not' unary | '(' expr ')' | predicate
    predicate := field op literal
               | field ['not'] 'in' '(' literal (',' literal)* ')'
               | field 'is' ['not'] 'null'
    field     := name ('.' name)*        a leading 'key.' is optional;
                                         `back quotes` for names like `count(1)`
    op        := '=' | '==' | '!=' | '<>' | '<' | '<=' | '>' | '>='
    literal   := 'text' | "text" | 42 | -1.5 | 1e3 | true | false

Semantics are SQL's: a comparison with a null field is unknown and unknown rows
are dropped; ``not`` keeps unknown unknown. Literals are converted to the field's
type, so timestamps compare with ``'YYYY-MM-DD HH:MM:SS[.ffffff]'`` strings (UTC
unless the string has an offset) and dates with ``'YYYY-MM-DD'``. Strings and
binary compare byte by byte; floating point follows Arrow (NaN equals nothing).

Filters are applied to each partition's keys as soon as the partition is decoded,
so only matching rows are carried into the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from state_reader.errors import InvalidOptionError

OPTION = "key_filter"

# ---------------------------------------------------------------------------
# Predicates: plain frozen dataclasses of Python values, so they pickle to
# Spark executors and compare equal in tests.

Path = tuple[str, ...]
COMPARISONS = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


@dataclass(frozen=True)
class Comparison:
    """``path op value``; ``op`` is one of ``= != < <= > >=``."""

    path: Path
    op: str
    value: Any


@dataclass(frozen=True)
class InList:
    """``path in (values...)``, or ``not in`` when ``negated``."""

    path: Path
    values: tuple[Any, ...]
    negated: bool = False


@dataclass(frozen=True)
class NullCheck:
    """``path is null``, or ``is not null`` when ``negated``."""

    path: Path
    negated: bool = False


@dataclass(frozen=True)
class And:
    parts: tuple[Predicate, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Predicate, ...]


@dataclass(frozen=True)
class Not:
    part: Predicate


Predicate = Comparison | InList | NullCheck | And | Or | Not
KeyFilterSpec = str | Predicate | Callable[[pa.StructArray], Any]


def _error(message: str) -> InvalidOptionError:
    return InvalidOptionError(f"Invalid value for option '{OPTION}': {message}")


# ---------------------------------------------------------------------------
# Parser

_TOKEN = re.compile(
    r"""
    \s*(?:
      (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
    | (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
    | (?P<quoted>`(?:[^`]|``)+`)
    | (?P<op><=|>=|!=|<>|==|=|<|>)
    | (?P<punct>[(),.])
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "in", "is", "null", "true", "false"}


@dataclass
class _Token:
    kind: str  # string, number, name, op, punct, keyword, end
    text: str
    value: Any
    pos: int


def _unquote(text: str) -> str:
    quote, body = text[0], text[1:-1]
    body = body.replace(quote * 2, quote)
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise _error(f"unexpected {text[pos : pos + 10]!r} at character {pos + 1} of {text!r}")
        kind = m.lastgroup or ""
        raw = m.group(kind)
        start = m.start(kind)
        if kind == "string":
            out.append(_Token("string", raw, _unquote(raw), start))
        elif kind == "number":
            is_int = re.fullmatch(r"-?\d+", raw) is not None
            out.append(_Token("number", raw, int(raw) if is_int else Decimal(raw), start))
        elif kind == "quoted":
            out.append(_Token("name", raw, raw[1:-1].replace("``", "`"), start))
        elif kind == "word":
            lowered = raw.lower()
            if lowered in _KEYWORDS:
                out.append(_Token("keyword", raw, lowered, start))
            else:
                out.append(_Token("name", raw, raw, start))
        else:
            out.append(_Token(kind, raw, raw, start))
        pos = m.end()
    out.append(_Token("end", "", None, len(text)))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    @property
    def tok(self) -> _Token:
        return self.toks[self.i]

    def fail(self, expected: str) -> InvalidOptionError:
        t = self.tok
        found = "the end" if t.kind == "end" else repr(t.text)
        return _error(f"expected {expected} at character {t.pos + 1} of {self.text!r}, found {found}")

    def keyword(self, word: str) -> bool:
        if self.tok.kind == "keyword" and self.tok.value == word:
            self.i += 1
            return True
        return False

    def punct(self, char: str) -> bool:
        if self.tok.kind == "punct" and self.tok.value == char:
            self.i += 1
            return True
        return False

    def parse(self) -> Predicate:
        if self.tok.kind == "end":
            raise _error("the expression is empty")
        expr = self.or_expr()
        if self.tok.kind != "end":
            raise self.fail("'and', 'or' or the end")
        return expr

    def or_expr(self) -> Predicate:
        parts = [self.and_expr()]
        while self.keyword("or"):
            parts.append(self.and_expr())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def and_expr(self) -> Predicate:
        parts = [self.unary()]
        while self.keyword("and"):
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def unary(self) -> Predicate:
        if self.keyword("not"):
            return Not(self.unary())
        if self.punct("("):
            inner = self.or_expr()
            if not self.punct(")"):
                raise self.fail("')'")
            return inner
        return self.predicate()

    def field(self) -> Path:
        if self.tok.kind != "name":
            raise self.fail("a key field name")
        names = [self.tok.value]
        self.i += 1
        while self.punct("."):
            if self.tok.kind not in ("name", "keyword"):
                raise self.fail("a field name after '.'")
            names.append(self.tok.text if self.tok.kind == "keyword" else self.tok.value)
            self.i += 1
        return tuple(names)

    def literal(self) -> Any:
        t = self.tok
        if t.kind in ("string", "number"):
            self.i += 1
            return t.value
        if t.kind == "keyword" and t.value in ("true", "false"):
            self.i += 1
            return t.value == "true"
        if t.kind == "keyword" and t.value == "null":
            raise _error(f"compare with null using 'is null' or 'is not null' (character {t.pos + 1} of {self.text!r})")
        raise self.fail("a literal ('text', a number, true or false)")

    def predicate(self) -> Predicate:
        path = self.field()
        if self.keyword("is"):
            negated = self.keyword("not")
            if not self.keyword("null"):
                raise self.fail("'null'")
            return NullCheck(path, negated)
        negated = self.keyword("not")
        if self.keyword("in"):
            if not self.punct("("):
                raise self.fail("'('")
            values = [self.literal()]
            while self.punct(","):
                values.append(self.literal())
            if not self.punct(")"):
                raise self.fail("',' or ')'")
            return InList(path, tuple(values), negated)
        if negated:
            raise self.fail("'in' after 'not'")
        if self.tok.kind != "op":
            raise self.fail("a comparison (=, !=, <, <=, >, >=), 'in' or 'is'")
        op = {"==": "=", "<>": "!="}.get(self.tok.value, self.tok.value)
        self.i += 1
        return Comparison(path, op, self.literal())


def parse_key_filter(text: str) -> Predicate:
    """Parse a key filter expression (syntax in the module docstring)."""
    return _Parser(text).parse()


# ---------------------------------------------------------------------------
# Evaluation against the key struct


def _leaf_names(typ: pa.DataType, prefix: str = "") -> Iterator[str]:
    for f in typ:
        name = f"{prefix}{f.name}"
        if pa.types.is_struct(f.type):
            yield from _leaf_names(f.type, name + ".")
        else:
            yield name


def resolve_field(path: Path, key_type: pa.StructType) -> tuple[tuple[int, ...], pa.DataType]:
    """Child indices and type of ``path`` in the key struct.

    Names match exactly, else case-insensitively when that is unambiguous. A
    leading ``key`` is dropped unless the key has a field of that name.
    """
    names = list(path)
    lowered = [f.name.lower() for f in key_type]
    if len(names) > 1 and names[0].lower() == "key" and "key" not in lowered:
        names = names[1:]
    elif len(names) > 1 and names[0].lower() in ("value", "partition_id") and names[0].lower() not in lowered:
        raise _error(
            f"{'.'.join(path)} is not a key field; key filters see only the key "
            f"(fields: {', '.join(_leaf_names(key_type))})"
        )
    indices: list[int] = []
    typ: pa.DataType = key_type
    for depth, name in enumerate(names):
        if not pa.types.is_struct(typ):
            raise _error(f"{'.'.join(names[:depth])} is a {typ}, not a struct, so it has no field {name!r}")
        exact = [i for i, f in enumerate(typ) if f.name == name]
        if not exact:
            exact = [i for i, f in enumerate(typ) if f.name.lower() == name.lower()]
        if len(exact) != 1:
            why = "is ambiguous" if exact else "does not exist"
            raise _error(
                f"key field {'.'.join(names[: depth + 1])} {why} (key fields: {', '.join(_leaf_names(key_type))})"
            )
        indices.append(exact[0])
        typ = typ.field(exact[0]).type
    return tuple(indices), typ


def _is_numeric(typ: pa.DataType) -> bool:
    return pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ)


def literal_scalar(value: Any, typ: pa.DataType, where: str) -> pa.Scalar:
    """``value`` as a scalar of the field's type ``typ`` (or one Arrow compares with it)."""
    if pa.types.is_nested(typ):
        raise _error(
            f"{where} is a {typ}; key filters compare fields that hold one value (name a field inside a struct)"
        )
    if isinstance(value, bool) != pa.types.is_boolean(typ):
        raise _error(f"cannot compare {where} ({typ}) with {value!r}")
    if pa.types.is_timestamp(typ) and isinstance(value, str) and typ.tz is not None:
        try:
            return pa.scalar(value).cast(typ)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # no offset in the text: it is UTC, like the session time zone of the tests and docs
        try:
            naive = pa.scalar(value).cast(pa.timestamp(typ.unit))
            return pa.scalar(naive.value, type=typ)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise _error(f"{value!r} is not a timestamp for {where}: {exc}") from None
    if isinstance(value, Decimal) and (pa.types.is_floating(typ) or pa.types.is_integer(typ)):
        value = float(value) if pa.types.is_floating(typ) or value != value.to_integral_value() else int(value)
    try:
        return pa.scalar(value).cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
        if isinstance(value, (int, Decimal)) and pa.types.is_decimal(typ):
            return pa.scalar(Decimal(value))  # more digits than the field: compare as decimals
        if isinstance(value, (int, float, Decimal)) and _is_numeric(typ):
            # e.g. an int field against 2.5: let Arrow compare in a wider type
            return pa.scalar(float(value))
        raise _error(f"cannot compare {where} ({typ}) with {value!r}") from None


def _field_values(keys: pa.StructArray, indices: tuple[int, ...]) -> pa.Array:
    # struct_field takes parent nulls into account (a field of a null struct is null)
    return pc.struct_field(keys, list(indices))


def evaluate(predicate: Predicate, keys: pa.StructArray) -> pa.BooleanArray:
    """Three-valued mask of ``predicate`` over ``keys`` (null = unknown)."""
    key_type = keys.type
    if isinstance(predicate, Comparison):
        if predicate.op not in COMPARISONS:
            raise _error(f"unknown comparison {predicate.op!r}")
        indices, typ = resolve_field(predicate.path, key_type)
        where = ".".join(predicate.path)
        return COMPARISONS[predicate.op](_field_values(keys, indices), literal_scalar(predicate.value, typ, where))
    if isinstance(predicate, InList):
        indices, typ = resolve_field(predicate.path, key_type)
        where = ".".join(predicate.path)
        values = _field_values(keys, indices)
        scalars = [literal_scalar(v, typ, where) for v in predicate.values]
        wanted = pa.array([s.as_py() for s in scalars], type=scalars[0].type)
        if wanted.type != values.type:
            values = values.cast(wanted.type)
        found = pc.is_in(values, value_set=wanted)
        # SQL: null IN (...) is unknown, so NOT IN keeps it unknown too
        found = pc.if_else(pc.is_valid(values), found, pa.scalar(None, pa.bool_()))
        return pc.invert(found) if predicate.negated else found
    if isinstance(predicate, NullCheck):
        indices, _ = resolve_field(predicate.path, key_type)
        values = _field_values(keys, indices)
        return pc.is_valid(values) if predicate.negated else pc.is_null(values)
    if isinstance(predicate, (And, Or)):
        combine = pc.and_kleene if isinstance(predicate, And) else pc.or_kleene
        masks = [evaluate(p, keys) for p in predicate.parts]
        out = masks[0]
        for m in masks[1:]:
            out = combine(out, m)
        return out
    if isinstance(predicate, Not):
        return pc.invert(evaluate(predicate.part, keys))
    raise _error(f"not a key filter: {predicate!r}")


def check(predicate: Predicate, key_type: pa.StructType) -> None:
    """Raise InvalidOptionError now if ``predicate`` names unknown fields or mistyped literals."""
    evaluate(predicate, pa.array([], type=key_type))


class KeyFilter:
    """A key filter bound to one key type: ``mask(keys)`` and ``apply(batch)``.

    ``option``: the argument the filter was given as (``drop_keys`` for a rewrite), named by its errors.
    """

    def __init__(self, spec: KeyFilterSpec, key_type: pa.StructType | None = None, option: str = OPTION) -> None:
        self.spec = spec
        self.option = option
        with self._named():
            if isinstance(spec, str):
                self.predicate: Predicate | None = parse_key_filter(spec)
            elif isinstance(spec, (Comparison, InList, NullCheck, And, Or, Not)):
                self.predicate = spec
            elif callable(spec):
                self.predicate = None
            else:
                raise _error(f"expected a string expression or a callable, got {type(spec).__name__}")
            if key_type is not None and self.predicate is not None:
                check(self.predicate, key_type)

    @contextmanager
    def _named(self) -> Iterator[None]:
        """Errors of this filter under the argument it was given as."""
        try:
            yield
        except InvalidOptionError as exc:
            if self.option == OPTION:
                raise
            raise InvalidOptionError(
                exc.message.replace(f"option '{OPTION}'", f"option '{self.option}'", 1), path=exc.path
            ) from None

    def __repr__(self) -> str:
        return f"KeyFilter({self.spec!r})"

    def mask(self, keys: pa.StructArray | pa.ChunkedArray) -> pa.BooleanArray:
        """Which rows to keep (no nulls)."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        with self._named():
            if self.predicate is not None:
                out = evaluate(self.predicate, keys)
            else:
                out = _as_mask(self.spec(keys), len(keys))  # type: ignore[operator]
        return pc.fill_null(out, False)

    def apply(self, batch: pa.RecordBatch, column: str = "key") -> pa.RecordBatch:
        """The rows of ``batch`` whose ``column`` passes the filter."""
        if batch.num_rows == 0:
            return batch
        return batch.filter(self.mask(batch.column(column)))


def _as_mask(result: Any, length: int) -> pa.BooleanArray:
    if isinstance(result, pa.ChunkedArray):
        result = result.combine_chunks()
    if not isinstance(result, pa.Array):
        try:
            result = pa.array(result, type=pa.bool_())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise _error(f"the key filter callable must return booleans, got {type(result).__name__}: {exc}") from None
    if not pa.types.is_boolean(result.type):
        raise _error(f"the key filter callable returned {result.type} values; booleans are needed")
    if len(result) != length:
        raise _error(f"the key filter callable returned {len(result)} values for {length} keys")
    return result


def as_key_filter(
    spec: KeyFilterSpec | KeyFilter | None, key_type: pa.StructType | None = None, option: str = OPTION
) -> KeyFilter | None:
    """``spec`` as a :class:`KeyFilter` checked against ``key_type``; None stays None.

    ``option``: the argument ``spec`` came as, which its errors name.
    """
    if spec is None or isinstance(spec, KeyFilter):
        return spec
    return KeyFilter(spec, key_type, option)


__all__ = [
    "And",
    "Comparison",
    "InList",
    "KeyFilter",
    "Not",
    "NullCheck",
    "Or",
    "Predicate",
    "as_key_filter",
    "evaluate",
    "parse_key_filter",
    "resolve_field",
]
