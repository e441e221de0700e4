"""API keys: read from the environment variable a model names, checked before any request."""

from __future__ import annotations

from collections.abc import Mapping

from greenroom.errors import ModelKeyMissing

KEYLESS_PLACEHOLDER = "greenroom-no-key"
"""Sent as the key to a local OpenAI-compatible server that needs none (the SDK wants one)."""


def read_key(env: Mapping[str, str], var: str, *, required: bool, ref: str) -> str:
    """The key held by ``env[var]``.

    Args:
        env: the environment to read.
        var: the variable's name (``ModelConfig.token_key`` or the provider's default;
            ``""`` for none).
        required: False for a keyless local server: a missing key gives the placeholder.
        ref: the model ref, named in the error.

    Raises:
        ModelKeyMissing: the variable is unset or empty and a key is required.
    """
    key = env.get(var, "").strip() if var else ""
    if key:
        return key
    if not required:
        return KEYLESS_PLACEHOLDER
    if not var:
        raise ModelKeyMissing(f"model {ref} needs an API key: set token_key to its variable")
    raise ModelKeyMissing(f"model {ref} needs an API key: set the environment variable {var}")
