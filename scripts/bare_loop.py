"""The wire's floor for `scripts/bench_live.py --vs-wire`: a bare aiohttp loop, run as a whole process (Python's
start included), sending the HTTP bodies of a JSON file to one endpoint with at most C requests in flight, each
reply read and parsed as JSON. It imports only the standard library and aiohttp (no face, no openai).

    python scripts/bare_loop.py BASE_URL BODIES.json CONCURRENCY
"""

import asyncio
import json
import sys

import aiohttp


async def send_all(url: str, bodies: list, concurrency: int) -> int:
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(body: dict) -> int:
            async with sem, session.post(url + "/chat/completions", json=body) as r:
                return len(json.loads(await r.read())["choices"])

        return sum(await asyncio.gather(*(one(b) for b in bodies)))


def main() -> None:
    url, path, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(path, encoding="utf-8") as f:
        bodies = json.load(f)
    choices = asyncio.run(send_all(url, bodies, concurrency))
    print(f"{len(bodies)} requests, {choices} choices")


if __name__ == "__main__":
    main()
