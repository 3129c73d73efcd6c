"""Go's spelling of strings in messages that must read as upstream's.

Upstream builds many of the messages users see (admission reasons, hook
failures, device-plugin refusals, ``--version``) with ``%q``, Go's
``strconv.Quote``. A user comparing pykubelet's text with the Go kubelet's, or a
test of upstream's e2e suite matching it, needs the same quoting, so it is
written once, here.
"""

from __future__ import annotations

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


__all__ = ["go_quote"]
