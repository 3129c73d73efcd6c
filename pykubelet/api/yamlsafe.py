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
- an alias to a collection that is still open (``&a [*a]``) is refused, and so
  is a document whose nodes come mostly from alias expansion, by go-yaml's
  rule ("document contains excessive aliasing"): expansion is counted, not
  performed, since aliased values are shared, never copied;
- the reader walks the parser's events with an explicit stack: no input can
  exhaust the Python stack here.

Plain scalars resolve as YAML 1.1 does in PyYAML (``yes`` is true, ``0x1F`` is
31, ``0755`` is octal) except that timestamps and base-60 numbers stay strings,
as go-yaml leaves them. An integer beyond 64 bits becomes a float if one can
hold it and otherwise stays a string, again as in go-yaml. Values reached
through aliases are shared objects: callers treat results as read-only.

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

MAX_DOCUMENT_BYTES: Final = 10 * 1024 * 1024  # upstream's limit on a manifest URL's body
MAX_DEPTH: Final = 100  # a pod or a KubeletConfiguration needs about 15

# go-yaml's alias rule: once more than 100 of more than 1000 decoded nodes come from
# alias expansion, the share of expanded nodes may be at most 99% up to 400,000 nodes,
# falling linearly to 10% at 4,000,000.
_ALIAS_MIN_ALIASED: Final = 100
_ALIAS_MIN_NODES: Final = 1000
_ALIAS_RANGE_LOW: Final = 400_000
_ALIAS_RANGE_HIGH: Final = 4_000_000

_INT64_MIN: Final = -(2**63)
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
_INFINITIES: Final = frozenset(f"{sign}.{word}" for sign in ("", "+", "-")
                               for word in ("inf", "Inf", "INF"))
_NANS: Final = frozenset({".nan", ".NaN", ".NAN"})
_INT: Final = re.compile(r"[-+]?(?:0b[01_]+|0x[0-9a-fA-F_]+|0[0-7_]+|0|[1-9][0-9_]*)")
_FLOAT: Final = re.compile(r"[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+][0-9]+)?")
_EXPLICIT_FLOAT: Final = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
# The most digits a 64-bit integer can have in each base (after leading zeros).
_MAX_DIGITS: Final = {2: 64, 8: 22, 10: 20, 16: 16}

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


def _parse_int(text: str) -> int | None:
    """A YAML 1.1 integer's value if it fits 64 bits (signed or not), else ``None``."""
    plain = text.replace("_", "")
    sign = -1 if plain.startswith("-") else 1
    digits = plain.lstrip("+-")
    base = 10
    if digits.startswith(("0b", "0x")):
        base = 2 if digits[1] == "b" else 16
        digits = digits[2:]
    elif len(digits) > 1 and digits.startswith("0"):
        base = 8
    digits = digits.lstrip("0") or ("0" if digits else "")
    if not digits or len(digits) > _MAX_DIGITS[base]:
        return None
    value = sign * int(digits, base)
    return value if _INT64_MIN <= value <= _UINT64_MAX else None


def _parse_float(text: str) -> float | None:
    """A finite float, or ``None`` when it overflows (go-yaml keeps such text a string)."""
    value = float(text.replace("_", ""))
    return value if math.isfinite(value) else None


def _plain_scalar(text: str, line: int) -> Any:
    if text in _NULLS:
        return None
    if text in _BOOLS:
        return _BOOLS[text]
    if text == "<<":
        return _MERGE
    if text in _INFINITIES or text in _NANS:
        raise DocumentError([f"line {line}: {text} has no JSON representation"])
    first = text[0]
    if not (first.isdigit() or first in "+-."):
        return text
    if _INT.fullmatch(text):
        value = _parse_int(text)
        if value is not None:
            return value
        if text.replace("_", "").lstrip("+-").isdigit():
            number = _parse_float(text)
            return text if number is None else number
        return text
    if _FLOAT.fullmatch(text):
        number = _parse_float(text)
        return text if number is None else number
    return text


def _tagged_scalar(tag: str, text: str, line: int) -> Any:
    if tag in (_STR_TAG, "!"):
        return text
    if tag == _NULL_TAG and text in _NULLS:
        return None
    if tag == _BOOL_TAG and text in _BOOLS:
        return _BOOLS[text]
    if tag == _INT_TAG and _INT.fullmatch(text):
        value = _parse_int(text)
        if value is not None:
            return value
        raise DocumentError([f"line {line}: integer {render(text)} does not fit in 64 bits"])
    if tag == _FLOAT_TAG:
        if text in _INFINITIES or text in _NANS:
            raise DocumentError([f"line {line}: {text} has no JSON representation"])
        if _EXPLICIT_FLOAT.fullmatch(text.replace("_", "")):
            number = _parse_float(text)
            if number is None:
                raise DocumentError([f"line {line}: number {render(text)} is out of range"])
            return number
    if tag in (_NULL_TAG, _BOOL_TAG, _INT_TAG, _FLOAT_TAG):
        raise DocumentError([f"line {line}: cannot decode {render(text)} as "
                             f"!!{tag.removeprefix(_TAG_PREFIX)}"])
    return _refuse_tag(tag, line)


def _refuse_tag(tag: str, line: int) -> Any:
    shown = "!!" + tag.removeprefix(_TAG_PREFIX) if tag.startswith(_TAG_PREFIX) else tag
    raise DocumentError([f"line {line}: YAML tag {render(shown)} is not supported: "
                         f"only JSON-compatible YAML is accepted"])


def _map_key(value: Any, line: int) -> str | _Merge:
    if isinstance(value, str | _Merge):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    what = "null" if value is None else "a collection"
    raise DocumentError([f"line {line}: a map key must be a string, number or boolean, "
                         f"not {what}"])


# --- the event walk ---------------------------------------------------------------------------


class _Frame:
    """One open sequence or mapping."""

    __slots__ = ("anchor", "container", "depth", "explicit", "key", "key_line", "merges",
                 "size")

    def __init__(self, container: list[Any] | dict[str, Any], anchor: str | None) -> None:
        self.container = container
        self.anchor = anchor
        self.size = 1  # nodes in this collection, counting alias expansions
        self.depth = 1  # collection levels, this one included
        self.key: Any = _NO_KEY
        self.key_line = 0
        self.merges: list[dict[str, Any]] = []
        self.explicit: set[str] = set()


class _Reader:
    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.duplicates: list[str] = []
        self.documents: list[Any] = []
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int, int]] = {}  # value, size, depth
        self.open_anchors: set[str] = set()
        self.root: Any = None
        self.nodes = 0
        self.aliased = 0

    def read(self, text: str) -> None:
        loader = _Loader(text)
        try:
            while loader.check_event():
                self.event(loader.get_event())
        finally:
            loader.dispose()

    def event(self, event: Any) -> None:
        line = event.start_mark.line + 1 if event.start_mark is not None else 0
        if isinstance(event, yaml.ScalarEvent):
            self.scalar(event, line)
        elif isinstance(event, yaml.AliasEvent):
            self.alias(event.anchor or "", line)
        elif isinstance(event, yaml.SequenceStartEvent):
            if event.tag not in _SEQ_TAGS:
                _refuse_tag(event.tag, line)
            self.open(_Frame([], event.anchor), line)
        elif isinstance(event, yaml.MappingStartEvent):
            if event.tag not in _MAP_TAGS:
                _refuse_tag(event.tag, line)
            self.open(_Frame({}, event.anchor), line)
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            self.close(line)
        elif isinstance(event, yaml.DocumentStartEvent):
            self.anchors, self.root = {}, None
        elif isinstance(event, yaml.DocumentEndEvent):
            self.documents.append(self.root)

    def count(self, nodes: int, aliased: bool, line: int) -> None:
        self.nodes += nodes
        if aliased:
            self.aliased += nodes
        if (self.aliased > _ALIAS_MIN_ALIASED and self.nodes > _ALIAS_MIN_NODES
                and self.aliased / self.nodes > allowed_alias_ratio(self.nodes)):
            raise DocumentError([f"line {line}: document contains excessive aliasing"])

    def scalar(self, event: Any, line: int) -> None:
        text: str = event.value
        plain, untagged = event.implicit
        if plain:
            value = _plain_scalar(text, line) if text else None
        elif untagged or event.tag is None:
            value = text  # quoted and block scalars are strings
        else:
            value = _tagged_scalar(event.tag, text, line)
        if value is _MERGE and (not self.stack or self.stack[-1].key is not _NO_KEY
                                or isinstance(self.stack[-1].container, list)):
            value = text  # "<<" merges only as a mapping key
        self.count(1, False, line)
        if event.anchor is not None:
            self.anchors[event.anchor] = (text if value is _MERGE else value, 1, 0)
        self.add(value, 1, 0, line)

    def alias(self, anchor: str, line: int) -> None:
        if anchor in self.open_anchors:
            raise DocumentError([f"line {line}: alias *{anchor} refers to a collection that "
                                 f"contains it (a recursive alias)"])
        if anchor not in self.anchors:
            raise DocumentError([f"line {line}: unknown alias *{anchor}"])
        value, size, depth = self.anchors[anchor]
        if len(self.stack) + depth > MAX_DEPTH:
            raise DocumentError([f"line {line}: nesting deeper than {MAX_DEPTH} levels"])
        self.count(size, True, line)
        self.add(value, size, depth, line)

    def open(self, frame: _Frame, line: int) -> None:
        if len(self.stack) >= MAX_DEPTH:
            raise DocumentError([f"line {line}: nesting deeper than {MAX_DEPTH} levels"])
        self.count(1, False, line)
        if frame.anchor is not None:
            self.open_anchors.add(frame.anchor)
        self.stack.append(frame)

    def close(self, line: int) -> None:
        frame = self.stack.pop()
        value: Any = frame.container
        if frame.merges:
            merged: dict[str, Any] = {}
            for source in frame.merges:
                for key, item in source.items():
                    merged.setdefault(key, item)
            merged.update(value)
            value = merged
        if frame.anchor is not None:
            self.open_anchors.discard(frame.anchor)
            self.anchors[frame.anchor] = (value, frame.size, frame.depth)
        self.add(value, frame.size, frame.depth, line)

    def add(self, value: Any, size: int, depth: int, line: int) -> None:
        if not self.stack:
            self.root = value
            return
        frame = self.stack[-1]
        frame.size += size
        frame.depth = max(frame.depth, depth + 1)
        container = frame.container
        if isinstance(container, list):
            container.append(value)
            return
        if frame.key is _NO_KEY:
            frame.key, frame.key_line = _map_key(value, line), line
            return
        key, frame.key = frame.key, _NO_KEY
        if isinstance(key, _Merge):
            frame.merges.extend(self.merge_sources(value, frame.key_line))
            return
        if key in frame.explicit and self.strict:
            self.duplicates.append(f"duplicate field {render(key, 200)} "
                                   f"(line {frame.key_line})")
        frame.explicit.add(key)
        container[key] = value

    @staticmethod
    def merge_sources(value: Any, line: int) -> list[dict[str, Any]]:
        sources = value if isinstance(value, list) else [value]
        if not all(isinstance(source, dict) for source in sources):
            raise DocumentError([f"line {line}: a merge key (<<) needs a mapping or a list of "
                                 f"mappings"])
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
    "DocumentError",
    "allowed_alias_ratio",
    "decode_text",
    "describe",
    "json_type",
    "load_document",
    "load_documents",
    "render",
]
