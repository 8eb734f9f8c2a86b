"""The import-layer contract (``[tool.importlinter]`` in pyproject.toml, checked by ``lint-imports`` in
``make lint``) places every top-level module and package of ``face/``: a new one must be given a layer."""

import pkgutil
import tomllib
from pathlib import Path

import face

ROOT = Path(__file__).resolve().parents[1]


def contract_layers() -> list[list[str]]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in cfg["contracts"] if c["type"] == "layers"]
    return [[name.strip() for name in layer.replace(":", "|").split("|")] for layer in contract["layers"]]


def test_every_module_of_face_has_a_layer():
    named = [name for layer in contract_layers() for name in layer]
    modules = sorted(f"face.{m.name}" for m in pkgutil.iter_modules(face.__path__))
    assert sorted(set(named)) == modules, "pyproject.toml [tool.importlinter]: name every module of face/ once"
    assert len(named) == len(set(named)), "a module is named in two layers"


def test_test_doubles_sit_on_top_so_nothing_else_imports_them():
    assert contract_layers()[0] == ["face.testing"]
