"""The optimizer's state: candidates, beam, every reward, gradients, trajectory and the RNG state.

Written atomically after every completed round (``<dir>/<aspect>.json``). A run given
``optimizer.resume=<dir>`` continues from the last completed round; a checkpoint written under another
configuration (optimizer, aspect, data, LLM, scoring) is refused with the differing settings named.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from face.errors import ConfigError, DataError
from face.files import atomic_write_text
from face.tracking.names import flatten


@dataclass
class Candidate:
    cid: str
    text: str
    parent: str | None = None  # cid of the instruction it was rewritten from
    gradient_id: str | None = None
    round: int = 0
    origin: str = "initial"  # initial | rewrite | released
    version: int | None = None  # its version in the MLflow Prompt Registry


@dataclass
class OptState:
    aspect: str
    config: dict[str, Any]  # what the result depends on (compared on resume)
    candidates: dict[str, Candidate] = field(default_factory=dict)
    beam: list[str] = field(default_factory=list)
    rewards: dict[str, list[float]] = field(default_factory=dict)  # every pull's reward, per candidate
    gradients: list[dict] = field(default_factory=list)
    trajectory: list[dict] = field(default_factory=list)  # one row per completed round
    rng: dict | None = None  # numpy bit generator state after the last completed round
    round: int = 0  # last completed round
    llm_calls: int = 0
    cost_usd: float = 0.0
    prompt_name: str | None = None  # the registry prompt of the candidates' versions (a resumed job continues it)

    def add(self, cand: Candidate) -> None:
        self.candidates[cand.cid] = cand
        self.rewards.setdefault(cand.cid, [])

    def mean_reward(self, cid: str) -> float | None:
        r = self.rewards.get(cid) or []
        return sum(r) / len(r) if r else None


def save(state: OptState, directory: str | Path) -> Path:
    d = {**asdict(state), "format": "face-optimizer-state/1"}
    return atomic_write_text(Path(directory) / f"{state.aspect}.json", json.dumps(d, indent=1))


def load(directory: str | Path, aspect: str) -> OptState | None:
    path = Path(directory) / f"{aspect}.json"
    if not path.exists():
        return None
    try:
        d = {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if k != "format"}
        return OptState(**{**d, "candidates": {k: Candidate(**v) for k, v in d["candidates"].items()}})
    except (ValueError, TypeError, KeyError) as e:
        raise DataError(path, f"not a readable optimizer checkpoint ({e})") from None


def check_same(state: OptState, config: dict[str, Any], where: Path) -> None:
    """A ConfigError naming every setting that differs between the checkpoint and this run."""
    old, new = flatten(state.config), flatten(json.loads(json.dumps(config, default=str)))  # as the file holds it
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff:
        shown = "; ".join(f"{k}: checkpoint {old.get(k)!r}, now {new.get(k)!r}" for k in diff[:6])
        raise ConfigError(f"optimizer.resume={where}: the checkpoint of {state.aspect!r} was written under "
                             f"another configuration ({shown}{' ...' if len(diff) > 6 else ''}); resume with the same "
                             "settings, or start a new optimization without optimizer.resume")

