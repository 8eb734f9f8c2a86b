"""Data layer: fetch + verify upstream files, typed records, one loader per file."""

from face.data.fetch import ensure_data

CRSARENA_EVAL = "crsarena_eval/crs_arena_eval.json"
RELEASED_RUN = "face_released/face_run.json"
RELEASED_PARTICLES = "face_released/particles.jsonl"
PUBLISHED_TABLE = "face_released/published_table2.json"
ARENA_VOTES = {"open": "crsarena_dial/votes_open.csv", "closed": "crsarena_dial/votes_closed.csv"}
USR_FILES = {"topical_chat": "usr/tc_usr_data.json", "persona_chat": "usr/pc_usr_data.json"}


def released_scores_file(aspect: str) -> str:
    return f"face_released/run_files/{aspect}.jsonl"


def released_instructions_file(aspect: str) -> str:
    return f"face_released/top16_instructions/{aspect}.json"


__all__ = ["ARENA_VOTES", "CRSARENA_EVAL", "PUBLISHED_TABLE", "RELEASED_PARTICLES",
           "RELEASED_RUN", "USR_FILES", "ensure_data", "released_instructions_file", "released_scores_file"]
