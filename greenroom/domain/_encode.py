"""Event bodies as JSON bytes, encoded once (then stored and served as these bytes)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

# One shared encoder: json.dumps with options builds a new JSONEncoder on every call.
_EVENT_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_ASCII_EVENT_ENCODER = json.JSONEncoder(separators=(",", ":"))


_PLAIN = frozenset({str, int, bool, type(None)})
_fast_encode: list[Callable[[Any], bytes]] = []  # msgspec's encoder, imported on first use


def encode_json(data: Any) -> bytes:
    """JSON as UTF-8, compact: what an event's body is, encoded once, then stored and served as
    these bytes. A string holding a lone surrogate (which UTF-8 cannot carry) is escaped as
    ``\\udXXX`` instead of failing.

    A flat object of strings, integers, booleans and nulls (a token's ``agent_choice``) goes
    through msgspec, which writes exactly the bytes :mod:`json` writes for those (escapes,
    non-ASCII text, integers of any size) in a ninth of the time (decision 0037); anything
    else, floats above all (msgspec writes ``1e16`` and ``null`` where :mod:`json` writes
    ``1e+16`` and ``NaN``), takes :mod:`json`."""
    try:
        if type(data) is dict:
            for key, value in data.items():
                if type(key) is not str or type(value) not in _PLAIN:
                    break
            else:
                if not _fast_encode:
                    import msgspec  # lazily: the light start (decision 0018)

                    _fast_encode.append(msgspec.json.Encoder().encode)
                return _fast_encode[0](data)
        return _EVENT_ENCODER.encode(data).encode()
    except UnicodeEncodeError:
        return _ASCII_EVENT_ENCODER.encode(data).encode()
