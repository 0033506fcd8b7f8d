"""The verification snippet in docs/webhooks.md accepts what the operator signs and refuses a
changed body, so a receiver copying it verifies real events."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from scrapeq_operator.webhook_signing import signature_header

pytestmark = pytest.mark.timeout(10)

DOC = Path(__file__).resolve().parents[3] / "docs" / "webhooks.md"


def documented_verifier() -> Any:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    (snippet,) = [block for block in blocks if "def verify_scrapeq_signature" in block]
    namespace: dict[str, Any] = {}
    exec(compile(snippet, str(DOC), "exec"), namespace)
    return namespace["verify_scrapeq_signature"]


def test_the_documented_snippet_verifies_a_signature_the_operator_made() -> None:
    verify = documented_verifier()
    body = b'{"specversion":"1.0","id":"x"}'
    header = signature_header(b"key", int(time.time()), body)

    verify(b"key", header, body)
    with pytest.raises(ValueError, match="does not match"):
        verify(b"key", header, body + b" ")
    with pytest.raises(ValueError, match="too old"):
        verify(b"key", signature_header(b"key", int(time.time()) - 3600, body), body)
