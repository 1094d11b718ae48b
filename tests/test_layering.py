"""The one layering rule import-linter has no contract for (pyproject.toml holds the
rest, and `make test` runs `lint-imports`): no import cycle anywhere in tfcomp, imports
inside functions included. grimp, import-linter's graph, reads every import statement
of every module, wherever it stands."""
import grimp
from tests.stacks import TREE_ONLY

pytestmark = TREE_ONLY


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_tfcomp_has_no_import_cycle():
    graph = grimp.build_graph("tfcomp", cache_dir=None)
    assert len(graph.modules) > 50  # the whole package was read
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph) == [["pkg.a", "pkg.b"]]
