"""Model providers: one streaming model call, whatever the vendor.

:func:`make_provider` picks the provider for a :class:`ModelConfig`: ``openai`` (and the
OpenAI-compatible vendors by name, ``dmr`` and custom providers), ``anthropic``, ``google``,
``amazon-bedrock``, ``scripted`` (replays a script file) and ``echo`` (needs nothing); the names
are in ``_catalog.py``. :func:`resolve_auto` says what the ``auto`` model ref stands for.
:class:`ModelClients` pools the HTTP clients of the model endpoints (one per endpoint, kept
alive, shared by every session): a server opens one with :func:`open_model_clients` and passes
it to :func:`make_provider`. Importing this package imports no vendor SDK: the provider
classes (``OpenAIProvider``, ``AnthropicProvider``, ``GoogleProvider``, ``BedrockProvider``) are
loaded by name on first access, and :func:`make_provider` loads a provider's module (and its
SDK) the first time a model of that API is made (about half a second to two seconds, once).
"""

import typing as _typing

from ._base import (
    Delta as Delta,
    ModelConfig as ModelConfig,
    ModelRequest as ModelRequest,
    ModelResponse as ModelResponse,
    OnDelta as OnDelta,
    Provider as Provider,
    ReasoningDelta as ReasoningDelta,
    StructuredOutput as StructuredOutput,
    TextDelta as TextDelta,
    ToolSpec as ToolSpec,
)
from ._clients import (
    ClientStatistics as ClientStatistics,
    ModelClients as ModelClients,
    open_model_clients as open_model_clients,
)
from ._echo import EchoProvider as EchoProvider
from ._factory import (
    PROVIDERS as PROVIDERS,
    make_provider as make_provider,
    resolve_auto as resolve_auto,
)
from ._keys import KEYLESS_PLACEHOLDER as KEYLESS_PLACEHOLDER
from ._retry import Backoff as Backoff
from ._scripted import (
    Script as Script,
    ScriptedProvider as ScriptedProvider,
    parse_script as parse_script,
    script_from_data as script_from_data,
)

if _typing.TYPE_CHECKING:
    from ._anthropic_provider import AnthropicProvider as AnthropicProvider
    from ._bedrock_provider import BedrockProvider as BedrockProvider
    from ._google_provider import GoogleProvider as GoogleProvider
    from ._openai_provider import OpenAIProvider as OpenAIProvider

_LAZY = {
    "AnthropicProvider": "._anthropic_provider",
    "BedrockProvider": "._bedrock_provider",
    "GoogleProvider": "._google_provider",
    "OpenAIProvider": "._openai_provider",
}
"""The SDK-backed provider classes: imported on first access (each pulls in its SDK)."""


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
