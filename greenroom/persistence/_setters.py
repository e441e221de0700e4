"""The Store's one-field setters, shared by the SQLite and PostgreSQL stores: each store gives
``_set`` (named columns to new values, one UPDATE of the session's row, SessionNotFound when
there is none) in its own SQL dialect."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from greenroom.domain import Permissions, to_json

from . import _rows


class FieldSetters:
    async def _set(self, session_id: str, fields: Mapping[str, Any]) -> None:
        raise NotImplementedError

    async def update_title(self, session_id: str, title: str) -> None:
        await self._set(session_id, {"title": title})

    async def update_permissions(self, session_id: str, permissions: Permissions | None) -> None:
        text = None if permissions is None else _rows.dumps(to_json(permissions, Permissions))
        await self._set(session_id, {"permissions": text})

    async def update_tokens(
        self, session_id: str, input_tokens: int, output_tokens: int, cost: float
    ) -> None:
        fields = {"input_tokens": input_tokens, "output_tokens": output_tokens, "cost": cost}
        await self._set(session_id, fields)

    async def set_starred(self, session_id: str, starred: bool) -> None:
        await self._set(session_id, {"starred": int(starred)})
