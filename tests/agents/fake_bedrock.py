"""A fake Amazon Bedrock runtime (live HTTP, ConverseStream's binary event stream) for tests.

Point the Bedrock provider at ``server.url`` (``provider_opts.endpoint_url``). Replies are AWS
event-stream messages, encoded here (prelude, headers, payload, CRC32s) and decoded by the
provider with botocore::

    server = await nursery.start(FakeBedrock().serve)
    server.script(text_reply("Hel", "lo"), error_reply(429, "ThrottlingException", "slow"))

:func:`signature_matches` checks a recorded request's SigV4 signature against the secret.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials

from .fake_sse import Ending, FakeSSEServer, Recorded, Reply

CONTENT_TYPE = "application/vnd.amazon.eventstream"


class FakeBedrock(FakeSSEServer):
    def __init__(self) -> None:
        super().__init__(error_reply(400, "ValidationException", "no reply scripted"))


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message: string headers (type 7) and a payload, with both CRCs."""
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        encoded += struct.pack("!B", len(raw_name)) + raw_name
        encoded += struct.pack("!BH", 7, len(raw_value)) + raw_value
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack("!I", zlib.crc32(message))


def event(kind: str, payload: Mapping[str, Any]) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return encode_message(headers, json.dumps(payload).encode())


def exception(kind: str, message: str) -> bytes:
    headers = {
        ":exception-type": kind,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())


def text_block(index: int, *tokens: str) -> list[bytes]:
    deltas = [
        event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": t}})
        for t in tokens
    ]
    return [*deltas, event("contentBlockStop", {"contentBlockIndex": index})]


def tool_block(index: int, tool_id: str, name: str, fragments: Iterable[str]) -> list[bytes]:
    start = event(
        "contentBlockStart",
        {"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": tool_id, "name": name}}},
    )
    deltas = [
        event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": f}}})
        for f in fragments
    ]
    return [start, *deltas, event("contentBlockStop", {"contentBlockIndex": index})]


def ending(stop: str = "end_turn", usage: tuple[int, int] = (9, 3), cached: int = 0) -> list[bytes]:
    metadata = {
        "usage": {
            "inputTokens": usage[0],
            "outputTokens": usage[1],
            "totalTokens": sum(usage),
            "cacheReadInputTokens": cached,
        },
        "metrics": {"latencyMs": 5},
    }
    return [event("messageStop", {"stopReason": stop}), event("metadata", metadata)]


def stream_reply(frames: Iterable[bytes], *, delay: float = 0.0, end: Ending = "close") -> Reply:
    return Reply(events=tuple(frames), delay=delay, ending=end, content_type=CONTENT_TYPE)


def text_reply(*tokens: str, reasoning: Iterable[str] = ()) -> Reply:
    frames = [event("messageStart", {"role": "assistant"})]
    frames += [
        event(
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": r}}},
        )
        for r in reasoning
    ]
    frames += text_block(1 if reasoning else 0, *tokens)
    return stream_reply([*frames, *ending()])


def error_reply(status: int, kind: str, message: str) -> Reply:
    return Reply(
        status=status,
        body={"message": message},
        headers=(("x-amzn-errortype", f"{kind}:http://internal.amazon.com/coral/"),),
    )


def signature_matches(
    record: Recorded, url: str, credentials: ReadOnlyCredentials, region: str
) -> bool:
    """Whether ``record`` carries a valid SigV4 signature for ``credentials``."""
    authorization = record.headers["authorization"]
    fields = dict(part.strip().split("=", 1) for part in authorization.split(" ", 1)[1].split(","))
    signed = fields["SignedHeaders"].split(";")
    headers = {name: record.headers[name] for name in signed}
    request = AWSRequest(method=record.method, url=url, data=record.body, headers=headers)
    request.context["timestamp"] = record.headers["x-amz-date"]
    auth = SigV4Auth(credentials, "bedrock", region)
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    scope = (
        f"{credentials.access_key}/{record.headers['x-amz-date'][:8]}/{region}/bedrock/aws4_request"
    )
    return fields["Credential"] == scope and fields["Signature"] == expected


def context_overflow_reply() -> Reply:
    """Bedrock's (Converse) refusal of a prompt longer than the model's window (HTTP 400)."""
    return error_reply(400, "ValidationException", "Input is too long for requested model.")
