"""Rules over the whole source tree that a reviewer would otherwise check by hand.

- No Python file edits ``sys.path``: the package, the benchmarks, the examples, the
  tests and the Sphinx configuration import what is installed (``pip install -e .``)
  or what ``python -m`` finds from the repository root.
- No import cycle among the modules of ``avalanche_sdr/``, nor among those of
  ``benchmarks/`` (the harness), read with the standard library alone (``ast``).
- No arrow back up in ``benchmarks/``: a module imports only those of its layer or below
  (:data:`HARNESS_LAYERS`: the Table 2 engine, then the studies, then the commands), no
  module of ``benchmarks/table2/`` imports a study, and a package's ``__init__`` imports
  none of its modules.
- No Python file under ``docs/`` but Sphinx's ``conf.py``: scripts live in ``benchmarks/``.

What counts as an import (:func:`import_graph`): every ``import`` and ``from ... import``
statement of a module, at module level and inside functions alike, since an import
deferred into a function still makes the two modules depend on each other (a layering
cycle that only the call order keeps from failing). Not counted: imports under ``if
TYPE_CHECKING:`` (never run), ``importlib.import_module`` with a computed name (the
package ``__init__``'s lazy exports), and the parent packages that Python runs before a
module it imports (a package re-exporting its modules would otherwise make every
module that imports a sibling part of a cycle). ``from package import name`` counts
as importing ``package.name`` when that is a module, else ``package`` itself.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Set

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".git", "build", "_build", "results", ".eggs"}
EDIT = re.compile(r"\bsys\.path\s*(\.\s*(insert|append|extend|remove|pop|clear)\b|\[[^\]]*\]\s*=|\s*[+]?=(?!=))")


def _python_files():
    for path in ROOT.rglob("*.py"):
        parts = set(path.relative_to(ROOT).parts)
        if not parts & SKIP and not any(p.endswith(".egg-info") for p in parts):
            yield path


def test_the_pattern_finds_each_way_of_editing_sys_path():
    edits = ["sys.path.insert(0, ROOT)", "sys.path.append('x')", "sys.path = ['x']", "sys.path += ['x']",
             "sys.path[:0] = ['x']", "sys.path .extend(['x'])"]
    reads = ["print(sys.path)", "if sys.path == []:", "x = list(sys.path)", "# see sys.path_hooks"]
    assert all(EDIT.search(line) for line in edits)
    assert not any(EDIT.search(line) for line in reads)


def test_no_python_file_edits_sys_path():
    files = list(_python_files())
    assert any(p.name == "conf.py" for p in files) and len(files) > 50
    assert ROOT / "benchmarks" / "studies" / "where_the_time_goes" / "train_step_cpu.py" in files  # the harness too
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in files
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if EDIT.search(line) and p != Path(__file__).resolve()]
    assert not offenders, "edit of sys.path (install the package instead):\n" + "\n".join(offenders)


# ---------------------------------------------------------------------- import cycles


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node of ``tree``, at any depth, outside ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(sources: Dict[str, str]) -> Dict[str, Set[str]]:
    """Module -> the modules among ``sources`` it imports (module doc: what counts).

    :param sources: dotted module name -> its source text (a package as its own name,
        the text of its ``__init__.py``; ``is_package`` is read from ``__init__`` names
        given as ``"pkg"`` with submodules ``"pkg.x"``).
    """
    known = set(sources)
    graph: Dict[str, Set[str]] = {name: set() for name in sources}
    for name, text in sources.items():
        is_package = any(other.startswith(name + ".") for other in known)
        package = name if is_package else name.rpartition(".")[0]
        for node in _imports(ast.parse(text)):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
            for target in targets:
                while target and target not in known:  # import a.b.c of a module a.b: an edge to a.b
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted:
    every import cycle lies inside one of them."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    components: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def _package_sources(package: str) -> Dict[str, str]:
    root = ROOT / package
    return {_module_name(path, ROOT): path.read_text(encoding="utf-8") for path in sorted(root.rglob("*.py"))
            if not set(path.relative_to(ROOT).parts) & SKIP}


def _cycle_report(cycles: List[List[str]], graph: Dict[str, Set[str]]) -> str:
    lines = []
    for cycle in cycles:
        members = set(cycle)
        lines.append(" <-> ".join(cycle) + ": " + "; ".join(
            f"{m} -> {', '.join(sorted(graph[m] & members))}" for m in cycle))
    return "\n".join(lines)


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import_and_nothing_else():
    sources = {
        "pkg": "",
        "pkg.low": "import math\n",
        "pkg.a": "from pkg.low import x\nfrom . import b\n",
        "pkg.b": "def f():\n    from pkg.c import y\n",
        "pkg.c": "import pkg.a.z\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.low\n",
        "pkg.d": "if TYPE_CHECKING:\n    from pkg import e\n",
        "pkg.e": "from pkg import d\n",
    }
    graph = import_graph(sources)
    assert graph["pkg.a"] == {"pkg.low", "pkg.b"} and graph["pkg.c"] == {"pkg.a"} and graph["pkg.d"] == set()
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    sources["pkg.b"] = "import pkg.low\n"
    assert find_cycles(import_graph(sources)) == []


def test_no_import_cycle_in_the_library():
    sources = _package_sources("avalanche_sdr")
    assert "avalanche_sdr.training.strategy" in sources and len(sources) > 50
    graph = import_graph(sources)
    cycles = find_cycles(graph)
    assert not cycles, "import cycles in avalanche_sdr/ (cut each at a leaf module):\n" + _cycle_report(cycles, graph)


def test_no_import_cycle_in_the_harness():
    sources = _package_sources("benchmarks")
    assert "benchmarks.table2" in sources
    graph = import_graph(sources)
    cycles = find_cycles(graph)
    assert not cycles, "import cycles in benchmarks/ (cut each at a leaf module):\n" + _cycle_report(cycles, graph)


# ---------------------------------------------------------------------- private state


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _root(node: ast.AST) -> ast.AST:
    """The object an attribute chain starts from: ``self`` for ``self.a.b``."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def private_state_writes(module: str, source: str, known: Set[str]) -> List[str]:
    """Where the module ``module`` (its ``source``) touches another module's private state.

    Flagged: an assignment, augmented assignment or ``del`` of ``<expr>._name`` where
    ``<expr>`` is not ``self``/``cls`` and ``_name`` is not an attribute this module sets
    through ``self`` (its own classes' state); an item assigned into or deleted from
    another object's container, ``<expr>.name[key] = ...`` (the owner's methods write it,
    e.g. ``model.set_exemplars``, not ``model.entry_exemplars[key] = ...``); any use of
    ``<expr>.__dict__`` but ``self.__dict__``; ``setattr``/``delattr`` of a private name on anything but
    ``self``/``cls``; a private name imported from another module of ``known`` (dotted
    names), or read as ``<module>._name`` through an imported module of ``known``.

    :return: one line per finding, ``module:line: what``.
    """
    tree = ast.parse(source)
    own = {node.attr for node in ast.walk(tree)
           if isinstance(node, ast.Attribute) and _is_self(node.value) and isinstance(node.ctx, ast.Store)}
    modules: Dict[str, str] = {}
    found = []
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            modules.update({alias.asname or alias.name: alias.name for alias in node.names if alias.name in known})
            continue
        base = node.module or ""
        for alias in node.names:
            if base in known and _is_private(alias.name) and f"{base}.{alias.name}" not in known:
                found.append(f"{module}:{node.lineno}: imports the private {base}.{alias.name}")
            if f"{base}.{alias.name}" in known:
                modules[alias.asname or alias.name] = f"{base}.{alias.name}"
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete))
                   else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            if (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute)
                    and not _is_self(_root(target.value)) and target.value.attr != "__dict__"):
                found.append(f"{module}:{node.lineno}: writes into {ast.unparse(target.value)}")
            for part in ast.walk(target):
                if (isinstance(part, ast.Attribute) and _is_private(part.attr) and not _is_self(part.value)
                        and part.attr not in own):
                    found.append(f"{module}:{node.lineno}: writes {ast.unparse(part)}")
        if isinstance(node, ast.Attribute) and node.attr == "__dict__" and not _is_self(node.value):
            found.append(f"{module}:{node.lineno}: reaches into {ast.unparse(node)}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
                and len(node.args) >= 2 and not _is_self(node.args[0]) and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str) and _is_private(node.args[1].value)):
            found.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Attribute) and _is_private(node.attr) and ast.unparse(node.value) in modules:
            found.append(f"{module}:{node.lineno}: uses the private {modules[ast.unparse(node.value)]}.{node.attr}")
    return found


def test_the_private_state_check_finds_each_kind_of_reach():
    known = {"pkg", "pkg.a", "pkg.b"}
    source = (
        "from pkg.b import _helper, public\n"
        "import pkg.b\n"
        "class Owner:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "    def copy(self, other):\n"
        "        other._mine = self._mine\n"  # this module's own state: allowed
        "def reach(model):\n"
        "    model._cache = {}\n"
        "    model.__dict__['_kept'] = 2\n"
        "    setattr(model, '_x', 3)\n"
        "    del model._cache\n"
        "    model.stored[3] = None\n"
        "    return pkg.b._secret\n"
    )
    found = private_state_writes("pkg.a", source, known)
    assert sorted(line.split(": ", 1)[1] for line in found) == sorted([
        "imports the private pkg.b._helper", "writes model._cache", "writes model._cache",
        "reaches into model.__dict__", "setattr(model, '_x', 3)", "uses the private pkg.b._secret",
        "writes into model.stored",
    ])
    assert private_state_writes("pkg.a", "class A:\n    def f(self, o):\n        self._x = o._y\n", known) == []


def test_no_library_module_writes_another_modules_private_state():
    """Every piece of state has one owner, changed through its owner's methods (issue #46:
    the LDA router wrote the repository's ``_lda_cache`` and the learning reuse its
    ``entry_exemplars[...]``; now the router keeps what it derives itself and the reuse
    calls ``model.set_exemplars``)."""
    sources = _package_sources("avalanche_sdr")
    found = [line for name, text in sources.items() for line in private_state_writes(name, text, set(sources))]
    assert not found, "private state reached from outside its module:\n" + "\n".join(found)
def test_no_python_file_under_docs_but_the_sphinx_configuration():
    scripts = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.py") if p != ROOT / "docs" / "conf.py")
    assert not scripts, "Python files under docs/ (move them into benchmarks/, with a test):\n" + "\n".join(scripts)


# ---------------------------------------------------------------------- the harness's layers

HARNESS_LAYERS = (
    ("benchmarks.table2.catalogue",),
    ("benchmarks.table2.variants",),
    ("benchmarks.table2.methods",),
    ("benchmarks.table2.tuning",),
    ("benchmarks.table2.specs",),
    ("benchmarks.table2.engine",),
    ("benchmarks.table2.executors", "benchmarks.table2.report", "benchmarks.table2.equal_memory"),
    ("benchmarks.table2.tuning_runs",),
    ("benchmarks.studies", "benchmarks.stream_designs"),
    ("benchmarks.table2.command", "benchmarks.table2.gpu_check"),
    ("benchmarks.table2.__main__",),
)
"""The modules of ``benchmarks/`` from the bottom up (a name stands for itself and the
modules under it): the names a parser offers, the rows and their builders, the tuning
grids, what a run is, the engine, where runs execute and what is written, then the studies
and the generated stream designs (which may use any of those), and last the commands. A module imports only modules of its
own layer or below; the package ``__init__`` modules import nothing."""

def _layer(module: str) -> int:
    for index, layer in enumerate(HARNESS_LAYERS):
        if any(module == name or module.startswith(name + ".") for name in layer):
            return index
    raise KeyError(module)


def _harness_graph():
    sources = _package_sources("benchmarks")
    packages = {name for name in sources if any(other.startswith(name + ".") for other in sources)}
    return import_graph(sources), packages


def arrows_back_up(graph: Dict[str, Set[str]], packages: Set[str]) -> List[str]:
    """Every import of ``graph`` that goes against :data:`HARNESS_LAYERS`: from a package's
    ``__init__``, from a lower layer to a higher one, and from ``benchmarks/table2/`` (the
    commands included) to a study."""
    found = []
    for module, targets in sorted(graph.items()):
        if module in packages:
            found += [f"{module} (a package's __init__) -> {t}" for t in sorted(targets)]
            continue
        for target in sorted(targets - packages):
            if _layer(target) > _layer(module):
                found.append(f"{module} -> {target} (layer {_layer(module)} imports layer {_layer(target)})")
            elif module.startswith("benchmarks.table2.") and target.startswith("benchmarks.studies."):
                found.append(f"{module} -> {target} (benchmarks/table2/ imports a study)")
    return found


def test_the_layer_check_finds_each_kind_of_arrow_back_up():
    graph = {"benchmarks.table2": set(), "benchmarks.table2.engine": {"benchmarks.table2.command"},
             "benchmarks.table2.methods": {"benchmarks.studies.small_tasks", "benchmarks.table2.catalogue"},
             "benchmarks.studies.small_tasks": {"benchmarks.table2.engine", "benchmarks.table2.gpu_check"},
             "benchmarks.studies": {"benchmarks.studies.small_tasks"}, "benchmarks.table2.catalogue": set(),
             "benchmarks.table2.command": {"benchmarks.table2.engine", "benchmarks.studies.small_tasks"},
             "benchmarks.table2.gpu_check": set()}
    found = arrows_back_up(graph, {"benchmarks.table2", "benchmarks.studies"})
    assert found == ["benchmarks.studies (a package's __init__) -> benchmarks.studies.small_tasks",
                     "benchmarks.studies.small_tasks -> benchmarks.table2.gpu_check (layer 8 imports layer 9)",
                     "benchmarks.table2.command -> benchmarks.studies.small_tasks (benchmarks/table2/ imports a study)",
                     "benchmarks.table2.engine -> benchmarks.table2.command (layer 5 imports layer 9)",
                     "benchmarks.table2.methods -> benchmarks.studies.small_tasks (layer 2 imports layer 8)"]


def test_no_arrow_back_up_in_the_harness():
    graph, packages = _harness_graph()
    assert "benchmarks.table2.engine" in graph and "benchmarks.studies.detection.sim" in graph
    unplaced = []
    for module in sorted(set(graph) - packages):
        try:
            _layer(module)
        except KeyError:
            unplaced.append(module)
    assert not unplaced, ("modules of benchmarks/ in no layer of HARNESS_LAYERS (a study goes under "
                          "benchmarks/studies/, one module or package per results page):\n" + "\n".join(unplaced))
    found = arrows_back_up(graph, packages)
    assert not found, "imports against benchmarks/' layers (tests/test_source_tree.py, HARNESS_LAYERS):\n" + \
        "\n".join(found)
