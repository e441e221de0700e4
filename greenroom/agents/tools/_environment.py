"""The environment tool processes start from: the server's, without its secrets (issue 23).

Left out: every ``GREENROOM_*`` variable (the server's own settings: its token, its database
address), the model providers' key variables (the vendor catalog's, Google's, the AWS
credentials Bedrock uses, any ``*_API_KEY``), and the variables the agent file's models name as
their ``token_key``. A command that needs one gets it from the toolset's ``env:``, as docker-agent
does (``env: {GITHUB_TOKEN: ${env.GITHUB_TOKEN}}``): the agent file's author passes it on
purpose.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..providers._catalog import VENDORS

SERVER_PREFIX = "GREENROOM_"
PROVIDER_KEYS = frozenset(
    {v.key_var for v in VENDORS.values() if v.key_var}
    | {
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GOOGLE_API_KEY",
        "GEMINI_API_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_BEARER_TOKEN_BEDROCK",
    }
)


def is_secret(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether variable ``name`` stays out of tool processes."""
    upper = name.upper()
    return (
        upper.startswith(SERVER_PREFIX)
        or upper in PROVIDER_KEYS
        or upper.endswith("_API_KEY")
        or name in extra
    )


def scrubbed(env: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """``env`` without the secrets (``extra``: more names, e.g. the models' ``token_key``)."""
    names = frozenset(extra)
    return {key: value for key, value in env.items() if not is_secret(key, names)}
