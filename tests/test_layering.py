"""The sans-IO engine (``mplex._engine``) never imports trio; ``import mplex`` never
imports py-libp2p."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The sans-IO engine: every module of the mplex._engine package.
SANS_IO = sorted(
    "mplex._engine" + ("" if path.stem == "__init__" else f".{path.stem}")
    for path in (ROOT / "mplex" / "_engine").glob("*.py")
)


def test_sans_io_modules_do_not_import_trio() -> None:
    # Load the modules from their files without running mplex/__init__.py, which
    # imports the trio layer on purpose.
    code = (
        "import importlib.util, sys, pathlib\n"
        "import mplex as _probe\n"
        "root = pathlib.Path(_probe.__file__).parent\n"
        "for name in [n for n in sys.modules if n == 'trio' or n.startswith(('trio.', 'mplex'))]:\n"
        "    del sys.modules[name]\n"
        "pkg = importlib.util.module_from_spec(importlib.util.spec_from_file_location("
        "'mplex', root / '__init__.py', submodule_search_locations=[str(root)]))\n"
        "sys.modules['mplex'] = pkg\n"
        f"for mod in {SANS_IO!r}:\n"
        "    importlib.import_module(mod)\n"
        "print(sorted(n for n in sys.modules if n == 'trio' or n.startswith('trio.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_import_mplex_imports_neither_mplex_libp2p_nor_py_libp2p() -> None:
    code = (
        "import sys, mplex; print(sorted(n for n in sys.modules if n.startswith(('mplex.libp2p', 'libp2p'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _modules() -> dict[str, pathlib.Path]:
    """Every module of the package, by dotted name."""
    found = {}
    for path in (ROOT / "mplex").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The package's modules that ``name`` imports, ``TYPE_CHECKING`` imports included
    (a cycle of those is still a cycle of design)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            candidates = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found |= {c for c in candidates if c in modules and c != name}
    return found


def test_no_module_imports_itself_through_others() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    # A package's __init__ imports its modules, which import their package only for
    # its submodules: edges into an __init__ are not a design cycle.
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph = {name: {t for t in targets if t not in packages} for name, targets in graph.items()}
    cycles = []
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                cycles.append([*trail[trail.index(target) :], target])
            elif target not in state:
                visit(target, [*trail, target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def _private_reads_of_others(path: pathlib.Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self``/``cls`` (and not a module): a read of
    another object's private member."""
    tree = ast.parse(path.read_text())
    module_names = {
        alias.asname or alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    own = {"self", "cls", *module_names}
    return [
        f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in own)
    ]


def test_objects_keep_to_their_own_private_members() -> None:
    paths = sorted((ROOT / "mplex").rglob("*.py"))
    reads = [read for path in paths for read in _private_reads_of_others(path)]
    assert len(reads) <= 6, "\n".join(reads)


def test_no_module_is_over_about_four_hundred_lines() -> None:
    """One noun per module, small enough to read whole (the limit leaves a little room)."""
    paths = sorted((ROOT / "mplex").rglob("*.py"))
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in paths}
    assert {name: size for name, size in sizes.items() if size > 420} == {}


def _engine_fields() -> set[str]:
    """Every field of an engine object: a name its classes assign on ``self`` or list
    in ``__slots__``."""
    fields: set[str] = set()
    for path in (ROOT / "mplex" / "_engine").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    fields.add(node.attr)
            elif isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__slots__" for target in node.targets
            ):
                fields.update(ast.literal_eval(node.value))
    return fields


def _stores_into(path: pathlib.Path, fields: set[str]) -> list[str]:
    """``x.name = ...``, ``x.name += ...`` and ``del x.name`` in ``path`` where ``name``
    is one of ``fields`` and ``x`` is not ``self``: a store into another object's field."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        else:
            continue
        found.extend(
            f"{path.relative_to(ROOT)}:{part.lineno} {ast.unparse(part)}"
            for target in targets
            for part in ast.walk(target)
            if isinstance(part, ast.Attribute)
            and part.attr in fields
            and not (isinstance(part.value, ast.Name) and part.value.id == "self")
        )
    return found


def test_nothing_outside_the_engine_stores_into_engine_objects() -> None:
    """The sans-IO boundary is an API, not shared memory: the layers that hold engine
    objects (the trio layer, and the py-libp2p adapter over it) change the protocol
    connection, its outbox and its stream records only through their methods."""
    fields = _engine_fields()
    assert {"buffer", "frames", "waiter", "may_send", "state"} <= fields  # the rule sees them
    layers = [ROOT / "mplex" / "_trio", ROOT / "mplex" / "libp2p"]
    outside = sorted(path for layer in layers for path in layer.rglob("*.py"))
    stores = [store for path in outside for store in _stores_into(path, fields)]
    assert stores == [], "\n".join(stores)
