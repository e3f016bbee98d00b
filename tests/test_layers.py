"""The import graph of dpjax: no circle, and imports only point down the layers.

The imports are read from the source (``ast``), top-level and function-level
alike, so a lazy import inside a function cannot hide a circle. ``from
dpjax.mechanisms import noise`` counts as an import of
``dpjax.mechanisms.noise``; ``from dpjax import X``
for a name that is not a module counts as an import of the package itself.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "dpjax"

# Layer of each module, lowest first. A module may import its own layer or a
# lower one; a new module must be given a layer here.
LAYERS: dict[int, tuple[str, ...]] = {
    0: ("_validate", "leaks", "progress", "_deprecations"),  # plumbing
    1: ("_common", "checkpoint", "compiled"),
    2: ("data", "problem"),                                   # data and the problem
    3: ("accounting", "mechanisms"),                          # accounting and mechanisms
    4: ("transforms", "online", "baselines", "runner"),       # transforms, baselines, the runner
    5: ("auto", "streaming", "drivers", "training"),          # training
    6: ("cli", "__main__", "sklearn", "audit"),               # front ends
}
PACKAGE_LAYER = 7  # dpjax/__init__.py re-exports the public surface; nothing inside imports it.


def _modules() -> dict[str, pathlib.Path]:
  out = {}
  for path in ROOT.rglob("*.py"):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    out[name] = path
  return out


MODULES = _modules()


def _imports(name: str, path: pathlib.Path) -> set[str]:
  """The dpjax modules ``name`` imports (anywhere in the file)."""
  package = name if path.name == "__init__.py" else name.rpartition(".")[0]
  found = set()
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Import):
      targets = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = package.split(".")[:len(package.split(".")) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
      else:
        module = node.module or ""
      targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module
                 for a in node.names]
    else:
      continue
    for target in targets:
      while target and target not in MODULES:  # `import dpjax.transforms.dp_gd as x` etc.
        target = target.rpartition(".")[0]
      if target and target != name:
        found.add(target)
  return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def layer(name: str) -> int:
  if name == "dpjax":
    return PACKAGE_LAYER
  short = name[len("dpjax."):]
  top = short.split(".")[0]
  for level, names in LAYERS.items():
    if short in names or top in names:
      return level
  raise KeyError(name)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on_stack, out = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        out.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def test_every_module_has_a_layer():
  missing = []
  for name in MODULES:
    try:
      layer(name)
    except KeyError:
      missing.append(name)
  assert not missing, f"give these modules a layer in tests/test_layers.py LAYERS: {missing}"


def test_no_import_circle():
  assert not _cycles(GRAPH), f"import circles: {_cycles(GRAPH)}"


def test_imports_only_point_down():
  upward = sorted(f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
                  for a, targets in GRAPH.items() for b in targets
                  if layer(b) > layer(a) and not b.startswith(a + "."))
  assert not upward, "upward imports:\n" + "\n".join(upward)


def test_nothing_inside_imports_the_package_root():
  users = sorted(a for a, targets in GRAPH.items() if "dpjax" in targets)
  assert not users, f"import the defining module, not the package dpjax: {users}"


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_the_circle_finder_finds_circles(graph, expected):
  assert _cycles(graph) == expected


def test_lazy_imports_are_seen(tmp_path):
  src = tmp_path / "m.py"
  src.write_text("def f():\n  from dpjax import training\n  return training\n")
  assert "dpjax.training" in _imports("dpjax.mechanisms.noise", src)
