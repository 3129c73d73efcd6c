"""The one reader of untrusted YAML/JSON: JSON values out, bounded work, clear refusals."""

from __future__ import annotations

import codecs
import re
from typing import Any

import pytest
import yaml

from pykubelet.api import yamlsafe
from pykubelet.api.yamlsafe import (
    MAX_DEPTH,
    DocumentError,
    allowed_alias_ratio,
    describe,
    load_document,
    render,
)


@pytest.mark.parametrize(("text", "value"), [
    ("a", "a"), ("'1'", "1"), ("1", 1), ("-0x1F", -31), ("0755", 0o755), ("0b101", 5),
    ("1_000", 1000), ("1.5", 1.5), ("yes", True), ("Off", False), ("~", None), ("", None),
    ("8080:80", "8080:80"), ("2001-12-14", "2001-12-14"),  # no base 60, no timestamps
    ("18446744073709551615", 2**64 - 1), ("-9223372036854775808", -(2**63)),
    # Beyond 64 bits: a float, as go-yaml; integral, so JSON writes all its digits.
    ("18446744073709551616", 2**64), ("+18446744073709551615", 2**64),
    ("1" + "0" * 400, "1" + "0" * 400),  # beyond a float too: text, as go-yaml
    ("0b_", "0b_"), ("!!str 12", "12"), ("!!float 1", 1), ("=", "="), ("<<", "<<"),
    # Go's number syntax, where PyYAML's YAML 1.1 resolver would keep a string.
    ("1e5", 100000), ("2e9", 2_000_000_000), ("1E3", 1000), ("1.5e5", 150000),
    ("0o17", 15), ("0O17", 15), ("0X1f", 31), ("0B11", 3), ("-0b101", -5),
    ("08", 8), ("09.5", 9.5), ("+12", 12), ("1_0.5", 10.5),
    # A float whose value is integral reads as an integer, as from Go's JSON.
    ("80.0", 80), ("1e20", 10**20), ("-0.0", 0),
    # Fractions, and 1e21 and up, which Go's JSON writes with an exponent, stay floats.
    ("1.5e-7", 1.5e-7), ("1e21", 1e21), ("1.25", 1.25),
    # A leading dot: Go's float parser on the text as written (underscores between digits).
    (".5", 0.5), (".5e1", 5), ("+.5", 0.5), (".5_0", 0.5), ("._5", "._5"), (".5__0", ".5__0"),
    (".", "."),
    ("1e400", "1e400"), ("1.2.3", "1.2.3"), ("0x", "0x"), ("1e", "1e"),
])
def test_scalars_resolve_as_json_values(text: str, value: Any) -> None:
    loaded = load_document(f"v: {text}\n")
    assert loaded == {"v": value}
    assert type(loaded["v"]) is type(value)


def test_keys_are_strings_as_upstreams_conversion_makes_them() -> None:
    assert load_document("{1: a, true: b, 2.0: c, 1.5: d, 1e6: e, 123456.0: f, 0.00001: g, "
                         "2e9: h}") == {
        "1": "a", "true": "b", "2": "c", "1.5": "d", "1e+06": "e", "123456": "f",
        "1e-05": "g", "2e+09": "h"}


@pytest.mark.parametrize(("text", "message"), [
    ("!!int 1e3", 'cannot decode "1e3" as !!int'),
    ("!!int 99999999999999999999", "does not fit in 64 bits"),
    ("!!float 1e400", "is out of range"),
])
def test_tagged_numbers_that_do_not_resolve_to_their_tag_are_refused(
        text: str, message: str) -> None:
    with pytest.raises(DocumentError, match=re.escape(message)):
        load_document(f"v: {text}\n")


@pytest.mark.parametrize(("text", "value"), [
    ("!!int 0o17", 15), ("!!int 1_000", 1000), ("!!float 0x10", 16), ("!!float 2e9", 2e9),
    ("!!float 1.5", 1.5),
])
def test_tagged_numbers_resolve_as_go_yaml_resolves_them(text: str, value: Any) -> None:
    assert load_document(f"v: {text}\n") == {"v": value}


@pytest.mark.parametrize(("text", "message"), [
    ("v: !!binary aGk=", 'YAML tag "!!binary" is not supported'),
    ("v: !!set {a}", 'YAML tag "!!set" is not supported'),
    ("v: !local x", 'YAML tag "!local" is not supported'),
    ("v: !!int 1.5", 'cannot decode "1.5" as !!int'),
    ("v: .nan", ".nan has no JSON representation"),
    ("v: &a [*a]", "recursive alias"),
    ("v: *missing", "unknown alias *missing"),
    ("{~: 1}", "not null"),
    ("{[a]: 1}", "not a collection"),
    ("v: [" + "[" * MAX_DEPTH, f"nesting deeper than {MAX_DEPTH} levels"),
    ("v: {<<: 1}", "a merge key (<<) needs a mapping"),
    ("a: 1\n---\nb: 2\n", "expected one object, found 2 YAML documents"),
    # The parser's own complaint is PyYAML's wording; pykubelet's part is where it was.
    ("v: [a, b", "line 2, column 1: "),
])
def test_what_json_cannot_hold_is_refused_with_its_line(text: str, message: str) -> None:
    with pytest.raises(DocumentError) as info:
        load_document(text)
    assert message in str(info.value)
    assert str(info.value).startswith("line ") or "documents" in message


def test_bytes_must_be_utf8_or_carry_a_utf16_byte_order_mark() -> None:
    assert load_document(codecs.BOM_UTF8 + b"a: 1") == {"a": 1}
    assert load_document(codecs.BOM_UTF16_BE + "a: é".encode("utf-16-be")) == {"a": "é"}
    with pytest.raises(DocumentError, match=r"not valid UTF-8: byte 3"):
        load_document(b"a: \xe9")
    with pytest.raises(DocumentError, match="not valid Unicode"):
        load_document("a: \ud800")


def test_merge_keys_fill_in_without_overriding() -> None:
    document = load_document("base: &b {x: 1, y: 2}\nmine: {<<: [*b, {z: 3}], y: 9}\n")
    assert document["mine"] == {"x": 1, "y": 9, "z": 3}


def test_duplicate_keys_win_last_or_are_refused_when_strict() -> None:
    assert load_document("a: 1\na: 2\n") == {"a": 2}
    with pytest.raises(DocumentError, match=r'duplicate field "a" \(line 2\)') as info:
        load_document("a: 1\na: 2\n", strict=True)
    assert info.value.duplicate_keys


def test_aliases_count_as_what_they_expand_to() -> None:
    # A thousand real nodes may alias a few thousand more; aliasing that is almost all of
    # the document is refused, the way go-yaml refuses it.
    modest = "x: &a [" + ", ".join(["v"] * 1000) + "]\ny: [*a, *a, *a]\n"
    assert len(load_document(modest)["y"]) == 3
    bomb = "x: &a [" + ", ".join(["v"] * 10) + "]\n" + "".join(
        f"y{i}: &a{i} [" + ", ".join([f"*a{i - 1}" if i else "*a"] * 10) + "]\n"
        for i in range(4))
    with pytest.raises(DocumentError, match="document contains excessive aliasing"):
        load_document(bomb)
    assert allowed_alias_ratio(1000) == 0.99 and allowed_alias_ratio(10**7) == 0.10


def test_describe_and_render_are_bounded_for_any_value() -> None:
    circular: list[Any] = []
    circular.append(circular)
    looped: dict[str, Any] = {}
    looped["self"] = looped
    assert render(circular, 10) == "[[[[[[[[[[..."
    assert render(looped, 20).startswith('{"self":{"self":')
    assert describe(b"\x00\xff") == "bytes <2 bytes>"
    assert describe(10**5000) == "number <16610-bit integer>"
    assert describe("x" * 1000).endswith('xxx...') and len(describe("x" * 1000)) < 60
    assert describe({"a": [1, None, True]}) == 'object {"a":[1,null,true]}'


# Far deeper than any parser's own bound (libyaml stops flow nesting at 1000 levels).
DEEP_DOCUMENT = b"apiVersion: v1\nkind: Pod\nspec: " + b"[" * 100_000 + b"\n"


def test_nesting_is_bounded_by_pykubelet_even_on_a_parser_without_a_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # PyYAML's pure-Python parser has no nesting limit: the bound must be pykubelet's own.
    monkeypatch.setattr(yamlsafe, "_Loader", yaml.SafeLoader)
    with pytest.raises(DocumentError) as info:
        load_document(DEEP_DOCUMENT)
    assert str(info.value) == f"line 3: nesting deeper than {MAX_DEPTH} levels"


def test_a_document_too_deep_for_the_parser_is_refused_with_its_line() -> None:
    # With libyaml the parser may stop first, in its own words; the refusal is the same.
    with pytest.raises(DocumentError) as info:
        load_document(DEEP_DOCUMENT)
    assert str(info.value).startswith("line 3")
