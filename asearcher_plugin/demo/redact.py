"""Nothing the server sends may carry a secret from its environment, whatever echoed it (an error, a URL, a page)."""

from __future__ import annotations

import os
import re

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.I)
MIN_SECRET_CHARS = 6  # shorter values ("1", "none") would blank ordinary words
MASK = "[redacted]"


def secret_values(environ=None) -> list[str]:
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)  # a secret inside a longer one is masked with it


def redact(text: str, environ=None) -> str:
    """`text` with the value of every secret-looking environment variable (read now: it may change) masked."""
    for value in secret_values(environ):
        if value in text:
            text = text.replace(value, MASK)
    return text
