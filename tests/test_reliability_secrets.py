"""Issue 21, secrets by construction: a credential given by any spelling -- a key-named setting, a header, a
URL's user-info, a key in ``api_key_env``, a key in a config file -- is refused through both entry points
(``scripts/run.py`` and ``face evaluate --set``) with one line naming the setting, never the value, exit 2,
before anything is written; the key read from the environment never reaches any file or output (canary);
``redact`` masks what it must and leaves settings, hashes and paths alone."""

from __future__ import annotations

import http.server
import json
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from helpers import write_logs
from reliability import entry_argv, refused, run

import face.secrets
from face.secrets import redact, register, secret_in_overrides, secret_name, secret_setting

# the reliability suite (issue 21): in-process, but ~150 cases; run with the slow tests, one at a time, so that
# no other test writes into the project tree while a case checks that nothing outside its temp dir changed
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RAW = "canaryZq7Xw2Lp9Rt4Vb6N"  # a key no format rule of redact() recognises: only its setting gives it away
CANARY = f"sk-{RAW}"  # the same with a well-known key prefix; neither may appear anywhere
LOGS = [{"id": "c1", "messages": [{"role": "user", "content": "Any heist films?"},
                                  {"role": "assistant", "content": "Try Heat (1995)."}]}]


def _conf_dir(tmp: Path) -> Path:
    """A config search path with an LLM backend whose YAML holds a key (conf/llm/leaky.yaml)."""
    d = tmp / "myconf"
    (d / "llm").mkdir(parents=True, exist_ok=True)
    (d / "llm" / "leaky.yaml").write_text(f"defaults: [fake, _self_]\napi_key: {RAW}\n")
    return d


# name -> (overrides, words the refusal line must say); {canary}, {raw} and {conf} are filled in per case
CASES = {
    "openai_api_key": (["+llm.openai_api_key={canary}"], ["llm.openai_api_key is refused", "a credential"]),
    "apikey": (["+llm.apikey={raw}"], ["llm.apikey"]),
    "camel_case_api_key": (["+llm.apiKey={raw}"], ["llm.apiKey"]),
    "authorization_header": (["+llm.headers={{Authorization: 'Bearer {raw}'}}"], ["llm.headers.Authorization"]),
    "password_setting": (["+tracking.password={raw}"], ["tracking.password"]),
    "key_in_api_key_env": (["llm.api_key_env={canary}"], ["llm.api_key_env must be the NAME"]),
    "base_url_user_info": (["llm.base_url=http://user:{raw}@127.0.0.1:9/v1"], ["llm.base_url", "user:pass@host"]),
    "base_url_token_as_user": (["llm.base_url=https://{raw}@127.0.0.1:9/v1"], ["llm.base_url", "user:pass@host"]),
    "base_url_replica_user_info": (["llm.base_url=[http://127.0.0.1:9/v1,http://u:{raw}@127.0.0.1:8/v1]"],
                                   ["llm.base_url"]),
    "tracking_uri_user_info": (["tracking.tracking_uri=http://user:{raw}@127.0.0.1:9"], ["tracking.tracking_uri"]),
    "key_value_in_another_setting": (["llm.model={canary}"], ["llm.model", "looks like a credential"]),
    "bearer_value_in_another_setting": (["+llm.extra='Bearer {raw}'"], ["llm.extra"]),
    "key_in_a_config_file": (["hydra.searchpath=[file://{conf}]", "llm=leaky"], ["llm.api_key"]),
}
RUN_ONLY = {  # scripts/run.py only: Hydra's own settings and flags, sweeps
    "hydra_env_set": (["+hydra.job.env_set.OPENAI_API_KEY={raw}"], ["OPENAI_API_KEY"]),
    "printed_config": (["--cfg", "job", "+llm.apikey={raw}"], ["llm.apikey"]),
    "sweep_with_a_key_in_a_config_file": (["-m", "hydra.searchpath=[file://{conf}]", "llm=fake,leaky"],
                                          ["llm.api_key"]),
}
TABLE = [("run.py", n) for n in [*CASES, *RUN_ONLY]] + [("face", n) for n in CASES]


def _argv(entry: str, name: str, tmp: Path) -> list[str]:
    """The case's command line; its input files (logs, a config dir) go to tmp."""
    inputs = tmp
    overrides, _ = {**CASES, **RUN_ONLY}[name]
    filled = [o.format(canary=CANARY, raw=RAW, conf=_conf_dir(inputs)) for o in overrides]
    if entry == "run.py":
        return entry_argv(entry, tmp, *filled)
    llm = [o.partition("=")[2] for o in filled if o.startswith("llm=")]
    return entry_argv(entry, tmp, *(o for o in filled if not o.startswith("llm=")),
                      logs=write_logs(inputs / "logs.jsonl", LOGS), llm=llm[0] if llm else "fake")


def _hits(root: Path, *needles: str) -> list[str]:
    """Files under root whose bytes contain a needle."""
    found = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            found += [f"{p.relative_to(root)}: {n}" for n in needles if n.encode() in data]
    return found


@pytest.mark.parametrize("entry,name", TABLE, ids=[f"{e}-{n}" for e, n in TABLE])
def test_a_credential_is_refused_naming_the_setting_not_the_value(entry, name, tmp_path, monkeypatch):
    o = run(entry, _argv(entry, name, tmp_path), tmp_path, monkeypatch)
    assert refused(o, *{**CASES, **RUN_ONLY}[name][1]) == []
    assert RAW not in o.out + o.err  # the line names the setting, never the value
    written = [p for p in tmp_path.rglob("*") if "myconf" not in p.parts and p.name != "logs.jsonl"]
    assert written == []  # nothing written, not even a directory: no .hydra/, no run or --out dir, no MLflow store


# what each refusal of face.secrets says (its rules), and the two spellings the guard reads besides an override's
# own name and value: a name inside a dict value, a credential in a config file
RULES = {"the NAME of a variable": "must be the NAME", "a key-named setting": "a credential in a setting",
         "a URL's user info": "user:pass@host", "a key-like value": "looks like a credential"}


def _spellings(entry: str, tmp_path: Path) -> set[str]:
    """The refusal rules and spellings the table's cases of ``entry`` reach, read from face.secrets itself."""
    import tempfile

    seen = set()
    for e, name in TABLE:
        if e != entry:
            continue
        overrides = [o.format(canary=CANARY, raw=RAW, conf=Path(tempfile.gettempdir())) for o in
                     {**CASES, **RUN_ONLY}[name][0]]
        line = secret_in_overrides(overrides)
        if line is None:  # nothing on the command line: a config file holds it
            assert any(o.startswith("hydra.searchpath=") for o in overrides), name
            seen.add("a config file")
            continue
        seen |= {rule for rule, words in RULES.items() if words in line}
        keys = [o.partition("=")[0].lstrip("+~") for o in overrides]
        if not any(line.startswith(k + " ") for k in keys):  # the line names a key inside the value
            seen.add("a name inside a value")
    return seen


@pytest.mark.parametrize("entry", ["run.py", "face"])
def test_the_table_reaches_every_refusal_rule_through_both_entry_points(entry, tmp_path):
    assert _spellings(entry, tmp_path) == {*RULES, "a name inside a value", "a config file"}


# ---------------------------------------------------------------- no false alarms
LEGIT = ["llm.api_key_env=MY_KEY_VAR", "llm.max_tokens=64", "method.cost.score_output_tokens=8",
         "llm.base_url=http://127.0.0.1:8000/v1", "tracking.tracking_uri=sqlite:////tmp/x/mlflow.db",
         "llm.model=meta-llama/Llama-3.1-8B-Instruct", "llm.model=DeepSeek-R1-Distill-Qwen-14B-GGUF",
         "+llm.server.tokenizer=gpt2", "hydra.run.dir=/tmp/runs/2026-12-01_21-58-24_4242"]


def test_real_settings_holding_no_credential_pass_the_guard():
    assert [o for o in LEGIT if secret_in_overrides([o])] == []


def _writes(path: Path, package: str) -> set[str]:
    """The top-level settings a config file sets: its own package's root (an experiment overlay, ``@package
    _global_``: each of its top-level keys) and each config group its defaults list selects or overrides elsewhere
    (by the group's name or the package after ``@``). A relative entry of a global file: ``*`` (could be anything)."""
    import yaml

    text = path.read_text()
    doc = yaml.safe_load(text) or {}
    glob = "@package _global_" in text
    roots = set(doc) - {"defaults"} if glob else {package}
    for entry in doc.get("defaults") or []:
        spec = (next(iter(entry)) if isinstance(entry, dict) else str(entry)).removeprefix("override ").strip()
        group, _, pkg = spec.partition("@")
        if spec == "_self_":
            continue
        if pkg:
            roots.add(pkg.removeprefix("_global_.").split(".")[0])
        elif group.startswith("/"):
            roots.add(group.lstrip("/").split("/")[0])
        else:
            roots.add("*" if glob else package)
    return roots


def _reads(path: Path) -> set[str]:
    """The top-level settings a config file's interpolations may read (every name inside ``${...}`` that does not
    follow a dot: a root, a resolver, an argument -- more than it reads, never less; ``${..x}`` reads its own node)."""
    import re

    return {r for body in re.findall(r"\$\{([^{}]*)", path.read_text())
            for r in re.findall(r"(?<![\w.])([A-Za-z_]\w*)", body)}


def _composed_pairs(conf: Path) -> set[tuple[str, str]]:
    """The (experiment, llm) compositions that show every setting any of the 126 could hold.

    The guard judges a setting by its dotted name, its value as written and its value resolved. In the composition of
    experiment E with llm file L, what sits under ``llm`` is what L's files write, plus whatever E writes there; what
    sits elsewhere is what E and the root config write, plus whatever L's defaults write outside ``llm`` (llm=local:
    ``run_size``); a value resolved through an interpolation can also read across. So (E, L) holds a setting that
    neither (E, L0) nor (E0, L) holds only where the two meet: E writes ``llm`` (replay_table2: ``override
    /llm``) or a root an llm file interpolates (``paths``), L writes outside ``llm``, or a config outside conf/llm
    interpolates ``llm``. Composed: every experiment with an llm writing nothing outside ``llm`` (L0), every llm
    with the default experiment (E0, which writes no llm setting, or it is paired below), every experiment that
    meets the llm files with every llm, every llm that reaches outside with every experiment; if any config outside
    conf/llm read ``llm``, all of them."""
    import yaml

    exps = sorted(p.stem for p in (conf / "experiment").glob("*.yaml"))
    llms = sorted(p.stem for p in (conf / "llm").glob("*.yaml"))
    llm_reads = set().union(*(_reads(p) for p in (conf / "llm").glob("*.yaml")))
    reads_llm = any("llm" in _reads(p) for p in conf.rglob("*.yaml") if "llm" not in p.relative_to(conf).parts[:1])
    meets = {e for e in exps if reads_llm or _writes(conf / "experiment" / f"{e}.yaml", "_global_") &
             {"llm", "*", *llm_reads}}
    reaches = {m for m in llms if _writes(conf / "llm" / f"{m}.yaml", "llm") - {"llm"}}
    default_exp = next(d["experiment"] for d in yaml.safe_load((conf / "config.yaml").read_text())["defaults"]
                       if isinstance(d, dict) and "experiment" in d)
    plain = next(m for m in llms if m not in reaches)
    assert "replay_table2" in meets and "local" in reaches  # the two places where they meet, as conf/ is now
    return ({(e, plain) for e in exps} | {(default_exp, m) for m in llms} | {(e, m) for e in meets for m in llms}
            | {(e, m) for e in exps for m in reaches})


def test_every_shipped_config_passes_the_guard():
    """Every experiment × LLM backend of conf/ composes clean (no shipped setting is mistaken for a key): composed
    as the pairs that hold every setting any pair holds (``_composed_pairs``: 46 of the 126)."""
    from hydra import compose, initialize_config_dir

    conf = ROOT / "conf"
    pairs = _composed_pairs(conf)
    bad = []
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        for e, llm in sorted(pairs):
            problem = secret_setting(compose(config_name="config", overrides=[f"experiment={e}", f"llm={llm}"]))
            if problem:
                bad.append(f"{e} {llm}: {problem}")
    assert len({e for e, _ in pairs}) >= 10 and len({m for _, m in pairs}) >= 5 and bad == []


@pytest.mark.parametrize("name,is_secret", [
    ("llm.openai_api_key", True), ("llm.apikey", True), ("Authorization", True), ("X-Api-Key", True),
    ("llm.access_token", True), ("tracking.password", True), ("llm.api_key_env", False), ("llm.max_tokens", False),
    ("method.cost.score_output_tokens", False), ("llm.server.tokenizer", False), ("top_logprobs", False),
    ("dataset.keywords", False)])
def test_a_setting_name_says_credential_or_not(name, is_secret):
    assert secret_name(name) is is_secret


# ---------------------------------------------------------------- redact
@pytest.mark.parametrize("text,expected", [
    ("key sk-proj-AbC123dEf456", "key ***"),
    ("Authorization: Bearer abc.DEF-123", "Authorization: ***"),
    ("sent with Bearer abc.DEF-123 to it", "sent with Bearer *** to it"),
    ("header Basic dXNlcjpwYXNz sent", "header Basic *** sent"),  # base64 of user:pass
    ("http://user:hunter2@host:8000/v1 failed", "http://***@host:8000/v1 failed"),
    ("GET /v1?api_key=hunter2&x=1", "GET /v1?api_key=***&x=1"),
    ("password: hunter2", "password: ***"),
    ("got AbCdEfGhIjKlMnOpQrStUv12 back", "got *** back"),  # 24 letters and digits, mixed case: generated
    # left alone: settings naming a variable, counts, a run id (hex), a model name, a path, a sqlite URI
    ("api_key_env=OPENAI_API_KEY max_tokens=256", "api_key_env=OPENAI_API_KEY max_tokens=256"),
    ("run 0123456789abcdef0123456789abcdef", "run 0123456789abcdef0123456789abcdef"),
    ("DeepSeek-R1-Distill-Qwen-14B-GGUF", "DeepSeek-R1-Distill-Qwen-14B-GGUF"),
    ("Basic statistics of the run", "Basic statistics of the run"),
    ("sqlite:////tmp/pytest-of-x/mlflow.db scikit-learn", "sqlite:////tmp/pytest-of-x/mlflow.db scikit-learn"),
])
def test_redact_masks_credentials_and_nothing_else(text, expected):
    assert redact(text) == expected


def test_a_registered_value_is_masked_wherever_it_appears(monkeypatch):
    monkeypatch.setattr(face.secrets, "_registered", set())  # this test's registrations end with it
    value = "plainwordsecretvalue"  # no rule would recognise it
    assert redact(f"x{value}y") == f"x{value}y"
    register(value)
    assert redact(f"x{value}y") == "x***y"


def test_the_key_read_from_the_environment_is_registered(monkeypatch):
    from face.llm.config import LLMConfig

    monkeypatch.setattr(face.secrets, "_registered", set())
    monkeypatch.setenv("FACE_TEST_REGISTERED_KEY", "justlettersnokeyformat")
    assert LLMConfig(api_key_env="FACE_TEST_REGISTERED_KEY").api_key() == "justlettersnokeyformat"
    assert redact("refused justlettersnokeyformat.") == "refused ***."


def test_a_log_record_is_redacted_for_every_handler(tmp_path):
    import logging

    from face.secrets import install_log_redaction

    install_log_redaction()
    path = tmp_path / "run.log"
    handler = logging.FileHandler(path)
    logger = logging.getLogger("face.test_secrets_child")  # a child: a filter on the root logger would miss it
    logger.addHandler(handler)
    try:
        logger.warning("endpoint %s said %s", "http://u:pw@h/v1", f"bad key {CANARY}")
        try:
            raise ValueError(f"Incorrect API key provided: {CANARY}")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
        handler.close()
    text = path.read_text()
    assert "endpoint http://***@h/v1 said bad key ***" in text and "Incorrect API key provided: ***" in text
    assert CANARY not in text and "pw@" not in text


# ---------------------------------------------------------------- canary
class _EchoingAuthServer(http.server.ThreadingHTTPServer):
    """An endpoint that rejects every request with 401 and quotes the key it got, as OpenAI's API does
    ("Incorrect API key provided: sk-..."): the key comes back in an error message."""

    def __init__(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                body = json.dumps({"error": {"message": f"Incorrect API key provided: {key}.",
                                             "type": "invalid_request_error", "code": "invalid_api_key"}}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def __enter__(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()


@pytest.mark.slow
def test_canary_key_is_nowhere_in_the_output_tree_or_the_output(tmp_path, data_dir, monkeypatch, mlflow_store):
    """The canary as the API key in the environment of two real runs -- one answered by the scripted server, one by
    an endpoint that quotes the key back in its 401 -- in one project root: no file under it (.hydra/, run dirs,
    run.log, results, cache, mlflow.db, mlruns) and no captured stdout/stderr holds the canary. (The canary through
    every spelling and both entry points is test_a_credential_is_refused_naming_the_setting_not_the_value's: each
    case refused with exit 2, the value in none of its output, nothing written at all.) The runs log into a copy of
    the session's empty MLflow store (its creation, MLflow's schema migrations, holds nothing of a run; that the
    runs wrote into it is checked: the model's name is found in it)."""
    import shutil

    from face.testing.scripted import ScriptedServer

    tmp_path = tmp_path / "project"
    tmp_path.mkdir()
    outputs = []
    monkeypatch.setenv("FACE_CANARY_KEY", CANARY)
    shutil.copyfile(mlflow_store, tmp_path / "mlflow.db")  # paths.root_dir is tmp_path: the runs' store
    live = ["experiment=ablation_no_particles", "llm=openai_compatible", "llm.model=scripted-model",
            "llm.api_key_env=FACE_CANARY_KEY", "llm.progress=false", "llm.max_retries=0", "dataset.limit=1",
            "aspects=[relevance]", "method.instructions.max=1", "method.scoring.n=1", "metaeval.n_boot=0",
            f"paths.data_dir={data_dir}", "paths.data_mirror=null", "dataset.download=false"]
    srv = ScriptedServer()
    with srv as info:
        ok = run("run.py", [*live, f"llm.base_url={info.base_url}"], tmp_path, monkeypatch)
    assert ok.code in (0, None), ok.err[-2000:]  # cli() returns: exit 0
    assert srv.seen_auth(CANARY)  # the key was really sent
    with _EchoingAuthServer() as url:
        echoed = run("run.py", [*live, f"llm.base_url={url}", "llm.cache=false"], tmp_path, monkeypatch)
    assert echoed.code == 4 and "Incorrect API key provided: ***" in echoed.err, echoed.err[-2000:]
    outputs += [ok.out + ok.err, echoed.out + echoed.err]
    written = {p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*") if p.is_file()}
    assert {"outputs", "mlflow.db", "mlruns", "data"} <= written, written  # the scan covers what the runs wrote
    assert list(tmp_path.glob("outputs/*/*/.hydra/config.yaml")) and list(tmp_path.glob("outputs/*/*/*.log"))
    assert "mlflow.db: scripted-model" in _hits(tmp_path, "scripted-model")  # what the runs wrote is found by the scan
    assert _hits(tmp_path, CANARY, RAW) == []
    assert [o for o in outputs if CANARY in o or RAW in o] == []
