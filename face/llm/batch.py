"""The OpenAI Batch API as the innermost layer of the stack (`llm.batch=true`).

`BatchTransport.chat(req)` takes the place of one HTTP request: the request's body becomes one
line of a JSONL file, and every line collected while the caller is still planning (the pieces of a
`run_batch`, gathered until `llm.batch_collect_s` pass without a new one, at most
`llm.batch_max_requests` a file) goes to the endpoint as one batch job:

    upload the JSONL (files, purpose "batch") -> create the batch -> poll it every llm.batch_poll_s
    -> download its output (and error) file -> each line answers the caller waiting for it

A line's `custom_id` is the cache key of its first sample (`<key>` for one sample, `<key>+<n>` for
n samples of one line), so its answer lands in the same per-sample cache as an HTTP answer would,
and a finished run is replayed from the cache with no request. Each batch is written down in
`<cache_dir>/batches/<batch id>.json` (its custom_ids) before it is polled: a run killed while
its batch is in flight finds the batch there on the next start and waits for it instead of sending
the lines again; a batch's output, once downloaded, is kept beside it and serves any of its lines
that the cache does not hold yet. Prices: the layers above charge `llm.batch_price_factor` of the
list prices (OpenAI bills batches at half price), in estimates and dry runs too.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from face.files import atomic_write_text

from .base import ChatRequest, ChatResult, LLMCallError
from .transport import OpenAITransport, completion_result

log = logging.getLogger("face.llm")

ENDPOINT = "/v1/chat/completions"
FINAL = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass(kw_only=True)
class Job:
    """One submitted batch; its fields but `answers` are its journal file (in this order)."""

    id: str
    input_file_id: str
    status: str  # the endpoint's status once polled; "downloaded" when its output is kept; "lost"
    created: float
    output_file_id: str | None = None
    error_file_id: str | None = None
    custom_ids: list[str]
    answers: dict[str, dict] = field(default_factory=dict, repr=False)  # custom_id -> output line (downloaded)


def answered(line: dict) -> bool:
    resp = line.get("response") or {}
    return not line.get("error") and resp.get("status_code") == 200 and isinstance(resp.get("body"), dict)


def line_result(req: ChatRequest, line: dict, batch_id: str) -> ChatResult:
    """The answer of one output (or error) line, or LLMCallError saying why there is none."""
    resp = line.get("response") or {}
    body = resp.get("body")
    if not answered(line) or not isinstance(body, dict):  # (answered: the body is a dict)
        why = line.get("error") or (body.get("error", body) if isinstance(body, dict) else body)
        raise LLMCallError(f"batch {batch_id}: line {line.get('custom_id', '?')[:16]}... failed "
                           f"(status {resp.get('status_code')}): {str(why)[:300]}")
    return completion_result(req, body)


class BatchTransport:
    """Same `chat(req)` as OpenAITransport, answered through batch jobs (see the module docstring)."""

    def __init__(self, cfg: Any, base_url: str, model: str, folder: str | os.PathLike,
                 key_for: Callable[[ChatRequest, int], str]):
        self.cfg = cfg
        self.http = OpenAITransport(cfg, base_url, model)  # request bodies and the SDK client
        self.key_for = key_for  # the cache's key function (face.llm.cache.request_key, bound)
        # the journal, `<cache_dir>/batches/`: one JSON file per submitted batch, plus its downloaded output lines
        self.folder = Path(folder)
        self.owner: dict[str, Job] = {}  # custom_id -> the newest batch that carries it
        for path in sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime):
            try:
                job = Job(**json.loads(path.read_text(encoding="utf-8")))
                self.owner.update(dict.fromkeys(job.custom_ids, job))
            except (OSError, ValueError, TypeError) as e:
                log.warning("ignoring unreadable batch journal %s: %s", path, e)
        self._pending: dict[str, dict] = {}  # custom_id -> request body of the next job
        self._waiting: dict[str, list[tuple[ChatRequest, asyncio.Future]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._watchers: dict[str, asyncio.Task] = {}

    # ---- the layer ------------------------------------------------------
    async def chat(self, req: ChatRequest) -> ChatResult:
        key = self.key_for(req, req.first_sample)
        cid = key if req.n == 1 else f"{key}+{req.n}"  # the line's custom_id (the module doc)
        owner = self.owner.get(cid)
        if owner is not None and (line := self._answers(owner).get(cid)) is not None:  # (a downloaded job's)
            return line_result(req, line, owner.id)
        fut = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(cid, []).append((req, fut))
        if owner is not None and owner.status not in ("downloaded", "lost"):
            self._watch(owner)  # sent by an earlier run that did not see it finish: wait for it
        else:
            self._enqueue(cid, req)
        return await fut

    def _enqueue(self, cid: str, req: ChatRequest) -> None:
        """A line for the next job (once per custom_id), sent when no new one came for batch_collect_s."""
        if cid in self._pending:
            return
        self._pending[cid] = self.http.body(req)
        if self._timer is not None:
            self._timer.cancel()
        if len(self._pending) >= self.cfg.batch_max_requests:
            self._flush()
        else:
            self._timer = asyncio.get_running_loop().call_later(self.cfg.batch_collect_s, self._flush)

    def _flush(self) -> None:
        self._timer = None
        pending, self._pending = self._pending, {}  # (never empty: a line came since the last flush)
        asyncio.get_running_loop().create_task(self._submit(pending))

    # ---- one batch --------------------------------------------------------
    async def _submit(self, pending: dict[str, dict]) -> None:
        data = "".join(json.dumps({"custom_id": cid, "method": "POST", "url": ENDPOINT, "body": body}) + "\n"
                       for cid, body in pending.items()).encode()
        api = self.http._api()
        try:
            f = await api.files.create(file=(f"face-{int(time.time())}.jsonl", data, "application/jsonl"),
                                       purpose="batch")
            b = await api.batches.create(input_file_id=f.id, endpoint=ENDPOINT,
                                         completion_window=self.cfg.batch_window,
                                         metadata={"created_by": "face", "lines": str(len(pending))})
        except Exception as e:
            self._fail(list(pending), f"could not submit a batch of {len(pending)} lines to {self.http.base_url}: "
                                      f"{type(e).__name__}: {str(e)[:300]}")
            return
        job = Job(id=b.id, input_file_id=f.id, status=b.status or "validating", created=time.time(),
                  custom_ids=list(pending))
        self.owner.update(dict.fromkeys(job.custom_ids, job))
        self._save(job)
        log.info("batch %s submitted: %d lines (%.1f MB); polling every %gs (window %s)", b.id, len(pending),
                 len(data) / 1e6, self.cfg.batch_poll_s, self.cfg.batch_window)
        self._watch(job)

    def _watch(self, job: Job) -> None:
        task = self._watchers.get(job.id)
        if task is None or task.done():
            self._watchers[job.id] = asyncio.get_running_loop().create_task(self._poll(job))

    async def _poll(self, job: Job) -> None:
        """Poll the job until it ends, then answer its lines. A job the endpoint does not know is lost (its lines
        sent again); polling that fails for good fails its lines."""
        api = self.http._api()
        last, errors = None, 0
        while True:
            try:
                b = await api.batches.retrieve(job.id)
            except Exception as e:
                if getattr(e, "status_code", None) == 404:  # not this account's, or deleted: send its lines again
                    self._lost(job)
                    return
                errors += 1
                if errors > self.cfg.max_retries:
                    self._fail(job.custom_ids, f"batch {job.id}: polling failed {errors} times: "
                                               f"{type(e).__name__}: {str(e)[:300]} (rerun to resume it)")
                    return
            else:
                errors, counts = 0, b.request_counts
                state = (b.status, getattr(counts, "completed", None), getattr(counts, "failed", None))
                if state != last:
                    log.info("batch %s: %s (%s of %s lines done, %s failed)", job.id, b.status,
                             *(getattr(counts, k, "?") for k in ("completed", "total", "failed")))
                last = state
                if b.status in FINAL:
                    break
            await asyncio.sleep(self.cfg.batch_poll_s)
        await self._answer(api, job, b)

    async def _answer(self, api: Any, job: Job, b: Any) -> None:
        """Fetch the ended job's output and error files, keep them, answer its lines."""
        job.status, job.output_file_id, job.error_file_id = b.status, b.output_file_id, b.error_file_id
        try:
            lines = []
            for fid in (b.output_file_id, b.error_file_id):
                if fid:
                    raw = (await api.files.content(fid)).content
                    lines += [json.loads(x) for x in raw.decode("utf-8").splitlines() if x.strip()]
        except Exception as e:
            self._save(job)
            self._fail(job.custom_ids, f"batch {job.id} ({b.status}): could not download its results: "
                                       f"{type(e).__name__}: {str(e)[:300]} (rerun to resume it)")
            return
        self._keep_output(job, lines)
        every = {x["custom_id"]: x for x in lines if "custom_id" in x}
        reason = "; ".join(str(getattr(e, "message", e)) for e in (getattr(b.errors, "data", None) or [])[:3])
        for cid in job.custom_ids:
            line = every.get(cid)
            for req, fut in self._waiting.pop(cid, []):
                if fut.done():
                    continue
                try:
                    if line is None:
                        raise LLMCallError(f"batch {job.id} ended {b.status} without an answer for line "
                                           f"{cid[:16]}...{': ' + reason if reason else ''}")
                    fut.set_result(line_result(req, line, job.id))
                except LLMCallError as e:
                    fut.set_exception(e)

    def _lost(self, job: Job) -> None:
        log.warning("batch %s is unknown to %s; sending its lines again", job.id, self.http.base_url)
        job.status = "lost"
        self._save(job)
        for cid in job.custom_ids:
            if self._waiting.get(cid):
                self._enqueue(cid, self._waiting[cid][0][0])

    def _fail(self, cids: list[str], message: str) -> None:
        log.error(message)
        for cid in cids:
            for _, fut in self._waiting.pop(cid, []):
                if not fut.done():
                    fut.set_exception(LLMCallError(message))

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for task in self._watchers.values():
            task.cancel()
        await self.http.aclose()

    # ---- the journal ------------------------------------------------------
    def _save(self, job: Job) -> None:
        record = {k: v for k, v in vars(job).items() if k != "answers"}
        atomic_write_text(self.folder / f"{job.id}.json", json.dumps(record))

    def _keep_output(self, job: Job, lines: list[dict]) -> None:
        """Keep the answered lines (a failed one is sent again when asked for again)."""
        kept = [x for x in lines if "custom_id" in x and answered(x)]
        atomic_write_text(self.folder / f"{job.id}.output.jsonl", "".join(json.dumps(x) + "\n" for x in kept))
        job.answers = {x["custom_id"]: x for x in kept}
        job.status = "downloaded"
        self._save(job)

    def _answers(self, job: Job) -> dict[str, dict]:
        """A downloaded job's answered lines (read from its kept output once); none for any other job."""
        if not job.answers and job.status == "downloaded":
            try:
                with open(self.folder / f"{job.id}.output.jsonl", encoding="utf-8") as f:
                    job.answers = {x["custom_id"]: x for x in map(json.loads, f) if "custom_id" in x}
            except (OSError, ValueError, KeyError) as e:
                log.warning("batch %s: kept output unreadable (%s); its lines will be sent again", job.id, e)
                job.status = "lost"
        return job.answers
