"""``$(VAR)`` expansion in commands, args and env values (upstream ``expansion.Expand``).

Container command lines, environment values and probe commands all expand
``$(NAME)`` references the same way, so the rule has one home here rather than
one copy per user (the runtime manager builds containers with it, the prober
expands exec probe commands with it).
"""

from __future__ import annotations

from collections.abc import Callable


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """Replace ``$(NAME)`` by its value; ``$$`` is a literal ``$``; unknown or unclosed stays."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char != "$" or i + 1 >= n:
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            close = text.find(")", i + 2)
            if close < 0:
                out.append("$(")
                i += 2
                continue
            name = text[i + 2:close]
            value = lookup(name)
            out.append(f"$({name})" if value is None else value)
            i = close + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)


__all__ = ["expand"]
