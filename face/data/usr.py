"""USR human judgements (Mehri & Eskenazi, 2020) for Topical-Chat and PersonaChat."""

from __future__ import annotations

from pathlib import Path

from face.data.errors import DataError
from face.data.io import check_type, field, read_json
from face.data.schema import USRContext, USRResponse

USR_ASPECTS = ("Understandable", "Natural", "Maintains Context", "Engaging", "Uses Knowledge", "Overall")


def load_usr(path: str | Path) -> list[USRContext]:
    path = Path(path)
    raw = check_type(read_json(path), list, path, "top level")
    out = []
    for i, obj in enumerate(raw):
        rec = f"context {i}"
        responses = []
        for j, r in enumerate(field(obj, "responses", list, path, rec)):
            r_rec = f"{rec}, response {j}"
            ratings = {}
            for aspect in USR_ASPECTS:
                vals = field(r, aspect, list, path, r_rec)
                if not vals:
                    raise DataError(path, f"no ratings for {aspect!r}", r_rec)
                ratings[aspect] = tuple(float(check_type(v, float, path, f"{r_rec}, {aspect}")) for v in vals)
            responses.append(USRResponse(i, field(r, "model", str, path, r_rec),
                                         field(r, "response", str, path, r_rec).strip(), ratings))
        context = tuple(t.strip() for t in field(obj, "context", str, path, rec).strip().split("\n") if t.strip())
        out.append(USRContext(i, context, field(obj, "fact", str, path, rec), tuple(responses)))
    return out
