"""k9s-style filters: words that must all match, ``!word`` that must not, each a regex.

A filter is parsed once (:func:`parse_filter`) and applied to any text. A word that is not a
valid regular expression is matched literally, so ``a+b(`` never raises; matching ignores case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Filter:
    """Parsed filter: every ``must`` pattern occurs in the text, no ``must_not`` one does."""

    must: tuple[re.Pattern[str], ...] = ()
    must_not: tuple[re.Pattern[str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.must or self.must_not)

    def matches(self, text: str) -> bool:
        """True when ``text`` satisfies the filter (an empty filter matches everything)."""
        return (all(p.search(text) for p in self.must)
                and not any(p.search(text) for p in self.must_not))


def _pattern(word: str) -> re.Pattern[str]:
    try:
        return re.compile(word, re.IGNORECASE)
    except re.error:
        return re.compile(re.escape(word), re.IGNORECASE)


def parse_filter(query: str) -> Filter:
    """Parse ``query``: whitespace-separated words; ``!word`` negates (a lone ``!`` is ignored)."""
    must: list[re.Pattern[str]] = []
    must_not: list[re.Pattern[str]] = []
    for word in query.split():
        if word.startswith("!"):
            if len(word) > 1:
                must_not.append(_pattern(word[1:]))
        else:
            must.append(_pattern(word))
    return Filter(tuple(must), tuple(must_not))
