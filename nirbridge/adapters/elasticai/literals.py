"""Equality of IR values, and the Python literals in which ``elasticai.*`` metadata
keeps them in a .nir file, read by a parser whose cost follows the value it builds.
"""

from __future__ import annotations

import ast
import math
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import nir
import numpy as np
import torch

from ...errors import LossyConversionWarning, ParameterError
from ...limits import MAX_METADATA_NESTING
from .checks import _IO, _META, _kind, _shown, _str_dict

# ----------------------------------------------------------------------------- equality, literals


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types (arrays: same dtype and shape); NaN equals NaN."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a.cpu(), b.cpu()))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if type(a) is not type(b):
        return False
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _literal(value: Any, what: str) -> str | None:
    """``value`` as the Python literal a .nir file keeps it in, checked to read back as
    it is (with the bounded reader :func:`from_nir` uses); None, with a
    :class:`~nirbridge.LossyConversionWarning`, where it is no literal or longer than
    :data:`MAX_LITERAL_CHARS`."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - an int too long to print, a hostile __repr__
        text = None
    if text is not None and len(text) > MAX_LITERAL_CHARS:
        problem = (
            f"is {len(text)} characters long as a Python literal, more than the {MAX_LITERAL_CHARS} "
            "(nirbridge.adapters.elasticai.MAX_LITERAL_CHARS) a .nir file keeps in one entry"
        )
    else:
        try:
            ok = text is not None and _same(parse_literal(text), value)
        except (ValueError, MemoryError, RecursionError):
            ok = False
        if ok:
            return text
        shown = text[:80] if text is not None else f"a {type(value).__name__} that cannot be printed"
        problem = f"holds values that a .nir file cannot keep as Python literals ({shown})"
    warnings.warn(
        f"{what} {problem}; it is left out, so the IR read back from NIR differs there",
        LossyConversionWarning,
        stacklevel=4,
    )
    return None


# ----------------------------------------------------------------------------- metadata literals


def _metadata_of(node: nir.NIRNode, what: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A NIR node's metadata, split into what this adapter stored (``elasticai.*``) and the rest."""
    metadata = node.metadata if node.metadata is not None else {}
    if not isinstance(metadata, Mapping):
        raise ParameterError(
            f"{what}: its metadata is {_shown(metadata)} ({_kind(metadata)}); NIR metadata is a "
            "dict keyed by strings"
        )
    metadata = dict(metadata)
    extra = {k: metadata.pop(k) for k in list(metadata) if isinstance(k, str) and k.startswith(_META)}
    return metadata, extra


MAX_LITERAL_CHARS = 2**20
"""Most characters one ``elasticai.*`` metadata entry may hold (1 Mi). :func:`to_nir`
leaves longer ones out (with a :class:`~nirbridge.LossyConversionWarning`) and
:func:`from_nir` refuses them before reading them, so that reading one costs at most
some 60 MiB and two seconds, even for the costliest text (``"[{0}, {0}, ..."``). Real
entries (an implementation's hyperparameters, a graph's edges) hold a few hundred
characters."""

_MAX_LITERAL_DEPTH = MAX_METADATA_NESTING + 4
"""Brackets nested in one literal: a value's :data:`MAX_METADATA_NESTING` levels inside
the record that holds it (an edge's data sits three levels down in ``elasticai.edges``)."""

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>(?:[rRbBuU]{1,2})?(?:'[^'\\\n]*(?:\\.[^'\\\n]*)*'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"))
      | (?P<num>(?P<sign>[-+]?)
                (?P<digits>(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d[\d_]*)?)
                (?P<imag>[jJ]?))
      | (?P<name>True|False|None|set\(\))
      | (?P<punct>[][(){},:])
    )""",
    re.VERBOSE | re.DOTALL,
)
_NAMES = {"True": True, "False": False, "None": None}


class _LiteralError(Exception):
    pass


_CLOSING = {"[": "]", "(": ")", "{": "}"}


class _LiteralParser:
    """Python literals as ``repr`` writes them (str, bytes, int, float, complex, bool,
    None, and lists, tuples, dicts and sets of them), read token by token without
    building a syntax tree: what it costs is about what the value itself takes, where
    ``ast.literal_eval`` spends some 450 bytes for each character."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.match: re.Match[str] | None = None
        self.kind: str | None = None  # "str", "num", "name", "punct"; None at the end
        self.char = ""  # the punctuation character, "" for other tokens
        self.advance()

    def advance(self) -> None:
        match = self.match = _TOKEN.match(self.text, self.pos)
        if match is None:
            if self.text[self.pos :].strip():
                raise _LiteralError(f"unexpected text at character {self.pos}")
            self.kind, self.char = None, ""
            return
        self.pos = match.end()
        self.kind = match.lastgroup
        self.char = match.group("punct") if self.kind == "punct" else ""

    def expect(self, char: str) -> None:
        if self.char != char:
            raise _LiteralError(f"expected {char!r} at character {self.pos}")
        self.advance()

    def parse(self) -> Any:
        value = self.value(0)
        if self.kind is not None:
            raise _LiteralError(f"more than one value (at character {self.pos})")
        return value

    def value(self, depth: int) -> Any:
        match, kind = self.match, self.kind
        if match is None:
            raise _LiteralError("the text ends where a value should be")
        if kind != "punct":
            self.advance()
            if kind == "num":
                return self.number(match)
            if kind == "str":
                return _string(match.group("str"))
            name = match.group("name")
            return set() if name == "set()" else _NAMES[name]
        char = self.char
        closing = _CLOSING.get(char)
        if closing is None:
            raise _LiteralError(f"unexpected {char!r} at character {self.pos - 1}")
        if depth >= _MAX_LITERAL_DEPTH:
            raise _LiteralError(f"brackets nest more than {_MAX_LITERAL_DEPTH} deep")
        self.advance()
        if self.char == closing:
            self.advance()
            return [] if char == "[" else () if char == "(" else {}
        first = self.value(depth + 1)
        if char == "{" and self.char == ":":
            return self.dict_items(first, depth)
        if char == "(" and self.char == ")":  # (x) is x, not a tuple
            self.advance()
            return first
        items = [first]
        while self.char == ",":
            self.advance()
            if self.char == closing:
                break
            items.append(self.value(depth + 1))
        self.expect(closing)
        if char == "[":
            return items
        if char == "(":
            return tuple(items)
        try:
            return set(items)
        except TypeError as error:
            raise _LiteralError(f"a set holds an unhashable value ({error})") from None

    def dict_items(self, key: Any, depth: int) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        while True:
            self.expect(":")
            value = self.value(depth + 1)
            try:
                result[key] = value
            except TypeError as error:
                raise _LiteralError(f"a dict key is unhashable ({error})") from None
            if self.char != ",":
                break
            self.advance()
            if self.char == "}":
                break
            key = self.value(depth + 1)
        self.expect("}")
        return result

    def number(self, match: re.Match[str]) -> Any:
        value = _number(match)
        if match.group("imag"):
            return value
        following = self.match
        if (
            self.kind == "num"
            and following is not None
            and following.group("imag")
            and following.group("sign")
        ):
            self.advance()  # a complex number as repr writes it: (1-2j)
            magnitude = _number(following, signed=False)
            return value - magnitude if following.group("sign") == "-" else value + magnitude
        return value


def _number(match: re.Match[str], signed: bool = True) -> Any:
    sign, digits, imag = match.group("sign", "digits", "imag")
    try:
        if imag:
            value: Any = complex(0, float(digits))
        elif "." in digits or "e" in digits or "E" in digits:
            value = float(digits)
        else:
            value = int(digits)
    except ValueError as error:  # an int of more digits than Python converts
        raise _LiteralError(str(error)) from None
    return -value if signed and sign == "-" else value


def _string(token: str) -> str | bytes:
    if token[0] in "'\"" and "\\" not in token:
        return token[1:-1]
    try:  # escapes or a prefix: one string constant, at a cost that grows with its length
        value = ast.literal_eval(token)
    except (ValueError, SyntaxError, MemoryError) as error:
        raise _LiteralError(f"a string that is not a Python literal ({type(error).__name__})") from None
    if not isinstance(value, (str, bytes)):
        raise _LiteralError("a string that is not a Python literal")
    return value


def parse_literal(text: str) -> Any:
    """The value of ``text``, a Python literal as ``repr`` writes it (see
    :class:`_LiteralParser`); :class:`ValueError` where it is not one, or nests its
    brackets more than :data:`_MAX_LITERAL_DEPTH` deep."""
    try:
        return _LiteralParser(text).parse()
    except _LiteralError as error:
        raise ValueError(str(error)) from None


def _from_literal(text: Any, what: str) -> Any:
    if isinstance(text, np.ndarray) and text.dtype.kind in "US" and text.size == 1:
        text = text.reshape(-1)[0]
    if isinstance(text, bytes):
        if len(text) > 4 * MAX_LITERAL_CHARS:
            text = text[: 4 * MAX_LITERAL_CHARS + 4]  # over the limit either way; decode no more
        text = text.decode(errors="replace")
    if not isinstance(text, str):
        raise ParameterError(
            f"{what} is {_shown(text)} ({_kind(text)}), not the text of a Python literal; remove the "
            "entry or write the file again with nirbridge.adapters.elasticai.write"
        )
    if len(text) > MAX_LITERAL_CHARS:
        raise ParameterError(
            f"{what} holds {len(text)} characters, more than the {MAX_LITERAL_CHARS} "
            "(nirbridge.adapters.elasticai.MAX_LITERAL_CHARS) this adapter reads in one entry, and more "
            "than it writes; remove the entry or write the file again with "
            "nirbridge.adapters.elasticai.write"
        )
    try:
        return parse_literal(text)
    except (ValueError, MemoryError, RecursionError) as error:
        raise ParameterError(
            f"{what} is {_shown(text)}, not a Python literal ({error}); remove the entry or write the "
            "file again with nirbridge.adapters.elasticai.write"
        ) from None


def _valid_node(value: Any) -> bool:
    if not (_str_dict(value) and isinstance(value.get("type"), str)):
        return False
    if any(k.startswith("nir_") and (k != "nir_metadata" or value["type"] not in _IO) for k in value):
        return False  # to_nir records no side channel of a layer's node
    target = value.get("implementation")
    return isinstance(target, str) or (target is None and value["type"] in _IO)


def _valid_implementation(value: Any) -> bool:
    return (
        _str_dict(value)
        and isinstance(value.get("type", ""), str)
        and isinstance(value.get("name", ""), str)
        and all(isinstance(value.get(k, {}), dict) for k in ("nodes", "edges"))
        and not any(k.startswith("nir_") for k in value)  # to_nir records no side channel
    )


_STORED: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "elasticai.node": (
        "a dict of the IR node's fields with a 'type' and an 'implementation' string (and no "
        "'nir_*' field but an input or output node's 'nir_metadata')",
        _valid_node,
    ),
    "elasticai.implementation": (
        "a dict of the implementation's fields (its 'type' and 'name' strings, no 'nir_*' field)",
        _valid_implementation,
    ),
    "elasticai.parameters": (
        "a tuple of state_dict field names",
        lambda v: isinstance(v, (tuple, list)) and all(isinstance(k, str) for k in v),
    ),
    "elasticai.edges": (
        "the IR's edges as a dict {src: {dst: {...}}} of node names",
        lambda v: (
            _str_dict(v) and all(_str_dict(d) and all(_str_dict(a) for a in d.values()) for d in v.values())
        ),
    ),
}


def _stored(extra: Mapping[str, Any], key: str, owner: str) -> Any:
    """What :func:`to_nir` stored under ``key`` in ``owner``'s metadata, checked to have
    the type it is written with."""
    what = f"{owner}: metadata {key!r}"
    value = _from_literal(extra[key], what)
    expected, valid = _STORED[key]
    if not valid(value):
        raise ParameterError(
            f"{what} holds {_shown(value)} ({_kind(value)}) where {expected} is expected; "
            "remove the entry or write the file again with nirbridge.adapters.elasticai.write"
        )
    return value


def _stored_keys(extra: Mapping[str, Any], allowed: tuple[str, ...], owner: str, place: str) -> None:
    """Refuse ``elasticai.*`` metadata keys that :func:`to_nir` does not write on ``place``:
    a misspelt or misplaced key would otherwise be dropped unseen."""
    wrong = [k for k in extra if k not in allowed]
    if wrong:
        raise ParameterError(
            f"{owner}: metadata {_shown(wrong)} is not read here: on {place} this adapter writes only "
            f"{', '.join(repr(k) for k in allowed)}. Remove the entry (or correct its name) or write the "
            "file again with nirbridge.adapters.elasticai.write"
        )
