"""Ranks tools for `discovery.search_tools`: exact names, then words and substrings, then fuzzy.

An index is built once per run's catalog (a few ms for thousands of tools) so each
query costs about a millisecond: word matches come from inverted indexes, substring
matches from one C-level scan of all names joined together, and fuzzy matching (of
query words against the index's vocabulary) only runs when the other stages find
too little.

The query comes from the guest, so its cost is bounded: at most `MAX_QUERY_WORDS`
words count, at most `MAX_FUZZY_WORDS` of them (those not in the vocabulary) are
matched fuzzily, each only against (at most `MAX_FUZZY_CANDIDATES`) vocabulary words of a compatible
length, and the
caller's `check` runs between fuzzy words (the run's deadline).
"""

from __future__ import annotations

import bisect
import difflib
import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Generic, Protocol, TypeVar

_TOKEN = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")

#: Scores: an exact name beats everything; a word of the name beats a word of the description.
EXACT, NAME_WORD, NAME_SUBSTRING, NAME_PART, DESCRIPTION_WORD, DESCRIPTION_SUBSTRING = 1000, 100, 40, 20, 10, 5
FUZZY_WORD = 3.0
#: Query words that count; a real query has a handful, the rest of a huge one is ignored.
MAX_QUERY_WORDS = 32
#: Unknown query words matched fuzzily: each costs a pass over part of the vocabulary.
MAX_FUZZY_WORDS = 4
#: How close a word must be to count as a typo (difflib ratio).
FUZZY_CUTOFF = 0.8
#: Vocabulary words one query word is compared with (about 2 µs each): bounds a huge catalog's search.
MAX_FUZZY_CANDIDATES = 20_000


def tokens(text: str) -> list[str]:
    """Lowercase words of a name or sentence, splitting camelCase too."""
    return _TOKEN.findall(_CAMEL.sub(r"\1 \2", text).lower())


class Searchable(Protocol):
    @property
    def tool_name(self) -> str: ...

    @property
    def export_name(self) -> str: ...

    @property
    def description(self) -> str: ...


T = TypeVar("T", bound=Searchable)


class _Joined:
    """Many strings joined by newlines, to find which of them contain a substring in one scan."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.text = "\n".join(texts)
        self.starts = []
        offset = 0
        for text in texts:
            self.starts.append(offset)
            offset += len(text) + 1

    def containing(self, needle: str) -> set[int]:
        found: set[int] = set()
        if not needle or "\n" in needle:
            return found
        position = self.text.find(needle)
        while position != -1:
            index = bisect.bisect_right(self.starts, position) - 1
            found.add(index)
            position = self.text.find(
                needle, self.starts[index + 1] if index + 1 < len(self.starts) else len(self.text)
            )
        return found


class SearchIndex(Generic[T]):
    """Everything needed to rank a fixed set of tools quickly."""

    def __init__(self, entries: Sequence[T]) -> None:
        self.entries = list(entries)
        self._exact: dict[str, set[int]] = defaultdict(set)
        self._name_words: dict[str, set[int]] = defaultdict(set)
        self._description_words: dict[str, set[int]] = defaultdict(set)
        for index, entry in enumerate(self.entries):
            for name in (entry.tool_name.lower(), entry.export_name.lower()):
                self._exact[name].add(index)
            for word in {*tokens(entry.tool_name), *entry.export_name.split("_")} - {""}:
                self._name_words[word].add(index)
            for word in set(tokens(entry.description)):
                self._description_words[word].add(index)
        self._names = _Joined([f"{e.tool_name.lower()} {e.export_name.lower()}" for e in self.entries])
        self._descriptions = _Joined([e.description.lower() for e in self.entries])
        self._by_length: dict[int, list[str]] = defaultdict(list)
        for word in sorted(set(self._name_words) | set(self._description_words)):
            self._by_length[len(word)].append(word)

    def search(self, query: str, limit: int, check: Callable[[], None] | None = None) -> list[tuple[float, T]]:
        """The best `limit` entries, best first (ties by position in the index).

        `check` is called before each expensive step; it may raise to stop the search.
        """
        needle = query.strip().lower()
        if not needle:
            return []
        scores: dict[int, float] = defaultdict(float)
        for index in self._exact.get(needle, ()):
            scores[index] += EXACT
        words = list(dict.fromkeys(tokens(query)))[:MAX_QUERY_WORDS]
        self._score_words(scores, needle, words)
        if len(scores) < limit:
            self._score_fuzzy(scores, words, check or (lambda: None))
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:limit]
        return [(score, self.entries[index]) for index, score in ranked]

    def _score_words(self, scores: dict[int, float], needle: str, words: list[str]) -> None:
        for index in self._names.containing(needle):
            scores[index] += NAME_SUBSTRING
        for index in self._descriptions.containing(needle):
            scores[index] += DESCRIPTION_SUBSTRING
        for word in words:
            named = self._name_words.get(word, set())
            for index in named:
                scores[index] += NAME_WORD
            if len(word) >= 3:
                for index in self._names.containing(word) - named:
                    scores[index] += NAME_PART
            for index in self._description_words.get(word, ()):
                scores[index] += DESCRIPTION_WORD

    def _score_fuzzy(self, scores: dict[int, float], words: list[str], check: Callable[[], None]) -> None:
        # Fuzzy on words, not whole names, and only on words the index does not know (typos).
        unknown = [word for word in words if word not in self._name_words and word not in self._description_words]
        for word in unknown[:MAX_FUZZY_WORDS]:
            check()
            for close in difflib.get_close_matches(word, self._similar_lengths(word), n=3, cutoff=FUZZY_CUTOFF):
                for index in self._name_words.get(close, set()) | self._description_words.get(close, set()):
                    scores[index] += FUZZY_WORD

    def _similar_lengths(self, word: str) -> list[str]:
        # difflib's ratio is at most 2 * shorter / (both lengths): other lengths cannot reach the cutoff.
        cutoff = Fraction(FUZZY_CUTOFF).limit_denominator(1000)
        low, high = math.ceil(len(word) * cutoff / (2 - cutoff)), math.floor(len(word) * (2 - cutoff) / cutoff)
        candidates = [close for length in range(low, high + 1) for close in self._by_length.get(length, ())]
        return candidates[:MAX_FUZZY_CANDIDATES]
