"""`POST /hooks/git` on the daemon's metrics port: a Git push webhook (GitHub's, signed with
HMAC-SHA256 over the body, `X-Hub-Signature-256`) that makes the daemon fetch and run at
once instead of at its next interval. Polling stays: a lost webhook delays nothing beyond
the interval, and a forged one is refused before it can trigger anything."""

from __future__ import annotations

import hashlib
import hmac

PATH = "/hooks/git"
MAX_BODY = 1 << 20  # GitHub caps payloads at 25 MB; a push of a network repo is small
SIGNATURE_HEADER = "X-Hub-Signature-256"


def verified(secret: bytes, body: bytes, signature: str | None) -> bool:
    """The body was signed with the secret (a constant-time comparison)."""
    if not signature or not signature.startswith("sha256="):
        return False
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature.removeprefix("sha256="))
