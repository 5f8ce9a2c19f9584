"""The import graph of the project's packages, tools and tests: who may import whom, and no cycle anywhere.

Read from the source with `ast` (every import: at the top, inside functions, under TYPE_CHECKING),
so a lazy import cannot hide a dependency; a name taken from a package (`from a import b`) depends
on the package's `__init__` too, which runs first and is read. The rules are docs/ARCHITECTURE.md's:
the wire imports nothing of ours; the SDK and the services' common code import the wire and not each
other; the networks (craftai_models) import nothing of ours; prepare and infer share the networks
and never import each other; the catalogue needs neither; infer's pipelines import only pipelines
and networks. Around them: the services and the SDK never import the development code; craftai_dev
(what the tests and the tools share) imports neither the tests nor the tools; the tools never import
the tests.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = {
    "craftai_wire": REPO / "clients/wire/src/craftai_wire",
    "craftai": REPO / "clients/python/src/craftai",
    "craftai_common": REPO / "services/common/src/craftai_common",
    "craftai_models": REPO / "services/models/src/craftai_models",
    "craftai_catalogue": REPO / "services/catalogue/src/craftai_catalogue",
    "craftai_prepare": REPO / "services/prepare/src/craftai_prepare",
    "craftai_infer": REPO / "services/infer/src/craftai_infer",
    "craftai_dev": REPO / "dev/support/src/craftai_dev",
    "tools": REPO / "tools",
    "tests": REPO / "tests",
}
SHIPPED = {"craftai_wire", "craftai", "craftai_common", "craftai_models", "craftai_catalogue", "craftai_prepare"}
SHIPPED |= {"craftai_infer"}
# package -> the project packages it may import (besides itself)
ALLOWED = {
    "craftai_wire": set(),
    "craftai": {"craftai_wire"},
    "craftai_common": {"craftai_wire"},
    "craftai_models": set(),
    "craftai_catalogue": {"craftai_common", "craftai_wire"},
    "craftai_prepare": {"craftai_common", "craftai_models", "craftai_wire"},
    "craftai_infer": {"craftai_common", "craftai_models", "craftai_wire"},
    "craftai_dev": SHIPPED,
    "tools": SHIPPED | {"craftai_dev"},
    "tests": SHIPPED | {"craftai_dev", "tools"},
}
# `craftai serve` starts the three services in one process: the SDK's command imports them there.
ALLOWED_MODULES = {"craftai.serve": {"craftai_catalogue", "craftai_prepare", "craftai_infer", "craftai_common"}}


def _modules() -> dict[str, Path]:
    found = {}
    for package, root in SOURCES.items():
        for path in root.rglob("*.py"):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The project modules `name` imports: `from a.b import c` is module a.b.c when that is a module, else a.b."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
            targets.append(base)  # the names are read from `base`: its package face (__init__) runs first
        else:
            continue
        for target in targets:
            module = target
            while module and module not in MODULES:  # `import a.b.c` of a non-module attribute: its module
                module = module.rpartition(".")[0]
            if module and module != name:
                found.add(module)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """Every module's project imports, read when a test asks rather than at collection: each pytest
    worker collects every module, and one of them runs these tests."""
    return {name: _imports(name, path) for name, path in MODULES.items()}


def _top(module: str) -> str:
    return module.split(".", maxsplit=1)[0]


def test_every_package_imports_only_what_it_may(graph: dict[str, set[str]]) -> None:
    wrong = defaultdict(set)
    for module, targets in graph.items():
        allowed = ALLOWED[_top(module)] | ALLOWED_MODULES.get(module, set()) | {_top(module)}
        for target in targets:
            if _top(target) not in allowed:
                wrong[module].add(target)
    assert not wrong, f"imports across packages that the architecture does not allow: {dict(wrong)}"


def test_prepare_and_infer_never_import_each_other_and_common_never_imports_the_sdk(
    graph: dict[str, set[str]],
) -> None:
    def reaches(module: str, other: str) -> bool:
        return any(_top(t) == other for t in graph[module])

    assert not [m for m in graph if _top(m) == "craftai_prepare" and reaches(m, "craftai_infer")]
    assert not [m for m in graph if _top(m) == "craftai_infer" and reaches(m, "craftai_prepare")]
    assert not [m for m in graph if _top(m) == "craftai_common" and reaches(m, "craftai")]


PIPELINES = "craftai_infer.pipelines"


def _outside_pipelines(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """What infer's pipelines import of ours beyond other pipelines and the networks' package."""
    wrong = {}
    for module, targets in graph.items():
        if module == PIPELINES or module.startswith(PIPELINES + "."):
            beyond = {
                t
                for t in targets
                if t != PIPELINES and not t.startswith(PIPELINES + ".") and _top(t) != "craftai_models"
            }
            if beyond:
                wrong[module] = beyond
    return wrong


def test_infer_pipelines_are_pure(graph: dict[str, set[str]]) -> None:
    """docs/ARCHITECTURE.md: pipelines/ are arrays in and out. They import no decoder (pictures.py),
    no route, no feature, no engine, nothing of the wire or of the services' common code: a pipeline
    runs alone, in a test or a benchmark, with what it is given."""
    assert _outside_pipelines(graph) == {}


def test_the_pipeline_fence_finds_a_pipeline_importing_the_decoder() -> None:
    """The check above must be able to fail."""
    graph = {
        f"{PIPELINES}.matte_outputs": {"craftai_infer.pictures", f"{PIPELINES}.foreground", "craftai_models.imagenet"},
        f"{PIPELINES}.foreground": set(),
        "craftai_infer.pictures": {f"{PIPELINES}.picture_convert"},
    }
    assert _outside_pipelines(graph) == {f"{PIPELINES}.matte_outputs": {"craftai_infer.pictures"}}


def test_tools_and_tests_find_the_packages_in_the_environment() -> None:
    """No module of tools/ or tests/ puts the checkout on sys.path: the packages and craftai_dev are
    installed (tools/bootstrap.sh --dev), and a tool runs as `python -m tools.…` from the root."""

    def changes_sys_path(path: Path) -> bool:
        return any(
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
        )

    assert [m for m, path in MODULES.items() if _top(m) in {"tools", "tests"} and changes_sys_path(path)] == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_there_is_no_import_cycle(graph: dict[str, set[str]]) -> None:
    assert _cycles(graph) == []


def test_a_name_taken_from_a_package_goes_through_its_face(tmp_path: Path) -> None:
    """`from craftai import calls` reads craftai/__init__ (which imports the clients): an edge to the
    package itself, so that a module of the SDK written so is in a cycle; `from craftai.calls
    import X` is not."""
    source = tmp_path / "methods.py"
    source.write_text("from craftai import calls\nfrom craftai.outputs import MatteOutput\n")
    assert _imports("craftai.methods", source) == {"craftai", "craftai.calls", "craftai.outputs"}


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above must be able to fail."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", sorted(SOURCES))
def test_the_graph_sees_every_package(package: str, graph: dict[str, set[str]]) -> None:
    assert any(_top(m) == package for m in graph)
