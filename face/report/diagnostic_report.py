"""Diagnostics: trace a low score to the turns and particles that caused it, and see system-level patterns.

Input: per-particle × instruction scores (``SCORE_COLUMNS``), the particles' text, the conversations and
the predictions. Output: tables (CSV) and one self-contained HTML report (Jinja2, autoescaped: conversation
text is data). In the report a reader goes from a conversation's dialogue score to its turns and from a
turn to its particles, each with its score under every instruction, the lowest highlighted.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from face.aspects import Aspect
from face.data.schema import ASSISTANT, NO_FEEDBACK, Conversation, Particle
from face.files import atomic_write_text
from face.predictions import Predictions
from face.report.look import drawn

LOW_QUANTILE = 0.1  # "low-scoring": the lowest 10 % of an aspect's particle scores
LOWEST_SHOWN = 10  # the report's table of lowest particles: this many, the rest behind "show all"
ALL_SHOWN = 2000  # at most this many rows behind "show all" (the diagnostics of all CRSArena-Eval has ~70,000)
IN_FULL = 20  # the worst conversations written out in full; the others' turns are drawn when opened (all 467 of
# CRSArena-Eval in full: a 36 MB page, 8 s to open)


def particle_table(scores: pd.DataFrame, particles: Mapping[tuple[str, int], Sequence[Particle]],
                   convs: Sequence[Conversation]) -> pd.DataFrame:
    """One row per particle × aspect: system, position (1 = the first assistant turn), act, mention, feedback,
    the mean over instructions (the particle's score) and the lowest instruction's score."""
    per = (scores.groupby(["aspect", "conv_id", "turn_ind", "particle_ind"], observed=True)["score"]
           .agg(score="mean", min_instruction_score="min", n_instructions="size").reset_index())
    meta = pd.DataFrame([(c.conv_id, t.turn_ind, i, c.system, c.split, pos, len(c.assistant_turns()), p.dialogue_act,
                          p.mention, p.user_feedback) for c in convs
                         for pos, t in enumerate(c.assistant_turns(), start=1)
                         for i, p in enumerate(particles.get((c.conv_id, t.turn_ind), ()))],
                        columns=["conv_id", "turn_ind", "particle_ind", "system", "split", "position",
                                 "n_assistant_turns", "dialogue_act", "mention", "user_feedback"])
    per["conv_id"] = per["conv_id"].astype(str)
    return per.merge(meta, on=["conv_id", "turn_ind", "particle_ind"], how="inner")


def diagnose(scores: pd.DataFrame, particles: Mapping[tuple[str, int], Sequence[Particle]],
             convs: Sequence[Conversation], worst_n: int = 5) -> dict[str, pd.DataFrame]:
    """The diagnostics tables, by name: ``particles`` (one row per particle × aspect: text, mean and min over
    instructions, position), ``by_act`` (mean particle score per system × dialogue act × aspect), ``act_share`` (share
    of each dialogue act among a system's particles), ``by_position`` (per aspect and assistant-turn position: mean
    score, share of low-scoring particles), ``worst_particles`` (per system and aspect, the lowest-scoring particles
    with their text), ``patterns`` (per system: recommending before asking, repeated recommendations, particles per
    turn)."""
    p = particle_table(scores, particles, convs)
    by_act = (p.groupby(["system", "dialogue_act", "aspect"])["score"].agg(mean_score="mean", n="size")
              .reset_index())
    counts = p[p["aspect"] == p["aspect"].iloc[0]] if len(p) else p  # each particle once
    act_share = (counts.groupby(["system", "dialogue_act"]).size() / counts.groupby("system").size()
                 ).rename("share").reset_index()
    threshold = p.groupby("aspect")["score"].transform(lambda s: s.quantile(LOW_QUANTILE))
    p = p.assign(low=p["score"] <= threshold)
    by_position = (p.assign(position=p["position"].clip(upper=8))  # 8 = the 8th assistant turn or later
                   .groupby(["aspect", "position"]).agg(mean_score=("score", "mean"), low_share=("low", "mean"),
                                                        n=("score", "size")).reset_index())
    cols = ["system", "aspect", "score", "min_instruction_score", "conv_id", "turn_ind", "position", "dialogue_act",
            "mention", "user_feedback"]
    worst = (p.sort_values(["system", "aspect", "score", "conv_id", "turn_ind", "particle_ind"])
             .groupby(["system", "aspect"]).head(worst_n)[cols].reset_index(drop=True))
    return {"particles": p.drop(columns=["low"]), "by_act": by_act, "act_share": act_share,
            "by_position": by_position, "worst_particles": worst, "patterns": patterns(particles, convs)}


def patterns(particles: Mapping[tuple[str, int], Sequence[Particle]], convs: Sequence[Conversation]) -> pd.DataFrame:
    """Per system: the share of conversations whose first recommendation comes before any preference
    elicitation (recommending before asking), the share of recommendation particles that repeat an earlier
    recommendation of the same conversation (same mention, case-insensitive), particles per assistant turn."""
    rows = []
    for c in convs:
        acts = [(pos, p) for pos, t in enumerate(c.assistant_turns())
                for p in particles.get((c.conv_id, t.turn_ind), ())]
        first_rec = next((pos for pos, p in acts if p.dialogue_act == "recommendation"), None)
        first_ask = next((pos for pos, p in acts if p.dialogue_act == "preference elicitation"), None)
        recs = [" ".join(p.mention.lower().split()) for _, p in acts if p.dialogue_act == "recommendation"]
        rows.append((c.system, first_rec is not None and (first_ask is None or first_rec < first_ask),
                     len(recs) - len(set(recs)), len(recs), len(acts), len(c.assistant_turns())))
    df = pd.DataFrame(rows, columns=["system", "recommends_before_asking", "repeats", "recommendations", "particles",
                                     "turns"])
    g = df.groupby("system")
    return pd.DataFrame({"conversations": g.size(), "recommends_before_asking": g["recommends_before_asking"].mean(),
                         "repeated_recommendations": g["repeats"].sum() / g["recommendations"].sum().clip(lower=1),
                         "particles_per_turn": g["particles"].sum() / g["turns"].sum()}).reset_index()


def aspect_means(preds: Predictions, aspects: Sequence[Aspect]) -> pd.DataFrame:
    """Per aspect: its level and scale, the mean of its scores at its level (``mean``: its turn scores for a turn-level
    aspect, its dialogue scores for a dialogue-level one), the mean turn and dialogue scores (NaN where it has none)
    and the conversations scored: the report's headline, a run's ``summary.*`` metrics where it has no human
    labels."""
    rows = []
    for a in aspects:
        dial = preds.dialogue[preds.dialogue["aspect"] == a.name]
        turn = preds.turn[preds.turn["aspect"] == a.name]
        own = turn if a.level == "turn" else dial
        rows.append({"aspect": a.name, "level": a.level, "scale": f"{a.low}–{a.high}",
                     "mean": own["pred"].astype(float).mean(), "turn_mean": turn["pred"].astype(float).mean(),
                     "dialogue_mean": dial["pred"].astype(float).mean(), "conversations": own["conv_id"].nunique()})
    return pd.DataFrame(rows, columns=["aspect", "level", "scale", "mean", "turn_mean", "dialogue_mean",
                                       "conversations"])


def relative_scores(particles: pd.DataFrame, aspects: Sequence[Aspect]) -> pd.DataFrame:
    """``particles`` with ``relative``: each particle's score as a fraction of its aspect's scale, (score − lowest
    label) / (highest − lowest label) — 0 the scale's lowest, 1 its highest — so that scores of aspects on 0–1, 0–2
    and 0–4 scales compare (a raw 0.5 is the middle of a 0–1 scale but an eighth of a 0–4 one). An aspect not in
    ``aspects`` (no scale known) gets NaN. Sorted lowest first (ties: system, conversation, turn, particle)."""
    low = particles["aspect"].map({a.name: a.low for a in aspects}).astype(float)
    high = particles["aspect"].map({a.name: a.high for a in aspects}).astype(float)
    rel = (particles["score"] - low) / (high - low).where(high > low)
    return (particles.assign(relative=rel, scale_low=low, scale_high=high)
            .sort_values(["relative", "system", "conv_id", "turn_ind", "particle_ind", "aspect"], na_position="last",
                         kind="stable")
            .reset_index(drop=True))


def feedback_text(feedback: str) -> str:
    """A particle's user feedback as a reader sees it: "(no feedback)" for the data's ``NO_FEEDBACK_PROVIDED`` and
    for an empty one."""
    return "(no feedback)" if not str(feedback).strip() or feedback == NO_FEEDBACK else str(feedback)


# ---------------------------------------------------------------- HTML

@drawn("white")
def act_heatmaps(by_act: pd.DataFrame, aspects: Sequence[Aspect]) -> list[tuple[str, str]]:
    """(aspect, base64 PNG) of the mean particle score per system × dialogue act, coloured on the aspect's fixed
    scale (colour-blind-safe cividis; ``face.report.figures.act_axes``), in the look of every heatmap. No
    caption in the figure: the page names the LLM once, at its top."""
    from face.report.figures import act_axes, plt

    out = []
    for aspect in aspects:
        made = act_axes(by_act, aspect.name, (aspect.low, aspect.high),
                         f"mean score ({aspect.low}–{aspect.high} scale)", 1.4)
        if made is None:
            continue
        fig, ax, _ = made
        ax.set_title(f"{aspect.name} ({aspect.low}–{aspect.high} scale)", fontsize=9)
        ax.set_xticklabels(ax.get_xticklabels(), rotation=30, ha="right", rotation_mode="anchor")
        ax.set_yticklabels(ax.get_yticklabels(), rotation=0)  # system names side by side, never read as one word
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        out.append((aspect.name, base64.b64encode(buf.getvalue()).decode("ascii")))
    return out


NOT_RECORDED = "LLM not recorded (a run written before run_settings.json existed)"


def read_run_settings(path: Path) -> dict:
    """``run_settings.json`` of a run (face.pipeline.method.write_run_settings): {label, llm, instructions, aspects}.
    A run without it still gets a report, which then says that the LLM is unknown rather than naming none."""
    import json

    from face.errors import DataError

    if not path.exists():
        return {"label": NOT_RECORDED, "llm": {}, "instructions": {}, "aspects": {}}
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(path, f"unreadable run settings: {e}") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("label"), str):
        raise DataError(path, "run settings without a 'label' string")
    inst: dict = rec["instructions"] if isinstance(rec.get("instructions"), dict) else {}
    aspects = {}
    for a in rec.get("aspects") or []:  # an aspect of your own (dataset.aspects_file): its level and scale
        try:
            aspects[a["name"]] = Aspect(a["name"], a["level"], tuple(a["scale"]), a.get("definition", ""))
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(path, f"a malformed aspect in 'aspects': {e}") from None
    return {"label": rec["label"], "llm": rec.get("llm") or {}, "aspects": aspects,
            "instructions": {str(a): {str(k): str(v) for k, v in d.items()} for a, d in inst.items()
                             if isinstance(d, dict)}}


def _conversation_view(c: Conversation, parts: pd.DataFrame, per_instr: pd.DataFrame, dial_preds: pd.DataFrame,
                       tpred: pd.DataFrame) -> dict:
    dial = dial_preds.set_index("aspect")["pred"].to_dict()
    lowest = parts.loc[parts.groupby("aspect")["score"].idxmin()] if len(parts) else parts
    lowest_keys = {(r.aspect, r.turn_ind, r.particle_ind) for r in lowest.itertuples()}
    turns = []
    for number, t in enumerate(c.turns, start=1):  # turns numbered from 1, as everywhere else; turn_ind beside
        view: dict[str, Any] = {"number": number, "turn_ind": t.turn_ind,
                                "role": "assistant" if t.role == ASSISTANT else "user", "utterance": t.utterance,
                                "scores": {}, "particles": []}
        if t.role == ASSISTANT:
            view["scores"] = tpred[tpred["turn_ind"] == t.turn_ind].set_index("aspect")["pred"].to_dict()
            tp = parts[parts["turn_ind"] == t.turn_ind]
            for pi, g in tp.groupby("particle_ind"):
                first = g.iloc[0]
                instr = per_instr[(per_instr["turn_ind"] == t.turn_ind) & (per_instr["particle_ind"] == pi)]
                view["particles"].append({
                    "act": first["dialogue_act"], "mention": first["mention"],
                    "feedback": feedback_text(first["user_feedback"]),
                    "scores": [{"aspect": r.aspect, "score": r.score, "min": r.min_instruction_score,
                                "lowest": (r.aspect, t.turn_ind, pi) in lowest_keys} for r in g.itertuples()],
                    "instructions": {a: dict(zip(g2["instruction_id"], g2["score"].round(2)))
                                     for a, g2 in instr.groupby("aspect", sort=True)}})
        turns.append(view)
    worst = lowest.sort_values("relative", kind="stable").head(1)  # on a comparable scale: relative_scores
    worst = None if worst.empty else worst.iloc[0].to_dict()
    if worst is not None:
        worst["number"] = next((n for n, t in enumerate(c.turns, start=1) if t.turn_ind == worst["turn_ind"]), None)
    return {"conv_id": c.conv_id, "system": c.system, "dialogue": dial, "turns": turns, "worst": worst}


def worst_conversations(views: Sequence[dict], scales: Mapping[str, tuple[int, int]], n: int) -> list[dict]:
    """The ``n`` conversations with the lowest mean dialogue score, each aspect's score as a fraction of its scale
    (ties: in the data's order); a conversation without dialogue scores is never among them. Each view gets
    ``relative``, its mean fraction."""
    for v in views:
        fractions = [(x - scales[a][0]) / (scales[a][1] - scales[a][0]) for a, x in v["dialogue"].items()
                     if a in scales and scales[a][1] > scales[a][0] and x == x]
        v["relative"] = sum(fractions) / len(fractions) if fractions else None
    return sorted((v for v in views if v["relative"] is not None), key=lambda v: v["relative"])[:n]


def _compact(view: dict, aspects: Sequence[str]) -> list:
    """A conversation's turns as the page's script draws them when it is opened: [number, turn_ind, is the
    assistant's, utterance, [[aspect index, turn score]], [[act, mention, feedback, [[aspect index, score, lowest
    instruction's score, lowest of the conversation]]]]], scores to 2 decimals as the page shows them."""
    index = {a: i for i, a in enumerate(aspects)}

    def num(v) -> float | None:
        return None if v is None or v != v else round(float(v), 2)

    return [[t["number"], t["turn_ind"], t["role"] == "assistant", t["utterance"],
             [[index[a], num(v)] for a, v in t["scores"].items() if a in index],
             [[p["act"], p["mention"], p["feedback"],
               [[index[x["aspect"]], num(x["score"]), num(x["min"]), int(x["lowest"])] for x in p["scores"]
                if x["aspect"] in index]] for p in t["particles"]]] for t in view["turns"]]


def _views(rel: pd.DataFrame, scores: pd.DataFrame, preds: Predictions, convs: Sequence[Conversation]) -> list[dict]:
    """Every conversation → its turns → their particles; ``rel``: the particles with ``relative_scores``."""
    frames = (rel.sort_values(["conv_id", "turn_ind", "particle_ind", "aspect"], kind="stable"),
              scores.astype({"aspect": str, "instruction_id": str}), preds.dialogue, preds.turn)
    by_conv = [{str(k): g for k, g in x.groupby(x["conv_id"].astype(str), sort=False)} for x in frames]
    return [_conversation_view(c, *(g.get(c.conv_id, x.iloc[:0]) for g, x in zip(by_conv, frames))) for c in convs]


def write_html(path: str | Path, title: str, note: str, d: dict[str, pd.DataFrame], scores: pd.DataFrame,
               preds: Predictions, convs: Sequence[Conversation], aspects: Sequence[Aspect], llm: str,
               instructions: dict[str, dict[str, str]] | None = None) -> Path:
    """The report: summary tables and figures, then every conversation → its turns → their particles. ``llm``
    (what scored: the LLM and its settings, or the released judgements) heads the page, once; ``note``: what the
    run is (without the LLM); ``instructions`` (aspect → id → text) is shown on hovering an instruction id and in a
    list to expand. "Lowest" compares particles on their aspects' scales (``relative_scores``)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    from face.report.figures import tied_low

    env = Environment(loader=PackageLoader("face.report", "templates"), autoescape=select_autoescape(["html"]))
    env.filters["fmt"] = lambda v, digits=2: "–" if v is None or (isinstance(v, float) and np.isnan(v)) \
        else f"{v:.{digits}f}"
    env.filters["feedback"] = feedback_text
    env.policies["json.dumps_kwargs"] = {"separators": (",", ":"), "ensure_ascii": False}  # the page's data, compact
    numbers = {(c.conv_id, t.turn_ind): n for c in convs for n, t in enumerate(c.turns, start=1)}
    rel = relative_scores(d["particles"], aspects)
    shown = rel.head(ALL_SHOWN)
    lowest = shown.assign(number=[numbers.get((str(r.conv_id), r.turn_ind)) for r in shown.itertuples()])
    names, scales = [a.name for a in aspects], {a.name: (a.low, a.high) for a in aspects}
    views = _views(rel, scores, preds, convs)
    worst = worst_conversations(views, scales, IN_FULL)
    full = {v["conv_id"] for v in (views if len(views) <= IN_FULL else worst)}
    share = d["act_share"].pivot(index="system", columns="dialogue_act", values="share")  # the console's grid
    by_position = d["by_position"]
    html = env.get_template("diagnostics.html").render(
        title=title, note=note, llm=llm, instructions=instructions or {}, aspects=names, scales=scales,
        means=aspect_means(preds, aspects).to_dict("records"),
        heatmaps=act_heatmaps(d["by_act"], aspects), acts=list(share.columns), act_share=share.to_dict("index"),
        positions=sorted(by_position["position"].unique()),
        by_position={a: {r["position"]: r for r in g.to_dict("records")} for a, g in by_position.groupby("aspect")},
        lowest=lowest.to_dict("records"), lowest_k=LOWEST_SHOWN,
        n_particle_scores=len(rel), tied_low=tied_low(by_position), conversations=views, full=full,
        worst=worst, drawn_later={v["conv_id"]: _compact(v, names) for v in views if v["conv_id"] not in full})
    return atomic_write_text(path, html)


def write_report(html_path: Path, tables_dir: Path | None, name: str, convs: Sequence[Conversation],
                 scores: pd.DataFrame, particles: Mapping[tuple[str, int], Sequence[Particle]], preds: Predictions,
                 settings: dict, run: str | None = None, aspects: Sequence[Aspect] | None = None) -> Path:
    """A finished run's report (``face report``, ``face evaluate``, ``Result.report``): ``report.html`` and, with
    ``tables_dir``, its tables as CSV. ``scores``: the per-particle × instruction scores (rows without a particle
    or a score are left out here); ``settings``: ``read_run_settings``'s record; ``name`` heads the page;
    ``run``: what the captions call the run (default ``FACE run in <name>``); ``aspects``: the run's (default:
    those of the run settings' ``aspects``, else CRSArena-Eval's)."""
    from face.datasets.crsarena import ASPECTS
    from face.report.tables import write_table

    scores = scores[(scores["particle_ind"] >= 0) & scores["score"].notna()]
    own = {k: v for k, v in settings.get("aspects", {}).items() if k not in ASPECTS}
    known = {a.name: a for a in aspects or ()} or {**ASPECTS, **own}
    aspects = [known[a] for a in known if a in set(scores["aspect"])]
    d = diagnose(scores, particles, convs)
    note = f"{run or f'FACE run in {name}'}: {len(convs)} conversations; scores from particle_scores.jsonl"
    if tables_dir is not None:
        for table_name, table in d.items():
            write_table(table, tables_dir, table_name, f"{table_name.replace('_', ' ')}. {note}; {settings['label']}.")
    return write_html(html_path, f"FACE diagnostics — {name}", note + ".", d, scores, preds, convs, aspects,
                      settings["label"], settings["instructions"])
