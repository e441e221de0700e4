"""Model providers: one streaming model call, whatever the vendor.

:func:`make_provider` picks the provider for a :class:`ModelConfig`: ``openai`` (and the
OpenAI-compatible vendors by name, ``dmr`` and custom providers), ``anthropic``, ``google``,
``amazon-bedrock``, ``scripted`` (replays a script file) and ``echo`` (needs nothing); the names
are in ``_catalog.py``. :func:`resolve_auto` says what the ``auto`` model ref stands for.
:class:`ModelClients` pools the HTTP clients of the model endpoints (one per endpoint, kept
alive, shared by every session): a server opens one with :func:`open_model_clients` and passes
it to :func:`make_provider`. Importing this package imports the vendor SDKs (about two
seconds): do it at startup, never inside a request.
"""

from ._anthropic_provider import AnthropicProvider as AnthropicProvider
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
from ._bedrock_provider import BedrockProvider as BedrockProvider
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
from ._google_provider import GoogleProvider as GoogleProvider
from ._keys import KEYLESS_PLACEHOLDER as KEYLESS_PLACEHOLDER
from ._openai_provider import OpenAIProvider as OpenAIProvider
from ._retry import Backoff as Backoff
from ._scripted import (
    Script as Script,
    ScriptedProvider as ScriptedProvider,
    parse_script as parse_script,
    script_from_data as script_from_data,
)
