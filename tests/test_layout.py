"""How the tests and the benchmarks hang together: the tests of the library do not use
benchmarks/ (only tests/benchmarks/, the benchmark scripts' own tests, do), and every
module a test or a benchmark launches by name ("tests.workers.mwms_worker",
"benchmarks.e2e.worker") exists. Plain Python: no TensorFlow."""
import ast
import importlib.util
import pathlib
import re
from tests.stacks import TREE_ONLY

pytestmark = TREE_ONLY

ROOT = pathlib.Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
BENCHMARK_TESTS = TESTS / "benchmarks"
MODULE_NAME = re.compile(r"(tests|benchmarks)(\.\w+)+")
RUNS_A_BENCHMARK = re.compile(r"-m\s+benchmarks\b")


def _python_files(*folders):
    return sorted(p for folder in folders for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _docstrings(tree):
    """The string constants that are docstrings (prose, which may name a benchmark)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _strings(tree):
    docstrings = _docstrings(tree)
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def uses_of_benchmarks(source, where):
    """'where:line: what' of each import of the benchmarks package in source (Python text),
    and of each string that runs or names one of its modules (`python -m benchmarks.X`, a
    launcher's 'benchmarks.X'); docstrings are prose and may name them."""
    tree = ast.parse(source, where)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{where}:{node.lineno}: import {a.name}" for a in node.names
                      if a.name == "benchmarks" or a.name.startswith("benchmarks.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "benchmarks" or node.module.startswith("benchmarks.")):
            found.append(f"{where}:{node.lineno}: from {node.module} import ...")
    for node in _strings(tree):
        if RUNS_A_BENCHMARK.search(node.value) or (MODULE_NAME.fullmatch(node.value)
                                                    and node.value.startswith("benchmarks.")):
            found.append(f"{where}:{node.lineno}: {node.value!r}")
    return found


def test_only_the_benchmark_tests_use_benchmarks():
    this = pathlib.Path(__file__).resolve()  # its own samples name benchmarks
    files = [p for p in _python_files(TESTS) if BENCHMARK_TESTS not in p.parents and p != this]
    assert len(files) > 40  # the whole suite was read
    used = [use for path in files
            for use in uses_of_benchmarks(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert used == [], ("tests of the library must not use benchmarks/ (a test of a benchmark belongs in "
                        "tests/benchmarks/):\n" + "\n".join(used))


def test_the_finder_finds_imports_and_launched_modules():
    source = ('"""Prose may name benchmarks.e2e."""\n'
              "import benchmarks.e2e.report\n"
              "from benchmarks.harness import timing\n"
              "def f():\n"
              "    from benchmarks import harness\n"
              "    run_workers('benchmarks.e2e.worker', 2)\n"
              "    return ['python', '-m benchmarks.main_job'], 'benchmarks/results/x.md', 'tests.workers.x'\n")
    assert [use.split(": ", 1)[1] for use in uses_of_benchmarks(source, "sample.py")] == [
        "import benchmarks.e2e.report", "from benchmarks.harness import ...", "from benchmarks import ...",
        "'benchmarks.e2e.worker'", "'-m benchmarks.main_job'"]


def _runnable(name):
    """Whether `python -m name` runs something: a module, or a package with a __main__.py."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        return False
    return spec.submodule_search_locations is None or any(
        (pathlib.Path(location) / "__main__.py").is_file() for location in spec.submodule_search_locations)


def test_every_module_launched_by_name_exists():
    """Module names in strings (what run_workers, horovodrun, a Launcher and `python -m` are
    given) name a module of tests/ or benchmarks/ that runs."""
    names = []
    for path in _python_files(TESTS, ROOT / "benchmarks"):
        names += [(f"{path.relative_to(ROOT)}:{node.lineno}", node.value)
                  for node in _strings(ast.parse(path.read_text(encoding="utf-8"), str(path)))
                  if MODULE_NAME.fullmatch(node.value)]
    assert len(names) > 20  # the workers of the tests and of the benchmarks were found
    missing = [f"{where}: {name!r}" for where, name in names if not _runnable(name)]
    assert missing == [], "\n".join(missing)
