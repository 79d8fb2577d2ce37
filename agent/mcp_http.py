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
says the last one, for the hub's error line.

The GET listening stream (server-to-client messages; also the SDK's resumption of a POST's SSE
reply) is bounded over the server's whole session, not per reply: its bodies total at most
MAX_LISTEN bytes, none in a content encoding, and a GET opens at least MIN_GET_GAP after the
one before (the SDK reopens the stream whenever it ends, as soon as the server's `retry:` asks).
Past either the stream is closed and every later GET of that server is refused unsent; the SDK
gives up after two failed opens, so a refused server costs no GET more, never a storm.
`listen_why` says why, for /mcp; the server's POSTs (its calls) go on.
"""
from __future__ import annotations

import time

import httpx2

# Bytes of a server's GET bodies, in all. nanocode acts on no message of the listening stream (the
# hub lists tools once and sets no handlers), so this is headroom for a long session's pings,
# list_changed notes and log lines, while its worst case, tiny messages at ~100 us of the SDK's
# CPU each (measured: 4 MiB of them cost 4.5 s), stays under half a second.
MAX_LISTEN = 256 << 10
MIN_GET_GAP = 0.5  # seconds between two GETs' opens: the SDK waits 1 s unless the server asks for less
# What a refusal says, after the server's name: (compressed, a Content-Length over, cut), for a
# POST's reply (False) and for the listening stream (True).
REFUSALS = {
    False: ("sent its reply compressed ({encoding}) though nanocode asked for none: nanocode did not read it",
            "sent a reply of {n:,} bytes, over nanocode's limit of {limit:,}: nanocode did not read it",
            "sent a reply over nanocode's limit of {limit:,} bytes: nanocode stopped reading it there and "
            "dropped it"),
    True: ("sent its listening stream compressed ({encoding}) though nanocode asked for none: nanocode "
           "did not read it",
           "sent {n:,} bytes on its listening stream, over nanocode's limit of {limit:,} for it in all: "
           "nanocode did not read them",
           "sent over nanocode's limit of {limit:,} bytes on its listening stream in all: nanocode stopped "
           "reading it there and closed it"),
}


class ReplyRefused(httpx2.SSEError, httpx2.StreamError):
    """A reply body refused part-way. Both kinds, because the SDK's JSON reader catches a
    StreamError and its SSE reader an SSEError: either way the call fails, the session lives."""


class CappedTransport(httpx2.AsyncBaseTransport):
    """httpx2's own transport, the body of each POST's reply bounded, and the GET listening
    stream's over the session (module docstring)."""

    def __init__(self, limit: int):
        self.limit, self.refused, self.why = limit, 0, ""
        self.listened, self.listen_why, self.last_get = 0, "", float("-inf")  # GET body bytes so far
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        listening = request.method == "GET"
        if listening:
            self.admit_get()
        response = await self.inner.handle_async_request(request)
        if listening or request.method == "POST":
            response.stream = _CappedStream(response.stream, self, response.headers, listening)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()

    def admit_get(self) -> None:
        """Raise a ReplyRefused for a GET of a server refused before, or opened too soon."""
        now, last = time.monotonic(), self.last_get
        self.last_get = now
        if not self.listen_why and now - last < MIN_GET_GAP:
            self.refuse(f"made nanocode reopen its listening stream within {MIN_GET_GAP:g} s of the last "
                        "open", listening=True)
        if self.listen_why:
            raise ReplyRefused(self.listen_why)

    def refuse(self, why: str, listening: bool = False) -> ReplyRefused:
        if listening:
            self.listen_why = why
        else:
            self.refused, self.why = self.refused + 1, why
        return ReplyRefused(why)


class _CappedStream(httpx2.AsyncByteStream):
    """One reply's body: a POST's within `limit`, a GET's within what the session's listening
    has left of it."""

    def __init__(self, inner, transport: CappedTransport, headers: httpx2.Headers, listening: bool):
        self.inner, self.transport, self.headers, self.listening = inner, transport, headers, listening

    async def __aiter__(self):
        t, listening = self.transport, self.listening
        whole = MAX_LISTEN if listening else t.limit
        left = whole - t.listened if listening else whole
        compressed, declared_over, cut = REFUSALS[listening]
        encoding = self.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            raise t.refuse(compressed.format(encoding=encoding[:40]), listening)
        declared = self.headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > left:
            raise t.refuse(declared_over.format(n=int(declared), limit=whole), listening)
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if listening:
                t.listened += len(chunk)
            if seen > left:
                raise t.refuse(cut.format(limit=whole), listening)
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
