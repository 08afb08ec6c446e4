"""Labels an operator gives to things (token names, passkey names): shown back in lists, the
dashboard and logs, so they hold no character that hides or rewrites what is shown around them."""

from __future__ import annotations

import unicodedata

from assetcdn.shared.errors import bad_request

MAX_LABEL_LENGTH = 100
# Control (NUL, ESC: terminal escapes), format (bidi overrides, zero-width) and line/paragraph separators.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def checked_label(name: str) -> str:
    """``name`` stripped, or a 400 InvalidName when it is longer than 100 characters or holds a
    control or formatting character. The caller decides what an empty label means."""
    label = name.strip()
    if len(label) > MAX_LABEL_LENGTH:
        raise bad_request(f"'name' must be at most {MAX_LABEL_LENGTH} characters.", target="name", code="InvalidName")
    if any(unicodedata.category(c) in HIDDEN_CATEGORIES for c in label):
        raise bad_request("'name' must not contain control or formatting characters.", target="name",
                          code="InvalidName")
    return label
