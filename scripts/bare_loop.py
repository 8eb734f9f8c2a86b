"""The wire's floor for `scripts/bench_live.py --vs-wire`: a bare loop, run as a whole process (Python's start
included), sending the HTTP bodies of a JSON file to one endpoint with at most C requests in flight, each reply
read and parsed as JSON.

    python scripts/bare_loop.py BASE_URL BODIES.json CONCURRENCY          # aiohttp alone: the wire's floor
    python scripts/bare_loop.py BASE_URL BODIES.json CONCURRENCY --sdk    # the same through the openai SDK

Without `--sdk` it imports only the standard library and aiohttp (no face, no openai). With `--sdk` every request
goes through `openai.AsyncOpenAI` on the SDK's aiohttp transport (`openai.DefaultAioHttpClient`), posted as
face's own transport posts it (`client.post("/chat/completions", cast_to=bytes, body=...)`, no retries): the floor
of any client that, like face, sends every LLM call through the openai client.
"""

import asyncio
import json
import sys

import aiohttp


async def send_all(post, bodies: list, concurrency: int) -> int:
    """Every body through ``post(body) -> reply bytes``, at most ``concurrency`` in flight: the choices returned."""
    sem = asyncio.Semaphore(concurrency)

    async def one(body: dict) -> int:
        async with sem:
            return len(json.loads(await post(body))["choices"])

    return sum(await asyncio.gather(*(one(b) for b in bodies)))


async def through_aiohttp(url: str, bodies: list, concurrency: int) -> int:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def post(body: dict) -> bytes:
            async with session.post(url + "/chat/completions", json=body) as r:
                return await r.read()

        return await send_all(post, bodies, concurrency)


async def through_sdk(url: str, bodies: list, concurrency: int) -> int:
    import openai

    async with openai.AsyncOpenAI(base_url=url, api_key="bare-loop", max_retries=0,
                                  http_client=openai.DefaultAioHttpClient()) as client:

        async def post(body: dict) -> bytes:
            return await client.post("/chat/completions", cast_to=bytes, body=body)

        return await send_all(post, bodies, concurrency)


def main() -> None:
    url, path, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sdk = sys.argv[4:] == ["--sdk"]
    with open(path, encoding="utf-8") as f:
        bodies = json.load(f)
    choices = asyncio.run((through_sdk if sdk else through_aiohttp)(url, bodies, concurrency))
    print(f"{len(bodies)} requests, {choices} choices")


if __name__ == "__main__":
    main()
