"""A query's parameters as the edge's image endpoints read them: each at most once.

`w=5&w=6` may mean either; answering one of them (`query.get` takes the first) serves, and caches, what
the caller may not have meant. A parameter an endpoint reads, given more than once, is refused (400); one it
does not read (a cache buster) may repeat.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


def repeated(query: Mapping[str, str], names: Collection[str]) -> str | None:
    """The first of `names` that `query` (a MultiDict, whose len counts every pair) gives more than once, or None.

    A query without a repeated key costs one set of its keys (a few names): the usual request.
    """
    if len(set(query)) == len(query):
        return None
    seen: set[str] = set()
    for name, _value in query.items():
        if name in seen and name in names:
            return name
        seen.add(name)
    return None
