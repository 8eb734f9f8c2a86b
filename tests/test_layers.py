"""The import-layer contract (``[tool.importlinter]`` in pyproject.toml, checked by ``lint-imports`` in
``make lint``) places every top-level module and package of ``face/``: a new one must be given a layer."""

import pkgutil
import tomllib
from pathlib import Path

import face

ROOT = Path(__file__).resolve().parents[1]


def contract_layers(package: str = "face") -> list[list[str]]:
    """The layers of the contract over ``package``'s modules (its first layer's names start with it)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = [c for c in cfg["contracts"] if c["type"] == "layers"]
    layers = [[[name.strip() for name in layer.replace(":", "|").split("|")] for layer in c["layers"]]
              for c in contracts]
    (found,) = [ls for ls in layers if all(n.rsplit(".", 1)[0] == package for layer in ls for n in layer)]
    return found


def test_every_module_of_face_has_a_layer():
    named = [name for layer in contract_layers() for name in layer]
    modules = sorted(f"face.{m.name}" for m in pkgutil.iter_modules(face.__path__))
    assert sorted(set(named)) == modules, "pyproject.toml [tool.importlinter]: name every module of face/ once"
    assert len(named) == len(set(named)), "a module is named in two layers"


def test_every_module_of_the_pipeline_has_a_layer():
    import face.pipeline

    named = [name for layer in contract_layers("face.pipeline") for name in layer]
    modules = sorted(f"face.pipeline.{m.name}" for m in pkgutil.iter_modules(face.pipeline.__path__))
    assert sorted(named) == modules, "pyproject.toml: name every module of face/pipeline/ once"


def test_test_doubles_sit_on_top_so_nothing_else_imports_them():
    assert contract_layers()[0] == ["face.testing"]


def test_every_module_of_tracking_has_a_layer():
    import face.tracking

    named = [name for layer in contract_layers("face.tracking") for name in layer]
    modules = sorted(f"face.tracking.{m.name}" for m in pkgutil.iter_modules(face.tracking.__path__))
    assert sorted(named) == modules, "pyproject.toml: name every module of face/tracking/ once"
