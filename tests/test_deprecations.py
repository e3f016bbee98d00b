"""The deprecated flat module paths (``dpjax.noise``, ...) still work, as the same module objects.

For every entry of :data:`dpjax._deprecations.OLD_MODULES`: ``import`` of the
old path, ``from dpjax import <old>``, attribute access and
:func:`importlib.import_module` give the new module itself (``is``) with a
:class:`DeprecationWarning` that names the new path and points at the caller;
a pickle naming the old module loads; ``monkeypatch.setattr`` through the old
path patches the new module. The new paths import without any warning.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import subprocess
import sys
import typing
import warnings

import pytest

import dpjax
from dpjax import _deprecations

OLD_MODULES = _deprecations.OLD_MODULES
OLD = sorted(OLD_MODULES)


def _short(old: str) -> str:
  return old.rpartition(".")[2]


def _forget_aliases():
  """Back to a process that has not used an old path yet (the new modules stay imported)."""
  for old in OLD_MODULES:
    sys.modules.pop(old, None)
    vars(dpjax).pop(_short(old), None)


@pytest.fixture(autouse=True)
def fresh_aliases():
  _forget_aliases()
  yield
  _forget_aliases()


def _deprecations_in(record, old):
  return [w for w in record if issubclass(w.category, DeprecationWarning) and old in str(w.message)]


def _check_one_warning(record, old):
  found = _deprecations_in(record, old)
  assert len(found) == 1, [str(w.message) for w in record]
  text = str(found[0].message)
  assert text == (f"{old} is deprecated and will be removed in a future release; "
                  f"import {OLD_MODULES[old]}")
  assert found[0].filename == __file__, (found[0].filename, found[0].lineno)  # the user's line


def test_the_table_covers_the_moved_modules():
  assert len(OLD_MODULES) == 15
  for old, new in OLD_MODULES.items():
    assert old.count(".") == 1 and new.startswith(("dpjax.problem.", "dpjax.mechanisms.",
                                                   "dpjax.training."))
    assert _short(new) == _short(old)


def test_new_paths_import_without_warning():
  lines = ["import warnings", "warnings.simplefilter('error')"]
  for new in sorted(OLD_MODULES.values()):
    package, _, name = new.rpartition(".")
    lines += [f"import {new}", f"from {package} import {name}"]
  lines += ["import dpjax", "from dpjax import problem, mechanisms", "dpjax.problem.glm, dpjax.mechanisms.noise, dpjax.training.drivers"]
  subprocess.run([sys.executable, "-c", "\n".join(lines)], check=True)


def test_old_names_are_not_public_attributes():
  for old in OLD_MODULES:
    assert _short(old) not in dpjax.__all__
    assert _short(old) not in vars(dpjax)
  assert "problem" in dpjax.__all__ and "mechanisms" in dpjax.__all__
  with pytest.raises(AttributeError, match="no attribute 'not_a_module'"):
    dpjax.not_a_module  # pylint: disable=pointless-statement


@pytest.mark.parametrize("old", OLD)
def test_import_statement_gives_the_same_module(old):
  with warnings.catch_warnings(record=True) as record:
    warnings.simplefilter("always")
    namespace: dict[str, typing.Any] = {}
    exec(compile(f"import {old} as module", __file__, "exec"), namespace)  # pylint: disable=exec-used
    module = namespace["module"]
  assert module is importlib.import_module(OLD_MODULES[old])
  assert sys.modules[old] is module
  assert module.__name__ == OLD_MODULES[old] and module.__spec__.name == OLD_MODULES[old]
  _check_one_warning(record, old)


@pytest.mark.parametrize("old", OLD)
def test_import_module_gives_the_same_module(old):
  with pytest.warns(DeprecationWarning, match=OLD_MODULES[old].replace(".", r"\.")) as record:
    module = importlib.import_module(old)
  assert module is importlib.import_module(OLD_MODULES[old])
  _check_one_warning(record, old)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert importlib.import_module(old) is module  # cached: the first use warned


@pytest.mark.parametrize("old", OLD)
def test_from_dpjax_import_and_attribute(old):
  name = _short(old)
  with warnings.catch_warnings(record=True) as record:
    warnings.simplefilter("always")
    namespace: dict[str, typing.Any] = {}
    exec(compile(f"from dpjax import {name} as module", __file__, "exec"), namespace)  # pylint: disable=exec-used
  assert namespace["module"] is importlib.import_module(OLD_MODULES[old])
  _check_one_warning(record, old)
  _forget_aliases()
  with warnings.catch_warnings(record=True) as record:
    warnings.simplefilter("always")
    module = getattr(dpjax, name)
  assert module is importlib.import_module(OLD_MODULES[old])
  _check_one_warning(record, old)


def test_import_dotted_old_path_binds_the_package():
  with pytest.warns(DeprecationWarning, match=r"import dpjax\.mechanisms\.noise"):
    import dpjax.noise  # pylint: disable=import-outside-toplevel,redefined-outer-name,reimported
  assert dpjax.noise is dpjax.mechanisms.noise  # pylint: disable=no-member


def _picklable(new: str):
  """A NamedTuple class of the module when it has one, else a public function (pickled by reference)."""
  module = importlib.import_module(new)
  members = sorted(vars(module).items())
  for _, obj in members:
    if (isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields")
        and obj.__module__ == new):
      return obj
  for name, obj in members:
    if inspect.isfunction(obj) and obj.__module__ == new and not name.startswith("_"):
      return obj
  raise AssertionError(f"nothing picklable by reference in {new}")


@pytest.mark.parametrize("old", OLD)
def test_pickle_naming_the_old_module_loads(old):
  new = OLD_MODULES[old]
  obj = _picklable(new)
  # Protocol 0 names the global as text, so the old path can be written in directly.
  data = pickle.dumps(obj, protocol=0)
  assert new.encode() in data
  data = data.replace(new.encode(), old.encode())
  with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
    assert pickle.loads(data) is obj


@pytest.mark.parametrize("cls_path", ["dpjax.mechanisms.sampling.PoissonSampler",
                                      "dpjax.mechanisms.tree_aggregation.TreeState",
                                      "dpjax.problem.solve.LogisticOptimum"])
def test_pickled_state_with_the_old_module_loads(cls_path, monkeypatch):
  new, _, name = cls_path.rpartition(".")
  old = next(o for o, n in OLD_MODULES.items() if n == new)
  cls = getattr(importlib.import_module(new), name)
  state = cls(*[f"field-{i}" for i in range(len(cls._fields))])
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # dumps looks the old path up
    monkeypatch.setattr(cls, "__module__", old)
    data = pickle.dumps(state)
    monkeypatch.undo()
  assert old.encode() in data and new.encode() not in data
  _forget_aliases()
  with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
    loaded = pickle.loads(data)
  assert type(loaded) is cls and loaded == state


@pytest.mark.parametrize("old", OLD)
def test_monkeypatch_through_the_old_path_patches_the_new_module(old, monkeypatch):
  new_module = importlib.import_module(OLD_MODULES[old])
  sentinel = object()
  with pytest.warns(DeprecationWarning):
    old_module = importlib.import_module(old)
  monkeypatch.setattr(old_module, "_dpjax_patched", sentinel, raising=False)
  assert new_module._dpjax_patched is sentinel  # pylint: disable=protected-access
  monkeypatch.undo()
  assert not hasattr(new_module, "_dpjax_patched")
  # The dotted-string form goes through dpjax.__getattr__ (already imported: no second warning).
  name = next(n for n in sorted(vars(new_module)) if not n.startswith("_"))
  original = getattr(new_module, name)
  monkeypatch.setattr(f"{old}.{name}", sentinel)
  assert getattr(new_module, name) is sentinel
  monkeypatch.undo()
  assert getattr(new_module, name) is original


def test_warning_points_at_the_user_in_a_script(tmp_path):
  script = tmp_path / "user.py"
  script.write_text("import dpjax.noise\nfrom dpjax import glm\n", encoding="utf-8")
  result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
  # Python's default filters show DeprecationWarning attributed to __main__: both lines, once each.
  assert f"{script}:1: DeprecationWarning: dpjax.noise is deprecated" in result.stderr
  assert f"{script}:2: DeprecationWarning: dpjax.glm is deprecated" in result.stderr
  assert result.stderr.count("DeprecationWarning") == 2, result.stderr


def test_install_is_idempotent():
  before = list(sys.meta_path)
  _deprecations.install()
  assert sys.meta_path == before
  assert sum(isinstance(f, _deprecations.AliasFinder) for f in sys.meta_path) == 1


def test_moved_attributes_warn_and_return_the_new_objects():
  from dpjax import transforms  # pylint: disable=g-import-not-at-top
  from dpjax.mechanisms import tree_aggregation as ta  # pylint: disable=g-import-not-at-top
  for name in ("tree_prefix_sum", "TreeAggregationState"):
    with pytest.warns(DeprecationWarning) as found:
      obj = getattr(ta, name)
    assert obj is getattr(transforms, name)
    assert str(found[0].message) == (
        f"dpjax.mechanisms.tree_aggregation.{name} is deprecated and will be removed in a "
        f"future release; use dpjax.transforms.{name}")
    assert found[0].filename == __file__
  with pytest.warns(DeprecationWarning) as found:
    from dpjax.mechanisms.tree_aggregation import tree_prefix_sum  # pylint: disable=g-import-not-at-top
  assert tree_prefix_sum is transforms.tree_prefix_sum and found[0].filename == __file__
  with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
    ta.no_such_name  # pylint: disable=pointless-statement



# ----------------------------------------------------------------------------
# Deprecated names: dpjax.baselines.run_baseline and BaselineResult -> dpjax.fit.
# ----------------------------------------------------------------------------

BASELINE_NAMES = ("run_baseline", "BaselineResult")


@pytest.mark.parametrize("name", BASELINE_NAMES)
def test_deprecated_baseline_names_warn_and_name_fit(name):
  from dpjax import baselines  # pylint: disable=g-import-not-at-top
  from dpjax.baselines import _run  # pylint: disable=g-import-not-at-top
  assert name not in baselines.__all__ and name not in vars(baselines)
  with pytest.warns(DeprecationWarning) as found:
    obj = getattr(baselines, name)
  assert obj is getattr(_run, name)
  assert len(found) == 1
  assert str(found[0].message) == (
      f"dpjax.baselines.{name} is deprecated and will be removed in a future release; use "
      "dpjax.fit((x, y), name, ...), which runs every baseline and returns dpjax.FitResult")
  assert found[0].filename == __file__  # the user's line
  with pytest.warns(DeprecationWarning, match=r"dpjax\.fit\(") as found:
    namespace: dict[str, typing.Any] = {}
    exec(compile(f"from dpjax.baselines import {name} as obj", __file__, "exec"), namespace)  # pylint: disable=exec-used
  assert namespace["obj"] is obj and found[0].filename == __file__
  with pytest.warns(DeprecationWarning):  # never cached: every read warns
    getattr(baselines, name)
  with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
    baselines.no_such_name  # pylint: disable=pointless-statement


def test_deprecated_run_baseline_still_returns_its_result():
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from dpjax import data  # pylint: disable=g-import-not-at-top
  from dpjax.baselines import _run  # pylint: disable=g-import-not-at-top
  with pytest.warns(DeprecationWarning, match=r"dpjax\.fit"):
    from dpjax.baselines import BaselineResult, run_baseline  # pylint: disable=g-import-not-at-top
  assert inspect.signature(run_baseline).parameters == inspect.signature(_run.run).parameters
  assert BaselineResult._fields == ("params", "losses", "private", "epsilon", "delta", "rho",
                                    "info")
  x, y = data.synthetic(0, n=400, d=4)
  keys = jax.random.split(jax.random.key(3), 2)
  for name, steps in (("damped-newton-private", 3), ("aop", None)):
    with warnings.catch_warnings():
      warnings.simplefilter("error", DeprecationWarning)  # calling it does not warn again
      r = run_baseline(name, x, y, epsilon=2.0, steps=steps, key=keys)
    expected = _run.run(name, x, y, epsilon=2.0, steps=steps, key=keys)
    assert type(r) is BaselineResult and len(r) == len(expected)
    np.testing.assert_array_equal(r.params, expected[0])
    assert r.private is expected[2] and (r.epsilon, r.delta, r.rho) == expected[3:6]
    assert r.info.keys() == expected[6].keys()
    if name == "aop":
      assert r.losses is None and r.rho is None
    else:
      np.testing.assert_array_equal(r.losses, expected[1])
      assert r.losses.shape == (2, 4)
