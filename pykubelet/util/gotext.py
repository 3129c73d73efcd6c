"""Go's spelling of strings and numbers where pykubelet's text must read as upstream's.

Upstream builds many of the messages users see (admission reasons, hook
failures, device-plugin refusals, ``--version``) with ``%q``, Go's
``strconv.Quote``. A user comparing pykubelet's text with the Go kubelet's, or a
test of upstream's e2e suite matching it, needs the same quoting, so it is
written once, here.

Floats too: upstream turns a manifest's YAML into JSON before decoding it, so a
YAML float reaches the decoder as ``encoding/json`` writes a ``float64``, and a
float map key as ``strconv.FormatFloat(f, 'g', -1, 64)`` spells it. A quantity
written as a bare number keeps that text, which the Go kubelet 1.20's container
hash sees. Python's ``repr`` picks other cut-offs between positional and
exponent forms (``1e+16`` against Go's ``10000000000000000``), so the Go
spellings live here.
"""

from __future__ import annotations

import math
from decimal import Decimal

# strconv.Quote's short escapes; every other non-printable character is spelled by
# its code point.
_SHORT_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                  "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def go_quote(text: str) -> str:
    """``text`` as Go's ``%q`` prints it: double-quoted, printable characters kept."""
    out = []
    for char in text:
        escape = _SHORT_ESCAPES.get(char)
        if escape is not None:
            out.append(escape)
        elif char.isprintable():
            out.append(char)
        elif "\ud800" <= char <= "\udfff":
            out.append(_invalid_utf8(char))
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def _invalid_utf8(char: str) -> str:
    # A lone surrogate stands for bytes that were not UTF-8: Python's
    # ``surrogateescape`` keeps an undecodable byte as U+DC80..U+DCFF, and any other
    # surrogate has no UTF-8 spelling. Go reads such a string as invalid UTF-8 and
    # spells each offending byte as ``\xNN``.
    if "\udc80" <= char <= "\udcff":
        return f"\\x{ord(char) - 0xDC00:02x}"
    return "".join(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogatepass"))


def _shortest_digits(value: float) -> tuple[str, int]:
    """The fewest decimal digits that read back as ``abs(value)``, and the position of
    the decimal point relative to them (``1.5`` is ``("15", 1)``, ``0.001`` ``("1", -2)``)."""
    sign_digits_exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(str(digit) for digit in sign_digits_exponent.digits)
    exponent = sign_digits_exponent.exponent
    assert isinstance(exponent, int)  # finite values only
    return digits, len(digits) + exponent


def go_format_float(value: float, verb: str, *, exponent_digits: int = 2) -> str:
    """``strconv.FormatFloat(value, verb, -1, 64)`` for a finite ``value`` and ``verb``
    ``'e'``, ``'f'`` or ``'g'``: the shortest digits that read back, laid out as Go does
    (``'g'`` takes the exponent form below 1e-4 and from 1e6 on: ``1e+06``). An exponent
    is written with at least ``exponent_digits`` digits (strconv's 2)."""
    if not math.isfinite(value):
        raise ValueError(f"{value!r} has no Go decimal spelling here")
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        digits, point = "0", 1
    else:
        digits, point = _shortest_digits(value)
    exponent = point - 1
    if verb == "g":
        # With the shortest digits, strconv decides by a precision of 6.
        verb = "e" if exponent < -4 or exponent >= 6 else "f"
    if verb == "e":
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return (f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}"
                f"{abs(exponent):0{exponent_digits}d}")
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def go_json_float(value: float) -> str:
    """A finite ``float64`` as Go's ``encoding/json`` writes it: positional from 1e-6 up
    to 1e21, otherwise the exponent form with at least one exponent digit (``1e-7``)."""
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        return go_format_float(value, "e", exponent_digits=1)
    return go_format_float(value, "f")


__all__ = ["go_format_float", "go_json_float", "go_quote"]
