"""Pinned upstream sources of every data file: repository, commit, path and sha256.

Generated once from the upstream repositories; a file is accepted only if its sha256 matches.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataFile:
    local: str  # path under the data directory
    url: str  # pinned: https://raw.githubusercontent.com/<repository>/<commit>/<path>
    sha256: str


FACE, DIAL, USR = "informagi/face", "iai-group/crsarena-dial", "SmartDataAnalytics/proxy_indicators"
COMMITS = {FACE: "cd4b3f7bcf0c99020e0f4ebc1a3d331220a8953d", DIAL: "dd7f4e7dd3bcb93673d0711632135de84d3b6d91",
           USR: "5017317f0d03cdbc64a3a52c09fc0a6bf5c492b3"}

# (local path, repository, upstream path, sha256)
_FILES = [
    ("crsarena_dial/crs_arena_dial_closed.json", DIAL, "data/crs_arena_dial_closed.json",
     "2f97b75e4218eabcde7519a4cc1165daf51671eb4accb92977dc089a99798a79"),
    ("crsarena_dial/crs_arena_dial_open.json", DIAL, "data/crs_arena_dial_open.json",
     "59afb9531a4b7c632c9366e5d169f33cfea655b4b4d1012da0a44374cc0891cf"),
    ("crsarena_dial/votes_closed.csv", DIAL, "data/votes_closed.csv",
     "7092c7c01ebb0eaa93ae8de2b1dd2d9a7960e3fde5a325516290890ba558b939"),
    ("crsarena_dial/votes_open.csv", DIAL, "data/votes_open.csv",
     "2f9776be21f44ede88095fc62222a3646f12425318956d3b1d78bc10cf6080cc"),
    ("crsarena_eval/crs_arena_eval.json", FACE, "dataset/crs_arena_eval.json",
     "c4432965afc6654b1f1b73431cd567f5d9dd44d0e43f680f1652053f104e74e5"),
    ("face_released/face_run.json", FACE, "dataset/run/face_run.json",
     "29e896b4b0aeefa732ba5010afb749adfc6b98f2518a71fc890066ff8dd518a1"),
    ("face_released/particles.jsonl", FACE, "face/reproduce_result_table/run_files/particles/run_particles.json",
     "590d09bf5a32cbc9c0ef90fcdd1ddd5f9008b57996322142247f19f10efd61e7"),
    ("face_released/published_table2.json", FACE, "meta_eval_interface/baselines.json",
     "15e5b8e4c611dc32e9a0edaacc0ed989facb6641621bc3a52657c52f217ca138"),
    ("usr/pc_usr_data.json", USR, "data/usr_percona_chat.json",
     "7acf3ff80c02e791138bc9a0db440a36d07d700fe1457066adbf73b8f0c64a4b"),
    ("usr/tc_usr_data.json", USR, "data/usr_topical_chat.json",
     "8e4e6961585f58edb573c0153766547442bde69577e8df6ba9e24a84dc9483e5"),
]
# the released run file and top-16 instructions of each aspect: aspect -> (run file sha256, instructions sha256)
_PER_ASPECT = {
    "dialogue_overall": ("a38b7772ed1f9042959baaf1c0376e86814acfb281c222e4c45208b1f031c376",
                         "6214003c1d63d606985fb20b51592ae527c61117fc9cc9d93105cb8eb5d844dd"),
    "efficiency": ("cc65fe850fabecd0f672d96e65b3c6c5bf6c11b1897f420fe42f681cb0e138b0",
                   "a673f2277012f46d9a8640a4f610da558a80fb4285e8e91b418bef5fa358696e"),
    "interest_arousal": ("df7e844e0cafa7c62a41e2ca85c1b8227b404bcb274d2a10cdb8ed5c49ad6ede",
                         "8107429414cdf6f12baa31c8216303d65c7059afa79fc963a0eef230e07ec65c"),
    "interestingness": ("344b7e545149d0d0dcdd5ca4ec2df61796d1a1d2fe5b84f3f4d95b0532218de6",
                        "8b49c1de43725a2caef96e7a5a4fbe27977058215d4e1782a1a3e3f3491861a0"),
    "relevance": ("cf69dc8a3564294a6986bebc598db670d64ac4cc18069f0b103e7b539f500934",
                  "194c73ac9437fef15f5ce67b4a58ffdc8afdb7f44bc0c069f7700edd9a1cce17"),
    "task_completion": ("24d3ee2d80bd11335f4b307183f6f7aa6412907e9bd4a55fa36a213b224213f6",
                        "ca080ebd16347f8a43965b3a1fe44eb44996fddc4f5609015db21938c3ff424d"),
    "understanding": ("9792abd464a3d71bb63458ad0c665873ec5cb2da9968db725310c199d2ebe41e",
                      "df58a728ed1a40a3f2f8ed812aa6fd407d00e4274ffb2da3ee0fdba8ff9eeb23"),
}
_FILES += [file for a, (run, top) in _PER_ASPECT.items() for file in (
    (f"face_released/run_files/{a}.jsonl", FACE, f"face/reproduce_result_table/run_files/{a}.jsonl", run),
    (f"face_released/top16_instructions/{a}.json", FACE, f"face/face_scoring/top_16_prompts/{a}.json", top))]

MANIFEST: dict[str, DataFile] = {
    local: DataFile(local, f"https://raw.githubusercontent.com/{repo}/{COMMITS[repo]}/{path}", sha)
    for local, repo, path, sha in sorted(_FILES)}
