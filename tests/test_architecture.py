"""The import graph's rules (issue 58), read from the source with `ast` (nothing is imported):

- no import cycle among the modules of the base package, the library, the commands, the
  studies and the benchmarks;
- the base package (`keras_tupe_base`) imports the standard library alone, in its functions
  too: it is what a command reads before Keras, and what every other package builds on;
- the library imports neither its commands nor the checkout's scripts, studies or benchmarks;
- models never import data code (data code may build on the models);
- the layers import only layers and the base package;
- studies and benchmarks never import the scripts (`training`) nor the commands
  (`keras_tupe_cli`): the commands sit on top of the library, and what all of them share
  before Keras is in the base package;
- the studies import no benchmark (the FLOP count is the base package's), but for the stage
  reading the flags of the benchmark command it runs;
- in the library, a function-local import is of an optional dependency only;
- in the studies and the benchmarks, a function-local import is never of a module that
  imports the standard library alone (such a module costs nothing at the top, where the
  reader and the import graph see it); Keras, the library and their like may stay local.
"""

import ast
import functools
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("keras_tupe_base", "keras_tupe", "keras_tupe_cli", "training", "experiments",
            "benchmarks")
# The optional dependencies a library function may import where it needs them.
OPTIONAL = ("tensorflow", "tensorflow_text", "tensorflow_datasets", "grain", "torch",
            "matplotlib", "safetensors", "h5py", "sacremoses", "jax")


def module_name(path):
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules():
    """The packages' modules; a `tests` folder inside one (the window's,
    `experiments/stage/tests`) is test code, as `tests/` is, and not among them."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "tests" not in path.relative_to(REPO).parts:
                modules[module_name(path)] = path
    return modules


MODULES = source_modules()


def resolve(name, modules):
    """The module of ours that `name` (a module or a module's attribute) lands in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports(path, module, modules):
    """(target module, line, whether inside a function) of each import of ours in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
                    for _ in range(child.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}".strip(".")
                names = [f"{base}.{alias.name}" for alias in child.names] or [base]
            else:
                visit(child, nested)
                continue
            for name in names:
                found.append((name, child.lineno, in_function))
    visit(tree, False)
    return [(resolve(name, modules), name, line, local) for name, line, local in found]


def graph():
    edges = {}
    for module, path in MODULES.items():
        edges[module] = {target for target, _, _, _ in imports(path, module, MODULES)
                         if target and target != module}
    return edges


def find_cycle(edges):
    """One cycle as a list of modules, or None (depth-first search, three colours)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle():
    # A package's __init__ importing its own modules is how a package exposes them, not a
    # cycle: the edges from a package to its submodules are left out.
    edges = {module: {target for target in targets if not target.startswith(module + ".")}
             for module, targets in graph().items()}
    assert find_cycle(edges) is None


def offending(rule_source, forbidden):
    return sorted((module, target) for module, targets in graph().items()
                  if rule_source(module) for target in targets if forbidden(target))


def inside(module, package):
    return module == package or module.startswith(package + ".")


def test_the_library_imports_no_command_script_study_or_benchmark():
    assert offending(lambda m: inside(m, "keras_tupe"),
                     lambda t: any(inside(t, p) for p in PACKAGES[2:])) == []


def test_models_import_no_data_code():
    assert offending(lambda m: inside(m, "keras_tupe.models"),
                     lambda t: inside(t, "keras_tupe.data")) == []


def test_layers_import_only_layers_and_the_base_package():
    allowed = ("keras_tupe.layers", "keras_tupe_base")
    assert offending(lambda m: inside(m, "keras_tupe.layers"),
                     lambda t: not any(inside(t, a) for a in allowed)) == []


def base_imports(module):
    """(import, line) of every import in a module of the base package, functions' included,
    that is not of the standard library or of the base package itself."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append(("." * node.level + (node.module or ""), node.lineno))
    return [(name, line) for name, line in found
            if name.split(".")[0] not in (*sys.stdlib_module_names, "keras_tupe_base")]


def test_the_base_package_imports_the_standard_library_alone():
    # The commands import it before Keras (a usage error in a fraction of a second), the
    # library and the studies build on it: any other import, even in a function, would
    # bring Keras's seconds, or a package a GPU machine lacks, back under them.
    base = sorted(m for m in MODULES if inside(m, "keras_tupe_base"))
    assert {"keras_tupe_base.settings", "keras_tupe_base.staging",
            "keras_tupe_base.output_lock"} <= set(base)
    assert {module: base_imports(module) for module in base} == dict.fromkeys(base, [])


def test_the_rule_of_the_base_package_sees_imports_inside_functions(tmp_path, monkeypatch):
    module = tmp_path / "probe.py"
    module.write_text("import os\n\ndef f():\n    import numpy\n    from . import x\n")
    monkeypatch.setitem(MODULES, "keras_tupe_base.probe", module)
    assert base_imports("keras_tupe_base.probe") == [("numpy", 4), (".", 5)]


def test_studies_and_benchmarks_never_import_the_scripts():
    assert offending(lambda m: inside(m, "experiments") or inside(m, "benchmarks"),
                     lambda t: inside(t, "training")) == []


def test_studies_and_benchmarks_never_import_the_commands():
    # One-line errors and the quiet TensorFlow start are keras_tupe_base.command_line's, the
    # FLOP count keras_tupe_base.flops': nothing a study or a benchmark needs is a command's.
    assert offending(lambda m: inside(m, "experiments") or inside(m, "benchmarks"),
                     lambda t: inside(t, "keras_tupe_cli")) == []


def test_the_studies_import_no_benchmark_but_the_flags_of_a_stages_command():
    # A GPU stage may run `python -m benchmarks.encoders ...`; the stage's `prepare` counts
    # that command's rows from the benchmark's own parser (a second one would be a copy).
    assert offending(lambda m: inside(m, "experiments"), lambda t: inside(t, "benchmarks")) == [
        ("experiments.stage.prepare", "benchmarks.encoders.cli")]


@functools.cache
def top_imports(module, path):
    """(our module or None, import) of each import at the top of a module: what importing
    it runs (its functions' imports wait until they are called)."""
    return [(target, name) for target, name, _, local in imports(path, module, MODULES)
            if not local]


def standard_library_only(module):
    """Whether importing `module` (ours) imports the standard library alone: its packages'
    `__init__`s and its top-level imports, followed through our modules."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        parts = current.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # its packages run first
        for target, name in top_imports(current, MODULES[current]):
            if target is None and name.split(".")[0] not in sys.stdlib_module_names:
                return False
            todo += [target] if target else []
    return True


def local_imports_of_light_modules(module):
    """`path:line: module` of each function-local import in `module` of a module that
    imports the standard library alone (the standard library's own modules too)."""
    path = MODULES[module]
    found = {}
    for target, name, line, local in imports(path, module, MODULES):
        light = (standard_library_only(target) if target
                 else name.split(".")[0] in sys.stdlib_module_names)
        if local and light:
            found.setdefault(f"{path.relative_to(REPO)}:{line}", []).append(target or name)
    return [f"{where}: {', '.join(dict.fromkeys(names))}" for where, names in found.items()]


@pytest.mark.parametrize("package", ["experiments", "benchmarks"])
def test_studies_and_benchmarks_import_standard_library_only_modules_at_the_top(package):
    found = [line for module in sorted(MODULES) if inside(module, package)
             for line in local_imports_of_light_modules(module)]
    assert not found, ("function-local imports of modules that import the standard library "
                       "alone; move them to the module's top:\n" + "\n".join(found))


def test_the_rule_of_local_imports_sees_light_modules_only(tmp_path, monkeypatch):
    module = tmp_path / "experiments" / "probe.py"
    module.parent.mkdir()
    module.write_text("import os\n\ndef f():\n    import json\n    from experiments import records\n"
                      "    import numpy\n    from keras_tupe import models\n"
                      "    from experiments.report import report\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setitem(MODULES, "experiments.probe", module)
    assert standard_library_only("experiments.records")
    assert not standard_library_only("experiments.report")  # NumPy, through its siblings
    assert local_imports_of_light_modules("experiments.probe") == [
        "experiments/probe.py:4: json", "experiments/probe.py:5: experiments.records"]


# Function-local imports of non-optional modules in the library, each with its reason.
LOCAL_BY_REASON = {}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if inside(m, "keras_tupe")))
def test_library_function_local_imports_are_of_optional_dependencies(module):
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    local = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    local += [(alias.name, node.lineno) for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    local.append((node.module, node.lineno))
    assert [(name, line) for name, line in sorted(set(local))
            if name.split(".")[0] not in OPTIONAL and (module, name) not in LOCAL_BY_REASON] == []
