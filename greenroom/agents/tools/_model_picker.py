"""``model_picker``: let the agent switch between the models its author allows (spec §2.13)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import (
    FunctionTool,
    ToolAnnotations,
    ToolContext,
    ToolResult,
    ToolsetError,
    error,
    schema,
    string,
)
from ._registry import Toolset, register


@register("model_picker")
def model_picker_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    models = config.options.get("models")
    if (
        not isinstance(models, list | tuple)
        or not models
        or not all(isinstance(m, str) for m in models)
    ):
        raise ToolsetError("models must be a non-empty list of model names")
    allowed = [str(m) for m in models]

    async def change_model(args: Mapping[str, Any]) -> ToolResult:
        ref = str(args.get("model", "")).strip()
        if not ref:
            return error("model parameter is required")
        if ref not in allowed:
            return error(
                f'model "{ref}" is not in the allowed list. Available models: {", ".join(allowed)}'
            )
        if ctx.host is None:
            return error("failed to set model: no runtime")
        try:
            await ctx.host.change_model(ref)
        except Exception as exc:
            return error(f"failed to set model: {exc}")
        return ToolResult(f"Model changed to {ref}")

    async def revert_model(_: Mapping[str, Any]) -> ToolResult:
        if ctx.host is None:
            return error("failed to set model: no runtime")
        await ctx.host.revert_model()
        return ToolResult("Model reverted to the agent's default model")

    listed = ", ".join(allowed)
    tools = [
        FunctionTool(
            ToolSpec(
                "change_model",
                f"Switch to another model. Available: {listed}",
                schema({"model": string("The model to use")}, ("model",)),
            ),
            change_model,
            ToolAnnotations(title="Change Model", read_only=True),
            "model_picker",
        ),
        FunctionTool(
            ToolSpec("revert_model", "Go back to the agent's default model.", schema({})),
            revert_model,
            ToolAnnotations(title="Revert Model", read_only=True),
            "model_picker",
        ),
    ]
    text = f"## Models\n\nYou can switch models with change_model (available: {listed})."
    return Toolset(list(tools), text)
