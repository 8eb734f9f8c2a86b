"""``InProcessServer``: the scripted server without a socket, for tests that do not test HTTP itself.

It answers exactly as ``ScriptedServer`` does -- the same responder, completion, usage, request log, forced and
drawn faults, rate limit, latency -- but through an HTTP client transport of this process instead of a port: the
client's ``OpenAITransport`` gets the SDK's httpx client with this transport (``http_client``), so everything
above the wire runs as in production (the openai SDK, its status errors, the retry policy, the reply decoding,
the layers of the stack). A transport fault is what the client would see over a socket: 429 / 500 / an HTML page /
a cut JSON body as replies, "timeout" as the read timeout of the client's own setting (a 504 after ``hang_s`` when
that is shorter), "reset" / "disconnect" as a connection closed without a reply. The chat endpoint and the model
list are served (a batch run needs an endpoint at ``llm.base_url``: ``ScriptedServer`` serves the Batch API).

    llm.server._target_=face.testing.scripted.InProcessServer     (the client starts and stops its own)
    with InProcessServer() as srv: ... llm.server = srv.spec() ...  (a test's own: its log, force(), responder)
"""
from __future__ import annotations

import asyncio
import itertools
import weakref
from typing import Any, Self

import httpx2

from ..service import RequestError, error_body
from .server import ScriptedServer

_NUMBER = itertools.count(1)  # each server its own URL (never resolved: no request leaves the process), so that
# what is remembered per endpoint (the probe's answer) is remembered per server, as per port over HTTP
_LIVE: weakref.WeakValueDictionary[str, InProcessServer] = weakref.WeakValueDictionary()


class InProcessServer(ScriptedServer):
    """``ScriptedServer``'s answers, served to this process's LLM client without a socket (``http_client``)."""

    def spec(self) -> dict[str, str]:
        """``llm.server`` naming this very server (started by its owner): a client built from it talks to this
        server, whose log, forced faults and responder the owner keeps."""
        _LIVE[str(id(self))] = self
        return {"_target_": f"{__name__}.attached", "key": str(id(self))}

    def start(self) -> Self:
        self.base_url = self.base_url or f"http://scripted-{next(_NUMBER)}.in-process/v1"
        return self

    def http_client(self, cfg: Any) -> Any:
        """The openai SDK's httpx client whose transport is this server (face.llm.transport.OpenAITransport)."""
        import openai

        return openai.DefaultAsyncHttpxClient(transport=httpx2.MockTransport(self.handle),
                                              timeout=getattr(cfg, "timeout_s", 60.0))

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        """One HTTP request, as the aiohttp app would answer it."""
        path = request.url.path
        if request.method == "GET" and path.endswith("/models"):
            return httpx2.Response(200, json={"object": "list", "data": [
                {"id": self.model, "object": "model", "owned_by": "scripted"}]})
        read_timeout = (request.extensions.get("timeout") or {}).get("read")

        async def wait(seconds: float) -> None:
            """Sleep ``seconds``, or until the client's read timeout, which then fires as it would over a socket."""
            if read_timeout is not None and seconds >= read_timeout:
                await asyncio.sleep(read_timeout)
                raise httpx2.ReadTimeout("timed out (in-process scripted server)", request=request)
            await asyncio.sleep(seconds)

        def disconnect() -> None:
            raise httpx2.RemoteProtocolError("Server disconnected without sending a response.", request=request)

        try:
            if request.method != "POST" or not path.endswith("/chat/completions"):
                raise RequestError("not_found", f"no such endpoint: {request.method} {path}", status=404)
            status, content, ctype, headers = await self._reply(
                request.content, request.headers.get("Authorization", ""), wait, disconnect)
        except RequestError as e:
            return httpx2.Response(e.status, json=error_body("scripted server: " + str(e), e.code, status=e.status))
        return httpx2.Response(status, content=content, headers={"Content-Type": ctype, **headers})


def attached(key: str) -> InProcessServer:
    """The live server a ``spec()`` names (the client's stop leaves it as it is: it has no socket, no thread)."""
    try:
        return _LIVE[key]
    except KeyError:
        raise ValueError(f"no live in-process scripted server {key!r} (its owner has let it go)") from None

