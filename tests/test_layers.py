"""The import-layer contract (``[tool.importlinter]`` in pyproject.toml, checked by ``lint-imports`` in
``make lint``) places every top-level module and package of ``face/``: a new one must be given a layer."""

import ast
import functools
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


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for every check of this file that walks face/."""
    return ast.parse(path.read_text(encoding="utf-8"))


def imports_of(path: Path, module: str) -> set[str]:
    """Every module ``path`` (the module ``module``) imports, top-level or inside a function, absolute or relative,
    and every module named in an ``importlib.import_module("...")`` call."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) ==
              "import_module" and node.args and isinstance(node.args[0], ast.Constant)):
            out.add(str(node.args[0].value))
    return out


def test_no_module_outside_the_test_doubles_imports_them():
    """face.testing (the scripted server, the replay judge, the fault proxy) is reached only through a config's
    ``llm.server._target_``: no other module of face/ imports it, however it spells the import."""
    importers = {}
    for path in sorted((ROOT / "face").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if module == "face.testing" or module.startswith("face.testing."):
            continue
        hits = sorted(m for m in imports_of(path, module) if m == "face.testing" or m.startswith("face.testing."))
        if hits:
            importers[module] = hits
    assert importers == {}


def test_the_import_check_sees_every_spelling(tmp_path):
    """The check above can fail: absolute, relative, lazy and importlib imports of face.testing are all found."""
    mod = tmp_path / "face" / "llm" / "x.py"
    mod.parent.mkdir(parents=True)
    mod.write_text("import face.testing.faults\n"
                   "def f():\n    from ..testing import scripted\n    from .. import testing\n"
                   "import importlib\nimportlib.import_module('face.testing.replay')\n")
    found = imports_of(mod, "face.llm.x")
    assert {"face.testing.faults", "face.testing.scripted", "face.testing", "face.testing.replay"} <= found


def test_every_module_of_tracking_has_a_layer():
    import face.tracking

    named = [name for layer in contract_layers("face.tracking") for name in layer]
    modules = sorted(f"face.tracking.{m.name}" for m in pkgutil.iter_modules(face.tracking.__path__))
    assert sorted(named) == modules, "pyproject.toml: name every module of face/tracking/ once"


def test_no_module_of_face_or_scripts_imports_hydra_s_private_api():
    """Hydra is used as designed (``@hydra.main``, its callbacks, its compose API): nothing imports ``hydra._internal``
    (the runner re-implemented Hydra's job runner with it), however the import is spelled."""
    found = {}
    for path in sorted([*(ROOT / "face").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        hits = sorted(m for m in imports_of(path, module) if m.startswith("hydra._internal"))
        if hits:
            found[module] = hits
    assert found == {}


def test_at_most_one_context_variable_in_face():
    """A run's state is passed explicitly (its summary, its estimates, its cache directory, its checked plan), not
    held in ambient ``ContextVar``s: at most one is left, where a library boundary needs one."""
    made = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in sorted((ROOT / "face").rglob("*.py"))
            for node in ast.walk(_tree(path))
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "ContextVar"]
    assert len(made) <= 1, made


# Import circles not broken yet, each a set of modules importing one another (directly or through the others). The
# list can only shrink: a new circle fails, and so does one listed here that is gone (take it off). None today.
KNOWN_CIRCLES: list[set[str]] = []


def import_circles(package: str) -> list[set[str]]:
    """The import circles among ``package``'s modules: each module's circle is the modules it imports, directly or
    not, that import it back. Imports inside functions count (they close the circle when they run); imports under
    ``if TYPE_CHECKING:`` do not (they never run)."""
    import grimp

    graph = grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)
    circles: list[set[str]] = []
    for m in sorted(graph.modules):
        around = graph.find_downstream_modules(m) & graph.find_upstream_modules(m)
        if around and m not in set().union(*circles):
            circles.append({m, *around})
    return circles


def test_no_import_circle_among_the_modules_of_face_beside_the_known_ones():
    found = import_circles("face")
    assert [c for c in found if c not in KNOWN_CIRCLES] == [], "a new import circle in face/"
    assert [c for c in KNOWN_CIRCLES if c not in found] == [], "a known circle is gone: take it off KNOWN_CIRCLES"


def test_the_circle_check_finds_a_circle_through_a_function_level_import(tmp_path, monkeypatch):
    pkg = tmp_path / "circ"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circ import b\n")
    (pkg / "b.py").write_text("def f():\n    from circ.c import g\n")
    (pkg / "c.py").write_text("import circ.a\n\ndef g():\n    pass\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nimport circ.e\nif TYPE_CHECKING:\n    import circ.d\n")
    (pkg / "e.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circ import d\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_circles("circ") == [{"circ.a", "circ.b", "circ.c"}]  # d <-> e only for the type checker
