"""The HTTP client that speaks to one streamable-HTTP MCP server (agent/mcp_hub.py), with each
reply's body bounded: the SDK reads a plain JSON reply whole (`response.aread()`), so without
this a hostile server could make nanocode hold gigabytes.

`capped_client(headers, limit)` is an httpx2.AsyncClient whose transport (`CappedTransport`)
hands the SDK the body of every reply to a POST (JSON or SSE, whatever its Content-Type, with or
without a Content-Length, chunked or not) through a stream that stops at `limit` bytes: a
Content-Length over it is refused before a byte is read, a body is read in the transport's own
chunks (64 KiB) and cut as soon as it passes the limit, and the connection is dropped. A reply
in a content encoding is refused unread (we ask for none: a 4 MB gzip bomb is gigabytes once
decoded). The refusal is a `ReplyRefused`, which the SDK turns into a failed call (its JSON and
its SSE readers catch it), so the server's other calls go on; `refused` counts them and `why`
says the last one, for the hub's error line. The GET listening stream is not cut: the SDK
bounds each of its events (max_sse_event_size) and keeps none.
"""
from __future__ import annotations

import httpx2


class ReplyRefused(httpx2.SSEError, httpx2.StreamError):
    """A reply body refused part-way. Both kinds, because the SDK's JSON reader catches a
    StreamError and its SSE reader an SSEError: either way the call fails, the session lives."""


class CappedTransport(httpx2.AsyncBaseTransport):
    """httpx2's own transport, the body of each POST's reply bounded (module docstring)."""

    def __init__(self, limit: int):
        self.limit, self.refused, self.why = limit, 0, ""
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST":
            response.stream = _CappedStream(response.stream, self, response.headers)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()

    def refuse(self, why: str) -> ReplyRefused:
        self.refused, self.why = self.refused + 1, why
        return ReplyRefused(why)


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner, transport: CappedTransport, headers: httpx2.Headers):
        self.inner, self.transport, self.headers = inner, transport, headers

    async def __aiter__(self):
        limit, refuse = self.transport.limit, self.transport.refuse
        encoding = self.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            raise refuse(f"sent its reply compressed ({encoding[:40]}) though nanocode asked for none: "
                         "nanocode did not read it")
        declared = self.headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > limit:
            raise refuse(f"sent a reply of {int(declared):,} bytes, over nanocode's limit of {limit:,}: "
                         "nanocode did not read it")
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > limit:
                raise refuse(f"sent a reply over nanocode's limit of {limit:,} bytes: nanocode "
                             "stopped reading it there and dropped it")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def capped_client(headers: dict, limit: int) -> tuple[httpx2.AsyncClient, CappedTransport]:
    """The client for one server (its configured headers; no compression asked for) and its
    transport, whose `refused`/`why` say which replies were cut."""
    transport, asked = CappedTransport(limit), httpx2.Headers(headers)
    asked["Accept-Encoding"] = "identity"
    client = httpx2.AsyncClient(headers=asked, transport=transport, timeout=httpx2.Timeout(30.0, read=300.0))
    return client, transport
