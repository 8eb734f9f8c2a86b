"""The OpenAI Batch API, emulated by the scripted server: ``POST /v1/files``, ``GET /v1/files/{id}/content``,
``POST /v1/batches``, ``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``.

A batch's lines are answered as the same chat requests would be (``answer(body)``); ``gate`` (a
threading.Event) holds every batch in progress while clear; custom_ids in ``fail_ids`` get an error line; with
``expire_after`` = k a batch answers its first k lines and expires. ``polls`` counts the status requests."""
from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable

from aiohttp import web

from ..service import RequestError, parse_json

CHAT = "/v1/chat/completions"


class BatchAPI:
    def __init__(self, answer: Callable[[dict], dict]):
        self.answer = answer
        self.gate = threading.Event()
        self.gate.set()
        self.fail_ids: set[str] = set()
        self.expire_after: int | None = None
        self.files: dict[str, tuple[str, bytes]] = {}  # id -> (purpose, content)
        self.jobs: dict[str, dict] = {}  # id -> the batch object
        self.polls = 0
        self._ids = itertools.count(1)  # the numbers of files and batches, one sequence

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/files", self._upload)
        app.router.add_get("/v1/files/{id}/content", self._file_content)
        app.router.add_post("/v1/batches", self._create)
        app.router.add_get("/v1/batches/{id}", self._get)
        app.router.add_post("/v1/batches/{id}/cancel", self._cancel)

    async def _upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload, purpose = form.get("file"), str(form.get("purpose", ""))
        if not isinstance(upload, web.FileField):
            raise RequestError("no_file", "no file")
        data = upload.file.read()
        fid = f"file-{next(self._ids):06d}"
        self.files[fid] = (purpose, data)
        return web.json_response({"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                                  "filename": upload.filename, "purpose": purpose, "status": "processed"})

    async def _file_content(self, request: web.Request) -> web.Response:
        f = self.files.get(request.match_info["id"])
        if f is None:
            raise RequestError("not_found", "no such file", status=404)
        return web.Response(body=f[1], content_type="application/octet-stream")

    async def _create(self, request: web.Request) -> web.Response:
        req = parse_json(await request.read())
        f = self.files.get(req.get("input_file_id", "")) if isinstance(req, dict) else None
        if f is None or f[0] != "batch":
            raise RequestError("invalid_value", "input_file_id: no such batch file", param="input_file_id")
        lines = [json.loads(x) for x in f[1].decode("utf-8").splitlines() if x.strip()]
        batch = {"id": f"batch-{next(self._ids):06d}", "object": "batch", "endpoint": req.get("endpoint"),
                 "errors": _line_errors(req.get("endpoint"), lines), "input_file_id": req["input_file_id"],
                 "completion_window": req.get("completion_window"), "status": "validating",
                 "output_file_id": None, "error_file_id": None, "created_at": int(time.time()),
                 "metadata": req.get("metadata"), "request_counts": {"total": len(lines), "completed": 0, "failed": 0}}
        self.jobs[batch["id"]] = batch
        if batch["errors"] is not None:
            batch["status"] = "failed"
        else:
            asyncio.get_running_loop().create_task(self._run(batch, lines))
        return web.json_response(batch)

    async def _run(self, batch: dict, lines: list[dict]) -> None:
        batch["status"] = "in_progress"
        while not self.gate.is_set() and batch["status"] == "in_progress":
            await asyncio.sleep(0.01)
        out: list[dict] = []
        err: list[dict] = []
        for i, x in enumerate(lines):
            if batch["status"] != "in_progress" or (self.expire_after is not None and i >= self.expire_after):
                break
            failed = x["custom_id"] in self.fail_ids
            body = {"error": {"message": "scripted failure"}} if failed else self.answer(x["body"])
            (err if failed else out).append({"id": f"req-{i}", "custom_id": x["custom_id"], "error": None,
                                             "response": {"status_code": 500 if failed else 200, "body": body}})
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                fid = f"file-{next(self._ids):06d}"
                self.files[fid] = ("batch_output", "".join(json.dumps(r) + "\n" for r in rows).encode())
                batch[name] = fid
        batch["request_counts"].update(completed=len(out), failed=len(err))
        batch["status"] = ("cancelled" if batch["status"] != "in_progress" else "completed"
                           if len(out) + len(err) == len(lines) else "expired")

    def _job(self, request: web.Request) -> dict:
        batch = self.jobs.get(request.match_info["id"])
        if batch is None:
            raise RequestError("not_found", "no such batch", status=404)
        return batch

    async def _get(self, request: web.Request) -> web.Response:
        self.polls += 1
        return web.json_response(self._job(request))

    async def _cancel(self, request: web.Request) -> web.Response:
        batch = self._job(request)
        if batch["status"] in ("validating", "in_progress"):
            batch["status"] = "cancelling"
        return web.json_response(batch)


def _line_errors(endpoint: str | None, lines: list[dict]) -> dict | None:
    """The Batch API's errors object of a batch whose lines are not all valid chat requests (None: they are)."""
    ids = [x.get("custom_id") for x in lines]
    bad = [i for i, x in enumerate(lines) if x.get("method") != "POST" or x.get("url") != endpoint
           or x.get("url") != CHAT]
    if len(set(ids)) == len(ids) and None not in ids and not bad:
        return None
    return {"object": "list", "data": [{"code": "invalid_request", "line": bad[0] if bad else None,
                                        "message": "duplicate or missing custom_id, or bad url"}]}

