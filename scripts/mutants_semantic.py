"""Hand-written *semantic* mutants for scripts/mutation.py: changes of meaning that no operator flip makes -- a wrong
multiplier, a wrong unit, the last value for the largest, a boundary of a redraw rule, the resampling unit.

Each entry is (module under face/, the exact source text to replace, its replacement, what the mutant means). The
text must occur exactly once in the module: an entry whose text no longer occurs once is *stale* (the module changed
since it was written) and is reported as such by scripts/mutation.py, never silently skipped.
"""

from __future__ import annotations

from typing import NamedTuple


class Semantic(NamedTuple):
    module: str
    old: str
    new: str
    meaning: str


SEMANTIC: tuple[Semantic, ...] = (
    # ---- face/llm/sizes.py: the request arithmetic
    Semantic("llm/sizes", "int(max_tokens) * int(n))", "int(max_tokens))",
             "a worst case reserved for one sample of an n-sample request"),
    Semantic("llm/sizes", "return -(-int(samples) // max(1, int(n_per_request)))",
             "return int(samples) // max(1, int(n_per_request))", "HTTP requests rounded down, not up"),
    Semantic("llm/sizes", "return input_tokens * price_in / 1e6 + output_tokens * price_out / 1e6",
             "return input_tokens * price_out / 1e6 + output_tokens * price_in / 1e6",
             "input and output prices swapped"),
    Semantic("llm/sizes", "return input_tokens * price_in / 1e6 + output_tokens * price_out / 1e6",
             "return input_tokens * price_in / 1e3 + output_tokens * price_out / 1e3",
             "prices read per thousand tokens, not per million (wrong unit)"),
    Semantic("llm/sizes", "return math.ceil(text_chars / CHARS_PER_TOKEN)", "return text_chars",
             "characters counted as tokens (wrong unit)"),
    Semantic("llm/sizes", "requests * per, input_tokens * per,", "requests * per, input_tokens * samples,",
             "the prompt counted once per sample, not once per HTTP request"),
    Semantic("llm/sizes", "requests * per, input_tokens * per,", "requests * per, input_tokens,",
             "the prompt counted once per LM request, not once per HTTP request"),
    Semantic("llm/sizes", "return Size(requests, requests * samples,", "return Size(requests, samples,",
             "the samples of one request, not of all of them"),
    Semantic("llm/sizes", "requests * samples * answer_tokens)", "requests * answer_tokens)",
             "one answer's tokens per request, not per sample (5x too low at n = 5)"),
    Semantic("llm/sizes", "size += len(json.dumps(response_format, ensure_ascii=False).encode(\"utf-8\"))",
             "size += 0", "the response format left out of the input bound"),
    Semantic("llm/sizes", "len(role.encode(\"utf-8\")) + len(content.encode(\"utf-8\")) + MESSAGE_OVERHEAD",
             "len(role) + len(content) + MESSAGE_OVERHEAD",
             "characters, not UTF-8 bytes, in the input bound (too low for non-ASCII text)"),
    Semantic("llm/sizes", "return Bound(input_bound(messages, response_format), int(max_tokens) * int(n))",
             "return Bound(input_bound(messages), int(max_tokens) * int(n))",
             "the bound of a request leaves its response format out"),
    Semantic("llm/sizes", "return Size(*(round(getattr(self, f.name) * factor) for f in fields(self)))",
             "return Size(*(int(getattr(self, f.name) * factor) for f in fields(self)))",
             "scaled counts truncated, not rounded"),
    # ---- face/pipeline/estimate.py: the cost estimate
    Semantic("pipeline/estimate", "size = planned(spec.samples, pricing.n_per_request",
             "size = planned(1, pricing.n_per_request", "the n samples of a scoring request counted as one "
             "(an estimate 5x too low at n = 5)"),
    Semantic("pipeline/estimate", "return cls(llm.n_per_request, *llm.prices)",
             "return cls(llm.n_per_request, *reversed(llm.prices))", "input and output prices swapped"),
    Semantic("pipeline/estimate", "return cls(llm.n_per_request, *llm.prices)",
             "return cls(1, *llm.prices)", "n_per_request ignored: one sample per HTTP request"),
    Semantic("pipeline/estimate", "requests=len(units) * len(instructions))", "requests=len(units))",
             "one request per unit, not per unit x instruction"),
    Semantic("pipeline/estimate", "one_each = base * len(instructions) + instr_tokens * len(units)",
             "one_each = base * len(instructions) + instr_tokens",
             "each instruction's tokens counted once, not once per unit"),
    Semantic("pipeline/estimate", "planned_request(decompose_messages(c, t, assistant, reasoning), k,",
             "planned_request(decompose_messages(c, t, assistant, reasoning), 1,",
             "the k decomposition samples of a turn counted as one"),
    Semantic("pipeline/estimate", "turns = df[\"assistant_turns\"].max()",
             "turns = df[\"assistant_turns\"].iloc[-1]", "the total's turns: the last stage's, not the largest"),
    Semantic("pipeline/estimate", "rates.iloc[0] if len(rates) and rates.nunique() == 1 else None",
             "rates.iloc[-1] if len(rates) else None",
             "the total states the last assumed rate even where the stages assumed different ones"),
    Semantic("pipeline/estimate", "return sum(len(d.particles) for d in decomps.values()) / max(len(decomps), 1)",
             "return max(len(d.particles) for d in decomps.values())",
             "the particle rate: the largest turn's count, not the mean"),
    Semantic("pipeline/estimate", "stage.cost_usd * factor,", "stage.cost_usd,",
             "a scaled stage keeps the unscaled cost"),
    Semantic("pipeline/estimate", "round(stage.units * factor)", "stage.units",
             "a scaled stage keeps the unscaled units"),
    # ---- face/llm/usage.py: caps, reservations, totals
    Semantic("llm/usage", "return cost_usd(input_tokens, output_tokens, self.price_input_per_mtok, "
             "self.price_output_per_mtok)",
             "return cost_usd(input_tokens, output_tokens, self.price_output_per_mtok, "
             "self.price_input_per_mtok)", "every cost (worst case, spend, estimate) priced with input and output "
             "prices swapped"),
    Semantic("llm/usage", "if self.max_calls is not None and self.http_requests + 1 > self.max_calls:",
             "if self.max_calls is not None and self.http_requests > self.max_calls:",
             "llm.max_calls lets one HTTP request more through (a boundary of the cap)"),
    Semantic("llm/usage", "if self.max_cost_usd is not None and self.spent_usd + self.reserved_usd + worst > "
             "self.max_cost_usd:",
             "if self.max_cost_usd is not None and self.spent_usd + worst > self.max_cost_usd:",
             "the cost cap ignores what is in flight (concurrent requests can jointly overshoot)"),
    Semantic("llm/usage", "self.samples += piece.n", "self.samples += 1",
             "samples counted as HTTP requests (wrong unit)"),
    Semantic("llm/usage", "tin, tout = b.input_tokens if tin is None else tin,",
             "tin, tout = piece.est_input_tokens if tin is None else tin,",
             "an unreported request charged at its estimate, not its bound"),
    Semantic("llm/usage", "b.output_tokens if tout is None else tout", "piece.max_tokens if tout is None else tout",
             "an unreported request's output charged for one sample, not for its n"),
    Semantic("llm/sizes", "(None, None) if got == [0, 0] else", "(None, None) if got[0] == 0 else",
             "a request reporting output tokens but no input tokens taken as unreported"),
    Semantic("llm/usage", "self.spent_usd += c", "self.spent_usd += reserved",
             "the spend is the reserved bound, not the reported cost"),
    Semantic("llm/usage", "elif tin > b.input_tokens or tout > b.output_tokens:",
             "elif tin > b.input_tokens:", "an output report above the bound not taken as a misreport"),
    Semantic("llm/usage", "self.reserved_usd = max(0.0, self.reserved_usd - reserved) if self.requests_in_flight "
             "else 0.0", "self.reserved_usd = self.reserved_usd - reserved",
             "a reservation given back without clearing the residue when nothing is in flight"),
    Semantic("llm/usage", "self.cache_hits += res.cached_samples", "self.cache_hits += res.request.n",
             "every sample of a request counted as a cache hit"),
    Semantic("llm/usage", "self.est_output_tokens += piece.bound.output_tokens\n"
             "        self.est_cost_usd += self.cost(piece.est_input_tokens, piece.bound.output_tokens)",
             "self.est_output_tokens += piece.max_tokens\n"
             "        self.est_cost_usd += self.cost(piece.est_input_tokens, piece.max_tokens)",
             "a dry run's output estimate for one sample of an n-sample request"),
    Semantic("llm/usage", "and self.spent_usd + worst <= self.max_cost_usd)",
             "and self.spent_usd + worst < self.max_cost_usd)",
             "a request that fits the cap exactly once settled is refused instead of waiting"),
    Semantic("llm/usage", "t[\"cache_hits\"] += res.cached_samples",
             "t[\"cache_hits\"] += res.cached_samples\n        t[\"samples\"] += rec[\"n\"] - rec[\"samples\"]",
             "a tag's samples: the requested n, not the samples drawn over HTTP"),
    # ---- face/llm/budget.py: the layer that sends
    Semantic("llm/budget", "if req.n <= self.cfg.n_per_request:", "if req.n <= self.cfg.n_per_request + 1:",
             "a request one sample over n_per_request sent as one HTTP request"),
    Semantic("llm/budget", "tin, tout = piece.est_input_tokens, piece.bound.output_tokens",
             "tin, tout = piece.est_input_tokens, piece.max_tokens",
             "a dry run priced for one sample of an n-sample request"),
    Semantic("llm/budget", "cost_usd=self.usage.cost(tin, tout))", "cost_usd=self.usage.cost(tout, tin))",
             "a dry run priced with input and output prices swapped"),
    Semantic("llm/usage", "\"samples\": res.http_samples}", "\"samples\": res.request.n}",
             "a request's samples: the requested n, cache hits included, not those drawn over HTTP"),
    Semantic("llm/usage", "{'budget: ' if isinstance(error, BudgetExceeded) else ''}",
             "{'' if isinstance(error, BudgetExceeded) else ''}",
             "a budget stop recorded as a failure"),
    # ---- face/llm/cache.py: what is stored and served
    Semantic("llm/cache", "for s in res.samples if not s.dry_run)", "for s in res.samples)",
             "dry-run placeholders stored in the cache"),
    Semantic("llm/cache", "        p[\"invalid\"] = s.error  # never served as a valid sample",
             "        pass", "an invalid draw stored as a valid sample"),
    Semantic("llm/cache", "return validate(Completion(p[\"text\"], p[\"finish_reason\"], "
             "_lp_from_json(p.get(\"logprobs\")), cached=True,\n                                   sample_index=i, "
             "error=p.get(\"invalid\")), req.adapter)",
             "return validate(Completion(p[\"text\"], p[\"finish_reason\"], _lp_from_json(p.get(\"logprobs\")), "
             "cached=True,\n                                   sample_index=i, error=None), req.adapter)",
             "a sample stored marked invalid served as valid"),
    Semantic("llm/cache", "out.append(ChatResult(request=req, samples=samples, cached_samples=req.n))",
             "out.append(ChatResult(request=req, samples=samples, cached_samples=0))",
             "samples served by the read-ahead not counted as cache hits"),
    Semantic("llm/cache", "h.update(str(int(i)).encode() + tail)", "h.update(str(int(i) + 1).encode() + tail)",
             "the read-ahead's keys shifted by one sample from the request's own"),
    Semantic("llm/cache", "\"seed\": cfg.seed, \"sample_index\": _INDEX_MARK}", "\"sample_index\": _INDEX_MARK}",
             "the seed left out of the cache key"),
    Semantic("llm/cache", "for r in runs(mine, self.cfg.n_per_request)]", "for r in runs(missing, "
             "self.cfg.n_per_request)]", "samples another process is sending sent again"),
    Semantic("llm/cache", "\"seed\": cfg.seed, \"sample_index\": _INDEX_MARK}",
             "\"seed\": 0, \"sample_index\": _INDEX_MARK}", "the keys those of seed 0 whatever the seed"),
    Semantic("llm/cache", "its claims given back\n            self.store.release(keys.values())\n",
             "its claims given back\n            pass\n",
             "a failed or cancelled request keeps its claims (other processes wait for them until it ends)"),
    Semantic("llm/cache", "got.update((i, self._sample(claimed.found[keys[i]], i, req)) for i in missing if keys[i] in "
             "claimed.found)", "pass", "a sample another process answered since the read-ahead dropped"),
    # ---- face/llm/claims.py: no sample paid twice across processes
    Semantic("llm/claims", "STALE_S = 30.0", "STALE_S = 0.3",
             "a claim expiring 0.3 s after its last beat (a live owner's samples sent again)"),
    Semantic("llm/claims", "    if host != socket.gethostname():\n        return True\n", "",
             "another host's pid looked up on this host"),
    Semantic("llm/claims", "conn.execute(\"UPDATE claims SET beat = ? WHERE owner = ?\", (now, self.owner))", "pass",
             "the heartbeat never refreshed"),
    Semantic("llm/claims", "asyncio.get_running_loop().call_later(BEAT_S, tick)", "pass",
             "no heartbeat while nothing else commits"),
    Semantic("llm/claims", "conn.executemany(\"DELETE FROM claims WHERE key = ? AND owner = ?\", dead)", "pass",
             "a gone owner's claim reported free but never deleted (the waiter waits for it again, for ever)"),
    Semantic("llm/claims", " or now - seen[k][1] > STALE_S]", "]",
             "a beat that never changes trusted (a beat in the future blocks a run for ever)"),
    Semantic("llm/claims", "if seen.get(k, (None,))[0] != (o, beat):", "if k not in seen:",
             "the waiter's watch not restarted when the owner beats (a live owner's claims taken over)"),
    Semantic("llm/claims", "out.found.update(conn.execute(", "out.theirs.update(k for k, _ in conn.execute(",
             "a sample answered since the read-ahead waited for as if another process were sending it"),
    Semantic("llm/claims", "self._released.update(k for k in keys if k in self.held)", "pass",
             "claims never given back (answered or not)"),
    # ---- face/llm/stream.py: the one batch driver
    Semantic("llm/stream", "if isinstance(e, LLMRequestRefused) or on_error == \"raise\":",
             "if on_error == \"raise\":",
             "a refused request under on_error='return' returned as a failure, the batch going on"),
    Semantic("llm/stream", "window = max(WINDOW, 4 * int(client.cfg.concurrency))", "window = WINDOW",
             "the window ignores llm.concurrency"),
    Semantic("llm/stream", "got: Any = shared.get(req) or hit", "got: Any = hit",
             "identical requests in flight each sent"),
    Semantic("llm/stream", "done += len(settled) - (len(errors) - 1)", "done += 0",
             "the requests that completed after the first failure not counted in the stop line"),
    Semantic("llm/stream", "budget = [x for x in errors if isinstance(x, BudgetExceeded)]",
             "budget = [x for x in errors[:1] if isinstance(x, BudgetExceeded)]",
             "a budget stop of a request in flight reported as a plain failure"),
    Semantic("llm/stream", "            got.cancel()\n", "            pass\n",
             "requests in flight not cancelled when the consumer stops early"),
    # ---- face/pipeline/scoring.py: what a score record counts
    Semantic("pipeline/scoring", "usage.note_scores(tag, defaulted=rec.n_defaulted,",
             "usage.note_scores(tag, defaulted=0,", "samples scored as the lowest not counted"),
    Semantic("pipeline/scoring", "logprob_fallbacks=int(rec.fallback is not None and \"logprobs\" in rec.fallback))",
             "logprob_fallbacks=int(rec.fallback is not None))",
             "every fallback counted as an answer scored without its logprobs"),
    Semantic("pipeline/scoring", "if not res.counted:", "if True:",
             "identical requests' answer counts go in once per record, not once per request"),
    Semantic("pipeline/scoring", "n_retried=max(0, len(samples) - spec.samples)",
             "n_retried=max(0, len(samples) - spec.n)",
             "redraws counted beyond n, not beyond the answers the estimator wants (logprobs: 1)"),
    # ---- face/llm/validating.py (+ face/llm/base.py's policy): the one draw-until-valid loop
    Semantic("llm/validating", "room = policy.room(req.n - sum(s.error is None for s in draws), len(draws) - req.n)",
             "room = policy.room(req.n - 1 - sum(s.error is None for s in draws), len(draws) - req.n)",
             "one invalid sample out of n never redrawn"),
    Semantic("llm/validating", "ask = replace(req, n=room, first_sample=req.first_sample + len(draws))",
             "ask = replace(req, n=room, first_sample=req.first_sample + len(draws) - 1)",
             "a redraw reuses the last index drawn (the cache hands back the same invalid text)"),
    Semantic("llm/validating", "for _ in range(policy.rounds):", "for _ in range(policy.rounds - 1):",
             "one round fewer than the policy allows (a boundary of the redraw rule)"),
    Semantic("llm/validating", "for _ in range(policy.rounds):", "for _ in range(policy.rounds + 1):",
             "one round more than the policy allows (a boundary of the redraw rule)"),
    Semantic("llm/validating", "for s in [s for s in draws if s.error is not None and s.value is not None]"
             "[:max(0, missing)]:",
             "for s in [s for s in reversed(draws) if s.error is not None and s.value is not None]"
             "[:max(0, missing)]:", "the latest provisional draw kept, not the earliest"),
    Semantic("llm/validating", "out.answer_retries, out.rejected_answers = len(draws) - req.n, rejected",
             "out.answer_retries, out.rejected_answers = rejected, rejected",
             "redraws counted as invalid draws"),
    Semantic("llm/validating", "            if any(s.dry_run for s in res.samples):\n                break\n", "",
             "a dry run's placeholders redrawn as invalid answers"),
    Semantic("llm/base", "return missing if self.max_extra is None else min(missing, self.max_extra - extra)",
             "return missing if self.max_extra is None else min(missing, self.max_extra)",
             "max_extra counted per round, not over the request"),
    # ---- face/pipeline/records.py: score records on their way out
    Semantic("pipeline/records", "c[k].append(getattr(r, k))",
             "c[k].append(round(getattr(r, k), 2) if k == \"score\" else getattr(r, k))",
             "scores rounded to 2 decimals before aggregation"),
    Semantic("pipeline/records", "p = self.decomps[(r.conv_id, r.turn_ind)].particles[r.particle_ind]",
             "p = next(d for k, d in self.decomps.items() if k[0] == r.conv_id).particles[r.particle_ind]",
             "a particle filed under the wrong turn (its conversation's first decomposed turn)"),
    Semantic("pipeline/records", "c[k].append(getattr(r, k))",
             "c[k].append(getattr(r, k) + (k == \"turn_ind\" and r.particle_ind > 0))",
             "a particle's score filed under the next turn"),
    Semantic("pipeline/records", "cols[\"score\"].append(math.nan if score is None else float(score))",
             "cols[\"score\"].append(0.0 if score is None else float(score))", "a null score read as 0"),
    Semantic("pipeline/records", "self.missing += int(detail[\"score\"].isna().sum())",
             "self.missing += int((detail[\"n_valid\"] == 0).sum())",
             "scores without a valid answer counted from n_valid (a scored-as-lowest record counted missing)"),
    Semantic("pipeline/records", "self.parts.append(self.aggregate(detail[detail[\"score\"].notna()][SCORE_COLUMNS]))",
             "self.parts.append(self.aggregate(detail.fillna({\"score\": 0.0})[SCORE_COLUMNS]))",
             "a score without a valid answer aggregated as 0"),
    Semantic("pipeline/records", "{conv: n * n_instructions for", "{conv: n for",
             "a conversation's records planned per unit, not per unit x instruction"),
    Semantic("pipeline/records", "out[\"scores.mean_valid_mass\"] = self.mass_sum / self.mass_n if self.mass_n "
             "else 0.0", "out[\"scores.mean_valid_mass\"] = self.mass_sum / self.total if self.total else 0.0",
             "the mean valid mass over every record, not over those with a mass"),
    # ---- face/pipeline/estimators.py: a score from the samples
    Semantic("pipeline/estimators", "valid = [v for v, _ in parsed if v is not None][: spec.n]",
             "valid = [v for v, _ in parsed if v is not None]", "more than n valid draws averaged"),
    Semantic("pipeline/estimators", "return ScoreRecord(score=self.combine(valid + [low] * missing)",
             "return ScoreRecord(score=self.combine(valid + [low])", "all missing samples counted as one lowest"),
    Semantic("pipeline/estimators", "return float(sum(values) / len(values))",
             "return float(sorted(values)[len(values) // 2])", "the median of the samples, not their mean"),
    # ---- face/metaeval.py: the resampling unit
    Semantic("metaeval", "ci = bootstrap_ci(have[\"pred\"].to_numpy(), have[\"human\"].to_numpy(), "
             "have[\"conv_id\"].to_numpy(),",
             "ci = bootstrap_ci(have[\"pred\"].to_numpy(), have[\"human\"].to_numpy(), "
             "have.index.to_numpy(),", "CIs resampling items (turns) instead of conversations"),
    # ---- face/comparison: face compare's decision layer (issue 43's survivors)
    Semantic("comparison/engine", "self.joint = opts.pairing != \"unpaired\" and same", "self.joint = same",
             "pairing=unpaired drawing the systems jointly"),
    Semantic("comparison/engine", "b.take(np.searchsorted(b.ids, shared))", "b.take(np.searchsorted(a.ids, shared))",
             "partial overlap: the candidate's rows taken at the baseline's positions"),
    Semantic("comparison/engine", "stats.holm(df[\"p_value\"].to_numpy())",
             "df.groupby([\"baseline\", \"candidate\"])[\"p_value\"].transform(lambda s: stats.holm(s.to_numpy()))",
             "Holm per pair instead of over the family"),
    Semantic("comparison/engine", "verdicts(df[\"diff\"], df[\"p_holm\"], self.opts.alpha)",
             "verdicts(df[\"diff\"], df[\"p_holm\"], self.opts.alpha / 2)", "the verdict at α / 2"),
    Semantic("comparison/engine", "var = ma.var * len(a) + mb.var * len(b)", "var = ma.var + mb.var",
             "n_needed without its × n factor"),
    Semantic("comparison/engine", "var = ma.var * len(a) + mb.var * len(b)", "var = 2 * ma.var * len(a)",
             "n_needed ignoring the candidate's variance"),
    Semantic("comparison/engine", "self.moments = [stats.moments(u, c) for u, c in zip(self.units, self.draws)]",
             "self.moments = [stats.moments(u, draw_counts(len(u), self.n_boot, self.rng)) for u in self.units]",
             "ranks and P(beats) from independent draws of jointly drawn systems"),
    Semantic("comparison/engine", "np.random.default_rng(opts.seed)", "np.random.default_rng(0)", "seed ignored"),
    Semantic("comparison/engine", "m = max(1, int(df[\"p_value\"].notna().sum()))", "m = 1",
             "detectable_diff / n_needed sized for an unadjusted test"),
    Semantic("comparison/validation", "return u.take(perm[:h]), u.take(perm[h:2 * h])",
             "return u.take(perm[:h]), u.take(perm[:h])", "the calibration null comparing a half with itself"),
)


def semantic_mutants(module: str, source: str) -> tuple[list[tuple[int, str, str]], list[Semantic]]:
    """The module's semantic mutants as (line, change, mutated source), and its stale entries (text not found
    exactly once)."""
    out, stale = [], []
    for m in SEMANTIC:
        if m.module != module:
            continue
        if source.count(m.old) != 1:
            stale.append(m)
            continue
        at = source.index(m.old)
        out.append((source.count("\n", 0, at) + 1, f"semantic: {m.meaning}", source.replace(m.old, m.new, 1)))
    return out, stale
