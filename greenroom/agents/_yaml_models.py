"""The model side of an agent file: ``models``, ``providers``, model refs, alloys, ``fallback``.

Each reader reports faults to the :class:`Checker` with their lines and returns None for a part
that cannot be built; what greenroom accepts but will not do becomes a warning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._config import AUTO_MODEL, FallbackConfig, split_alloy, split_inline_ref
from ._yaml_checks import (
    Checker,
    as_bool,
    as_count,
    as_mapping,
    as_number,
    as_positive,
    as_str,
    as_str_list,
    join,
    kind_of,
    line_of,
    plain,
)
from ._yaml_facts import FACT_KEYS, parse_facts
from .providers._base import ModelConfig, RoutingRule
from .providers._catalog import (
    API_TYPE_NOTES,
    API_TYPES,
    DEFAULT_API_TYPE,
    VENDORS,
    CustomProvider,
)
from .providers._dmr import DMR_OPTIONS

_MODEL_KEYS = {
    "provider",
    "model",
    "base_url",
    "token_key",
    "temperature",
    "max_tokens",
    "title_model",
    "provider_opts",
    *FACT_KEYS,
    "routing",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "thinking_budget",
    "parallel_tool_calls",
    "track_usage",
}
_MODEL_IGNORED = {"output_capabilities"}
_NUMBERS = ("temperature", "top_p", "frequency_penalty", "presence_penalty")
_FLAGS = ("parallel_tool_calls", "track_usage")
_EFFORTS = ("minimal", "low", "medium", "high", "none")
_PROVIDER_KEYS = {"api_type", "base_url", "token_key"}
_FALLBACK_KEYS = {"models", "cooldown", "retries"}

_USED_OPTIONS: Mapping[str, frozenset[str]] = {
    "openai": frozenset({"api_type"}),
    "anthropic": frozenset({"interleaved_thinking"}),
    "google": frozenset(),
    "bedrock": frozenset({"region", "profile", "endpoint_url", "interleaved_thinking"}),
    "echo": frozenset({"token_delay"}),
    "scripted": frozenset(),
}
"""The ``provider_opts`` keys each API's provider reads; others are reported as ignored."""

_VERTEX_OPTIONS = {"project", "location"}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class ModelRefs:
    """Checks model refs against a file's ``models`` and provider names."""

    def __init__(self, models: Mapping[str, Any], providers: Mapping[str, Any]) -> None:
        self.models = models
        self.providers = providers

    def known_provider(self, name: str) -> bool:
        return name in VENDORS or name in self.providers

    def problem(self, ref: str) -> str | None:
        """What is wrong with ``ref`` (None when it resolves); alloys are checked part by part."""
        parts = split_alloy(ref)
        if not parts:
            return "is empty"
        for part in parts:
            if part in self.models or part == AUTO_MODEL:
                continue
            inline = split_inline_ref(part)
            if inline is None:
                return (
                    f"unknown model {part!r} (not in models; use a models name, 'auto' or "
                    "provider/model)"
                )
            if not self.known_provider(inline[0]):
                return _unknown_provider(inline[0])
        return None

    def check(self, c: Checker, ref: str, line: int, path: str) -> bool:
        problem = self.problem(ref)
        if problem is not None:
            c.fail(line, path, problem)
            return False
        for part in split_alloy(ref):
            inline = split_inline_ref(part)
            if inline is not None:
                _warn_unsupported(c, inline[0], line, path)
        return True


def _unknown_provider(name: str) -> str:
    known = ", ".join(sorted(VENDORS))
    return f"unknown provider {name!r} (known: {known}, or a name from the file's providers)"


def _warn_unsupported(c: Checker, provider: str, line: int, path: str) -> None:
    vendor = VENDORS.get(provider)
    if vendor is not None and vendor.unsupported:
        c.warn(
            line, path, f"provider {provider!r} is not supported by greenroom: {vendor.unsupported}"
        )


def parse_providers(c: Checker, raw: Any, line: int) -> dict[str, CustomProvider]:
    mapping = as_mapping(raw)
    if mapping is None:
        c.fail(line, "providers", f"expected a mapping, got {kind_of(raw)}")
        return {}
    out: dict[str, CustomProvider] = {}
    for name, value in mapping.items():
        path = join("providers", name)
        entry_line = line_of(mapping, name, value=False) or line
        entry = as_mapping(value)
        if not isinstance(name, str) or entry is None:
            c.fail(entry_line, path, f"expected a name and a mapping, got {kind_of(value)}")
            continue
        if name in VENDORS:
            c.fail(entry_line, path, f"{name!r} is a built-in provider; pick another name")
            continue
        c.keys(entry, _PROVIDER_KEYS, set(), path)
        fields = {
            key: c.typed(entry, key, path, as_str, "a string")
            for key in _PROVIDER_KEYS
            if key in entry
        }
        api_type = fields.get("api_type") or DEFAULT_API_TYPE
        type_line = line_of(entry, "api_type") or entry_line
        if api_type not in API_TYPES:
            c.fail(
                type_line,
                f"{path}.api_type",
                f"unknown api_type {api_type!r} (known: {', '.join(sorted(API_TYPES))})",
            )
        elif api_type in API_TYPE_NOTES:
            c.warn(type_line, f"{path}.api_type", API_TYPE_NOTES[api_type])
        if not fields.get("base_url"):
            c.fail(entry_line, f"{path}.base_url", "is required")
        if any(v is None for v in fields.values()):
            continue
        out[name] = CustomProvider(
            name=name,
            base_url=fields.get("base_url") or "",
            token_key=fields.get("token_key") or "",
            api_type=api_type,
        )
    return out


def parse_model(c: Checker, name: str, raw: Any, line: int, refs: ModelRefs) -> ModelConfig | None:
    path = f"models.{name}"
    mapping = as_mapping(raw)
    if mapping is None:
        c.fail(line, path, f"expected a mapping, got {kind_of(raw)}")
        return None
    c.keys(mapping, _MODEL_KEYS, _MODEL_IGNORED, path)
    fields: dict[str, Any] = {}
    for key in ("provider", "model", "base_url", "token_key", "title_model"):
        if key in mapping:
            fields[key] = c.typed(mapping, key, path, as_str, "a string")
    for key in _NUMBERS:
        if key in mapping:
            fields[key] = c.typed(mapping, key, path, as_number, "a number")
    for key in _FLAGS:
        if key in mapping:
            fields[key] = c.typed(mapping, key, path, as_bool, "true or false")
    if "thinking_budget" in mapping:
        fields["thinking_budget"] = c.typed(
            mapping, "thinking_budget", path, _as_budget, f"an integer or one of {_EFFORTS}"
        )
    if "max_tokens" in mapping:
        fields["max_tokens"] = c.typed(
            mapping, "max_tokens", path, as_positive, "a positive integer"
        )
    if "provider_opts" in mapping:
        opts = c.typed(mapping, "provider_opts", path, as_mapping, "a mapping")
        fields["provider_opts"] = plain(opts) if opts is not None else None
    facts = parse_facts(c, mapping, path, line)
    if facts is not None:
        fields["facts"] = facts
    if "routing" in mapping:
        where = line_of(mapping, "routing") or line
        fields["routing"] = parse_routing(c, mapping["routing"], f"{path}.routing", where, refs)
    if "model" not in mapping:
        c.fail(line, join(path, "model"), "is required")
    provider, model = fields.get("provider"), fields.get("model")
    if "provider" not in mapping:
        if model and "," in model:  # an alloy: its parts are refs
            refs.check(c, model, line_of(mapping, "model") or line, f"{path}.model")
            return ModelConfig(name=name, provider="", model=model)
        c.fail(line, join(path, "provider"), "is required")
    elif provider is not None and not refs.known_provider(provider):
        c.fail(
            line_of(mapping, "provider") or line, f"{path}.provider", _unknown_provider(provider)
        )
        return None
    elif provider is not None:
        _warn_unsupported(c, provider, line_of(mapping, "provider") or line, f"{path}.provider")
    title = fields.get("title_model")
    if title:
        refs.check(c, title, line_of(mapping, "title_model") or line, f"{path}.title_model")
    if not provider or not model or any(v is None for v in fields.values()):
        return None
    config = ModelConfig(name=name, **fields)
    _check_options(c, config, refs, line_of(mapping, "provider_opts") or line, path)
    return config


def _as_budget(value: Any) -> str | int | None:
    """A thinking budget: tokens (-1 and up) or an effort name."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= -1:
        return int(value)
    if isinstance(value, str) and value.strip().lower() in _EFFORTS:
        return value.strip().lower()
    return None


def _check_options(c: Checker, config: ModelConfig, refs: ModelRefs, line: int, path: str) -> None:
    """Warn about ``provider_opts`` greenroom does not read; check the echo model's delay."""
    custom = refs.providers.get(config.provider)
    vendor = VENDORS.get(config.provider)
    api = "openai" if custom is not None else (vendor.api if vendor is not None else "")
    options = config.provider_opts
    opts_path = f"{path}.provider_opts"
    used = _USED_OPTIONS.get(api, frozenset())
    if config.provider == "dmr":
        used |= DMR_OPTIONS
    extra = set(options) - used
    if api == "google" and extra & _VERTEX_OPTIONS:
        extra -= _VERTEX_OPTIONS
        c.warn(
            line,
            opts_path,
            "Vertex AI (project/location) is not supported by greenroom; "
            "the Gemini API with GOOGLE_API_KEY is",
        )
    for key in sorted(extra):
        c.warn(line, f"{opts_path}.{key}", "ignored: greenroom does not use this option")
    if api == "echo" and "token_delay" in options:
        delay = options["token_delay"]
        if not isinstance(delay, int | float) or isinstance(delay, bool) or not 0 <= delay <= 60:
            c.fail(line, f"{opts_path}.token_delay", "expected seconds from 0 to 60")


def parse_routing(
    c: Checker, raw: Any, path: str, line: int, refs: ModelRefs
) -> tuple[RoutingRule, ...] | None:
    """``routing``: a list of ``{model, examples}``; each model a ref of one model."""
    if not isinstance(raw, list) or not raw:
        c.fail(line, path, f"expected a non-empty list of rules, got {kind_of(raw)}")
        return None
    rules = []
    failed = False
    for index, item in enumerate(raw):
        item_path, item_line = f"{path}[{index}]", line_of(raw, index) or line
        mapping = as_mapping(item)
        if mapping is None:
            c.fail(item_line, item_path, f"expected a mapping, got {kind_of(item)}")
            failed = True
            continue
        c.keys(mapping, {"model", "examples"}, set(), item_path)
        target = mapping.get("model")
        if not isinstance(target, str) or not target:
            c.fail(item_line, f"{item_path}.model", "is required (a model ref)")
            failed = True
            continue
        if "," in target:
            c.fail(item_line, f"{item_path}.model", "must name one model, not an alloy")
            failed = True
            continue
        failed = not refs.check(c, target, item_line, f"{item_path}.model") or failed
        examples = as_str_list(mapping.get("examples", []))
        if examples is None:
            c.fail(item_line, f"{item_path}.examples", "expected a list of strings")
            failed = True
            continue
        rules.append(RoutingRule(target, tuple(examples)))
    return None if failed else tuple(rules)


def parse_fallback(
    c: Checker, raw: Any, line: int, path: str, refs: ModelRefs
) -> FallbackConfig | None:
    mapping = as_mapping(raw)
    if mapping is None:
        c.fail(line, path, f"expected a mapping, got {kind_of(raw)}")
        return None
    c.keys(mapping, _FALLBACK_KEYS, set(), path)
    models = (
        c.typed(mapping, "models", path, as_str_list, "a list of strings")
        if ("models" in mapping)
        else []
    )
    ok = models is not None
    for index, ref in enumerate(models or []):
        ref_line = line_of(mapping["models"], index) or line
        ok = refs.check(c, ref, ref_line, f"{path}.models[{index}]") and ok
    cooldown = 60.0
    if "cooldown" in mapping:
        parsed = _duration(mapping["cooldown"])
        if parsed is None:
            c.fail(
                line_of(mapping, "cooldown") or line,
                f"{path}.cooldown",
                "expected a duration such as 30s, 1m or 2m30s",
            )
            ok = False
        else:
            cooldown = parsed
    retries = 2
    if "retries" in mapping:
        value = mapping["retries"]
        if as_count(value) is None and value != -1:
            c.fail(line_of(mapping, "retries") or line, f"{path}.retries", "expected an integer")
            ok = False
        else:
            # docker-agent: 0 means the default (2), -1 no retries.
            retries = int(value) or 2
    if not ok:
        return None
    return FallbackConfig(models=tuple(models or ()), cooldown=cooldown, retries=retries)


def _duration(value: Any) -> float | None:
    """Seconds in a Go duration (``90s``, ``1m30s``, ``500ms``) or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if not isinstance(value, str) or not value:
        return None
    matches = list(_DURATION.finditer(value))
    if "".join(m.group(0) for m in matches) != value:
        return None
    return sum(float(m.group(1)) * _UNITS[m.group(2)] for m in matches)
