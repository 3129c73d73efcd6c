"""Untrusted YAML and JSON documents read into plain JSON values, within fixed bounds.

Static pod manifests (from a directory, or from a URL that may be anyone's
server) and the kubelet's ``--config`` file arrive as bytes nobody has checked.
Upstream converts such YAML to JSON before decoding it (``sigs.k8s.io/yaml``),
so only what JSON can express gets through, and the go-yaml reader underneath
refuses documents that expand through aliases out of proportion to their size.
This module is pykubelet's one reader for these documents and gives the same
promises, so that everything downstream may assume JSON-shaped data:

- the result holds only ``dict`` (``str`` keys), ``list``, ``str``, ``int``
  (within 64 bits), finite ``float``, ``bool`` and ``None``; YAML-only
  constructs (``!!binary``, ``!!set``, ``!!timestamp``, application tags,
  ``null`` or collection keys, ``.inf``/``.nan``) are refused with their line;
  number and boolean keys become their text, as upstream's conversion does;
- bytes are decoded as strict UTF-8 (a UTF-8 or UTF-16 byte order mark is
  honoured, as YAML requires) and may be at most ``MAX_DOCUMENT_BYTES`` long;
- nesting is at most ``MAX_DEPTH`` levels, counting what aliases insert: the
  rest of the kubelet (the API model codec, ``json``, validation) walks these
  values recursively and must stay far from Python's recursion limit;
- a read produces at most ``MAX_NODES`` values, counting what aliases insert,
  so that what follows (type checks, the API models, validation, hashing) has
  bounded work whatever the input; this bound is pykubelet's own;
- an alias to a collection that is still open (``&a [*a]``) is refused, and so
  is a document whose nodes come mostly from alias expansion, by go-yaml's
  rule ("document contains excessive aliasing"): expansion is counted, not
  performed, since aliased values are shared, never copied;
- the reader walks the parser's events with an explicit stack: no input can
  exhaust the Python stack here.

Plain scalars resolve as go-yaml v2 resolves them, which is YAML 1.1 with Go's
number syntax: ``yes`` is true, ``0x1F`` and ``0o37`` are 31, ``0755`` is
octal, ``1e5`` and ``1.5e5`` are numbers (PyYAML's own resolver wants a dot and
a signed exponent), ``08`` is the number 8, and timestamps and base-60 numbers
stay strings. An integer beyond 64 bits becomes a float if one can hold it and
otherwise stays a string. A number then reads as it would from the JSON that
upstream's conversion writes: a float with an integral value below 1e21 is
written without a fraction by Go's ``encoding/json``, so it is an ``int`` here
(``2e9`` is 2000000000, ``80.0`` fits an integer field); a float map key is
spelled as that conversion spells it (``1e+06``). Values reached through
aliases are shared objects: callers treat results as read-only.

``describe`` and ``render`` show any value (circular, binary, huge) in an
error message in bounded space.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Iterator
from typing import Any, Final

import yaml

from pykubelet.util.gotext import go_format_float

MAX_DOCUMENT_BYTES: Final = 10 * 1024 * 1024  # upstream's limit on a manifest URL's body
MAX_DEPTH: Final = 100  # a pod or a KubeletConfiguration needs about 15
# Nodes (scalars, keys and collections, counting alias expansions) in one read: enough for
# a list of maxPods (110) large pods, and a bound on what any input costs the decoders that
# follow (about a second and a half of CPU for the worst shapes).
MAX_NODES: Final = 100_000

# go-yaml's alias rule: once more than 100 of more than 1000 decoded nodes come from
# alias expansion, the share of expanded nodes may be at most 99% up to 400,000 nodes,
# falling linearly to 10% at 4,000,000.
_ALIAS_MIN_ALIASED: Final = 100
_ALIAS_MIN_NODES: Final = 1000
_ALIAS_RANGE_LOW: Final = 400_000
_ALIAS_RANGE_HIGH: Final = 4_000_000

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64_MAX: Final = 2**64 - 1

_TAG_PREFIX: Final = "tag:yaml.org,2002:"
_STR_TAG: Final = _TAG_PREFIX + "str"
_INT_TAG: Final = _TAG_PREFIX + "int"
_FLOAT_TAG: Final = _TAG_PREFIX + "float"
_BOOL_TAG: Final = _TAG_PREFIX + "bool"
_NULL_TAG: Final = _TAG_PREFIX + "null"
_SEQ_TAGS: Final = (None, "!", _TAG_PREFIX + "seq")
_MAP_TAGS: Final = (None, "!", _TAG_PREFIX + "map")

_NULLS: Final = frozenset({"", "~", "null", "Null", "NULL"})
_BOOLS: Final = {
    **dict.fromkeys(("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
_RESOLVABLE_FIRST: Final = frozenset("0123456789+-.~<nNtTfFyYoO")
_INFINITIES: Final = frozenset(f"{sign}.{word}" for sign in ("", "+", "-")
                               for word in ("inf", "Inf", "INF"))
_NANS: Final = frozenset({".nan", ".NaN", ".NAN"})
# strconv.ParseInt's syntax with base 0, on the text with its underscores removed.
_GO_INT: Final = re.compile(
    r"([-+]?)(0[xX][0-9a-fA-F]+|0[bB][01]+|0[oO][0-7]+|0[0-7]*|[1-9][0-9]*)")
_GO_INT_PREFIXES: Final = {"0x": 16, "0b": 2, "0o": 8}
# go-yaml's float syntax, on the text with its underscores removed.
_GO_FLOAT: Final = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
# A plain scalar that starts with a dot: strconv.ParseFloat on the text as written, which
# takes an underscore between two digits (Go's literal syntax) and nowhere else.
_DOT_FLOAT: Final = re.compile(r"\.[0-9](?:_?[0-9])*(?:[eE][-+]?[0-9](?:_?[0-9])*)?")
# The most digits a 64-bit integer can have in each base (after leading zeros).
_MAX_DIGITS: Final = {2: 64, 8: 22, 10: 20, 16: 16}
# From here on Go's encoding/json writes a float64 in exponent form, so a JSON
# decoder reads it as a float even when its value is integral.
_JSON_EXPONENT_FROM: Final = 1e21

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DocumentError(ValueError):
    """The bytes are not one acceptable JSON-compatible YAML document; ``errors`` says why."""

    def __init__(self, errors: list[str], *, duplicate_keys: bool = False) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors
        self.duplicate_keys = duplicate_keys  # the only problem is keys repeated (strict mode)


class _Merge:
    """The YAML merge key ``<<`` in key position."""


_MERGE: Final = _Merge()
_NO_KEY: Final = object()


def allowed_alias_ratio(nodes: int) -> float:
    """The share of ``nodes`` that alias expansion may account for (go-yaml's scale)."""
    if nodes <= _ALIAS_RANGE_LOW:
        return 0.99
    if nodes >= _ALIAS_RANGE_HIGH:
        return 0.10
    return 0.99 - 0.89 * (nodes - _ALIAS_RANGE_LOW) / (_ALIAS_RANGE_HIGH - _ALIAS_RANGE_LOW)


# --- bytes to text ----------------------------------------------------------------------------


def decode_text(data: bytes | str) -> str:
    """The document's text: strict UTF-8 (or UTF-16 behind its byte order mark), size-bounded."""
    if isinstance(data, str):
        text = data
        if len(text) > MAX_DOCUMENT_BYTES:
            raise DocumentError([f"document larger than {MAX_DOCUMENT_BYTES} bytes"])
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise DocumentError([f"character {err.start} is not valid Unicode "
                                     f"({err.reason})"]) from None
    else:
        if len(data) > MAX_DOCUMENT_BYTES:
            raise DocumentError([f"document larger than {MAX_DOCUMENT_BYTES} bytes"])
        encoding = "utf-8"
        if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            encoding = "utf-16"
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as err:
            raise DocumentError([f"not valid {encoding.upper()}: byte {err.start} "
                                 f"({err.reason})"]) from None
    return text.removeprefix("\ufeff")


# --- scalars ----------------------------------------------------------------------------------


def _go_int(plain: str) -> int | None:
    """``plain`` read as strconv.ParseInt(plain, 0, 64) reads it, or failing that as
    ParseUint (no sign, up to 2^64-1); ``None`` when neither accepts it."""
    match = _GO_INT.fullmatch(plain)
    if match is None:
        return None
    sign, body = match.groups()
    base = _GO_INT_PREFIXES.get(body[:2].lower(), 10)
    if base != 10:
        body = body[2:]
    elif len(body) > 1 and body[0] == "0":
        base = 8  # a leading zero
    digits = body.lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS[base]:
        return None
    magnitude = int(digits, base)
    if sign == "-":
        return -magnitude if -magnitude >= _INT64_MIN else None
    if magnitude <= _INT64_MAX or (not sign and magnitude <= _UINT64_MAX):
        return magnitude
    return None


def _finite_float(text: str) -> float | None:
    """A finite float, or ``None`` when it overflows (go-yaml keeps such text a string)."""
    value = float(text)
    return value if math.isfinite(value) else None


def _number(text: str) -> int | float | str:
    """A scalar that may be a number, as go-yaml v2 resolves it; ``text`` if it is none."""
    if text[0] == ".":
        number = _finite_float(text.replace("_", "")) if _DOT_FLOAT.fullmatch(text) else None
        return text if number is None else number
    plain = text.replace("_", "")
    integer = _go_int(plain)
    if integer is not None:
        return integer
    if _GO_FLOAT.fullmatch(plain):
        number = _finite_float(plain)
        return text if number is None else number
    return text


def _as_json_number(value: float) -> int | float:
    """A float as a JSON decoder reads it back from Go's ``encoding/json``: integral
    values below 1e21 are written without a fraction, so they read as integers."""
    if value.is_integer() and abs(value) < _JSON_EXPONENT_FROM:
        return int(value)
    return value


def _plain_scalar(text: str, event: Any) -> Any:
    if text[0] not in _RESOLVABLE_FIRST:
        return text  # the common case: no null, boolean, number or merge key starts so
    if text in _NULLS:
        return None
    if text in _BOOLS:
        return _BOOLS[text]
    if text == "<<":
        return _MERGE
    if text in _INFINITIES or text in _NANS:
        raise DocumentError([f"line {_line(event)}: {text} has no JSON representation"])
    first = text[0]
    if not (first.isdigit() or first in "+-."):
        return text
    return _number(text)


def _tagged_scalar(tag: str, text: str, line: int) -> Any:
    if tag in (_STR_TAG, "!"):
        return text
    if tag == _NULL_TAG and text in _NULLS:
        return None
    if tag == _BOOL_TAG and text in _BOOLS:
        return _BOOLS[text]
    number = _number(text) if text else text
    if tag == _INT_TAG:
        if isinstance(number, int):
            return number
        if _GO_INT.fullmatch(text.replace("_", "")):
            raise DocumentError([f"line {line}: integer {render(text)} does not fit in "
                                 f"64 bits"])
    if tag == _FLOAT_TAG:
        if text in _INFINITIES or text in _NANS:
            raise DocumentError([f"line {line}: {text} has no JSON representation"])
        if isinstance(number, int | float):
            return float(number)
        if _GO_FLOAT.fullmatch(text.replace("_", "")):
            raise DocumentError([f"line {line}: number {render(text)} is out of range"])
    if tag in (_NULL_TAG, _BOOL_TAG, _INT_TAG, _FLOAT_TAG):
        raise DocumentError([f"line {line}: cannot decode {render(text)} as "
                             f"!!{tag.removeprefix(_TAG_PREFIX)}"])
    return _refuse_tag(tag, line)


def _refuse_tag(tag: str, line: int) -> Any:
    shown = "!!" + tag.removeprefix(_TAG_PREFIX) if tag.startswith(_TAG_PREFIX) else tag
    raise DocumentError([f"line {line}: YAML tag {render(shown)} is not supported: "
                         f"only JSON-compatible YAML is accepted"])


def _map_key(value: Any, event: Any) -> str | _Merge:
    if isinstance(value, str | _Merge):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_format_float(value, "g")
    what = "null" if value is None else "a collection"
    raise DocumentError([f"line {_line(event)}: a map key must be a string, number or "
                         f"boolean, not {what}"])


# --- the event walk ---------------------------------------------------------------------------


class _Frame:
    """One open sequence or mapping."""

    __slots__ = ("anchor", "container", "depth", "is_map", "key", "key_event", "merges",
                 "start")

    def __init__(self, container: list[Any] | dict[str, Any], anchor: str | None,
                 start: int) -> None:
        self.container = container
        self.is_map = isinstance(container, dict)
        self.anchor = anchor
        self.start = start  # the node count when it opened: its size is the difference
        self.depth = 1  # collection levels, this one included
        self.key: Any = _NO_KEY
        self.key_event: Any = None
        self.merges: list[dict[str, Any]] = []


def _line(event: Any) -> int:
    mark = event.start_mark
    return mark.line + 1 if mark is not None else 0


class _Reader:
    """Builds JSON values from parser events; one instance per call."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.duplicates: list[str] = []
        self.documents: list[Any] = []
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int, int]] = {}  # value, size, depth
        self.open_anchors: set[str] = set()
        self.root: Any = None
        self.nodes = 0  # decoded nodes, alias expansions included
        self.aliased = 0  # of which from alias expansions

    def read(self, text: str) -> None:
        loader = _Loader(text)
        try:
            check, get = loader.check_event, loader.get_event
            scalar_event = yaml.ScalarEvent
            while check():
                event = get()
                if type(event) is scalar_event:
                    self.scalar(event)
                else:
                    self.structure(event)
        finally:
            loader.dispose()

    def structure(self, event: Any) -> None:
        if isinstance(event, yaml.AliasEvent):
            self.alias(event)
        elif isinstance(event, yaml.SequenceStartEvent):
            if event.tag not in _SEQ_TAGS:
                _refuse_tag(event.tag, _line(event))
            self.open(_Frame([], event.anchor, self.nodes), event)
        elif isinstance(event, yaml.MappingStartEvent):
            if event.tag not in _MAP_TAGS:
                _refuse_tag(event.tag, _line(event))
            self.open(_Frame({}, event.anchor, self.nodes), event)
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            self.close(event)
        elif isinstance(event, yaml.DocumentStartEvent):
            self.anchors, self.root = {}, None
        elif isinstance(event, yaml.DocumentEndEvent):
            self.documents.append(self.root)

    def counted(self, nodes: int, event: Any) -> None:
        self.nodes += nodes
        if self.nodes > MAX_NODES:
            raise DocumentError([f"line {_line(event)}: document has more than {MAX_NODES} "
                                 f"nodes (values, keys and collections, aliases expanded)"])

    def scalar(self, event: Any) -> None:
        text: str = event.value
        plain, untagged = event.implicit
        if plain:
            value = _plain_scalar(text, event) if text else None
        elif untagged or event.tag is None:
            value = text  # quoted and block scalars are strings
        else:
            value = _tagged_scalar(event.tag, text, _line(event))
        stack = self.stack
        is_key = bool(stack) and stack[-1].is_map and stack[-1].key is _NO_KEY
        if value is _MERGE and not is_key:
            value = text  # "<<" merges only as a mapping key
        elif isinstance(value, float) and not is_key:
            value = _as_json_number(value)  # a key keeps the float: it is spelled from it
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.counted(0, event)
        if event.anchor is not None:
            self.anchors[event.anchor] = (text if value is _MERGE else value, 1, 0)
        if stack:
            frame = stack[-1]
            if frame.is_map:
                self.map_item(frame, value, event)
            else:
                frame.container.append(value)  # type: ignore[union-attr]
        else:
            self.root = value

    def alias(self, event: Any) -> None:
        anchor = event.anchor or ""
        if anchor in self.open_anchors:
            raise DocumentError([f"line {_line(event)}: alias *{anchor} refers to a collection "
                                 f"that contains it (a recursive alias)"])
        if anchor not in self.anchors:
            raise DocumentError([f"line {_line(event)}: unknown alias *{anchor}"])
        value, size, depth = self.anchors[anchor]
        if len(self.stack) + depth > MAX_DEPTH:
            raise DocumentError([f"line {_line(event)}: nesting deeper than {MAX_DEPTH} "
                                 f"levels"])
        self.counted(size, event)
        self.aliased += size
        # Only expansion raises the aliased share, so this is the one place to check it.
        if (self.aliased > _ALIAS_MIN_ALIASED and self.nodes > _ALIAS_MIN_NODES
                and self.aliased / self.nodes > allowed_alias_ratio(self.nodes)):
            raise DocumentError([f"line {_line(event)}: document contains excessive aliasing"])
        self.add(value, depth, event)

    def open(self, frame: _Frame, event: Any) -> None:
        if len(self.stack) >= MAX_DEPTH:
            raise DocumentError([f"line {_line(event)}: nesting deeper than {MAX_DEPTH} "
                                 f"levels"])
        self.counted(1, event)
        if frame.anchor is not None:
            self.open_anchors.add(frame.anchor)
        self.stack.append(frame)

    def close(self, event: Any) -> None:
        frame = self.stack.pop()
        value: Any = frame.container
        if frame.merges:
            merged: dict[str, Any] = {}
            for source in frame.merges:
                for key, item in source.items():
                    merged.setdefault(key, item)
            merged.update(value)  # keys written in the mapping win over merged ones
            value = merged
        if frame.anchor is not None:
            self.open_anchors.discard(frame.anchor)
            self.anchors[frame.anchor] = (value, self.nodes - frame.start, frame.depth)
        self.add(value, frame.depth, event)

    def add(self, value: Any, depth: int, event: Any) -> None:
        """Place a collection (or an alias's value) of ``depth`` levels in its parent."""
        if not self.stack:
            self.root = value
            return
        frame = self.stack[-1]
        if depth >= frame.depth:
            frame.depth = depth + 1
        if frame.is_map:
            self.map_item(frame, value, event)
        else:
            frame.container.append(value)  # type: ignore[union-attr]

    def map_item(self, frame: _Frame, value: Any, event: Any) -> None:
        if frame.key is _NO_KEY:
            frame.key, frame.key_event = _map_key(value, event), event
            return
        key, frame.key = frame.key, _NO_KEY
        if key is _MERGE:
            frame.merges.extend(_merge_sources(value, frame.key_event))
            return
        container: dict[str, Any] = frame.container  # type: ignore[assignment]
        if self.strict and key in container:
            self.duplicates.append(f"duplicate field {render(key, 200)} "
                                   f"(line {_line(frame.key_event)})")
        container[key] = value


def _merge_sources(value: Any, event: Any) -> list[dict[str, Any]]:
    sources = value if isinstance(value, list) else [value]
    if not all(isinstance(source, dict) for source in sources):
        raise DocumentError([f"line {_line(event)}: a merge key (<<) needs a mapping or a "
                             f"list of mappings"])
    return list(sources)


def load_documents(data: bytes | str, *, strict: bool = False) -> list[Any]:
    """Every document in ``data`` as JSON values (empty documents read as ``None``).

    With ``strict``, a key repeated in one mapping is an error (upstream's strict
    decoding); otherwise the last value wins. Raises ``DocumentError``.
    """
    text = decode_text(data)
    reader = _Reader(strict)
    try:
        reader.read(text)
    except yaml.MarkedYAMLError as err:
        raise DocumentError([_yaml_message(err)]) from None
    except yaml.YAMLError as err:
        raise DocumentError([" ".join(str(err).split())]) from None
    if reader.duplicates:
        raise DocumentError(reader.duplicates, duplicate_keys=True)
    return reader.documents


def load_document(data: bytes | str, *, strict: bool = False) -> Any:
    """The one non-empty document in ``data``; ``None`` if there is none.

    More than one non-empty document is an error (``DocumentError``), as are
    all the limits described in the module documentation.
    """
    documents = [document for document in load_documents(data, strict=strict)
                 if document is not None]
    if len(documents) > 1:
        raise DocumentError([f"expected one object, found {len(documents)} YAML documents"])
    return documents[0] if documents else None


def _yaml_message(err: yaml.MarkedYAMLError) -> str:
    mark = err.problem_mark or err.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    parts = [part for part in (err.context, err.problem) if part]
    return where + " ".join(" ".join(parts).split())


# --- showing values in messages -----------------------------------------------------------------


def json_type(value: Any) -> str:
    """The JSON type of a value as Go's decoder names it in errors (``string``, ``number``...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _scalar_text(value: Any, limit: int) -> str:
    if isinstance(value, str):
        return json.dumps(value[:limit + 1])
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value.bit_length() < 200 else f"<{value.bit_length()}-bit integer>"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    return f"<{type(value).__name__}>"


def _pieces(value: Any, limit: int) -> Iterator[str]:
    """The rendering of ``value`` piece by piece, depth first, without recursion."""
    stack: list[tuple[Iterator[Any], str, bool]] = []
    current: Any = value
    while True:
        if isinstance(current, dict):
            yield "{"
            stack.append((iter(current.items()), "}", True))
        elif isinstance(current, list | tuple):
            yield "["
            stack.append((iter(current), "]", False))
        else:
            yield _scalar_text(current, limit)
        while stack:
            children, closing, is_map = stack[-1]
            child: Any = next(children, _NO_KEY)
            if child is _NO_KEY:
                stack.pop()
                yield closing
                continue
            if is_map:
                key, current = child
                shown_key = key if isinstance(key, str) else _scalar_text(key, limit)
                yield _scalar_text(shown_key, limit) + ":"
            else:
                current = child
            break
        else:
            return


def render(value: Any, limit: int = 40) -> str:
    """``value`` in JSON-like text cut at ``limit`` characters (``...`` marks the cut).

    Safe for any value: circular, binary, huge or deeply nested ones render in bounded
    time and space.
    """
    out: list[str] = []
    size = 0
    previous = ""
    for piece in _pieces(value, limit):
        if previous and previous not in "[{" and not previous.endswith(":") \
                and piece not in "]}":
            out.append(",")
            size += 1
        out.append(piece)
        size += len(piece)
        previous = piece
        if size > limit:
            return "".join(out)[:limit] + "..."
    return "".join(out)


def describe(value: Any, limit: int = 40) -> str:
    """``string "abc"``, ``number 5``, ``object {"a":1}``: type and bounded rendering."""
    return f"{json_type(value)} {render(value, limit)}"


__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_NODES",
    "DocumentError",
    "allowed_alias_ratio",
    "decode_text",
    "describe",
    "json_type",
    "load_document",
    "load_documents",
    "render",
]
