"""The errors table of ``docs/errors.md``, run row by row.

The table is the single source of truth. This module parses it from
``docs/errors.md`` (the first table under its ``# Errors`` heading; columns
``id``, ``input``, ``raised``, ``message (excerpt)``, ``fix``); :data:`CASES`
maps every row id to a case, and the table's ids must equal the keys of
:data:`CASES`, so a row without a test, or a test without a row, fails. A case gets ``raises``: each ``with raises():`` block must raise the
row's exception with a message containing the row's excerpt (matched with
``re.escape``), and must do so before JAX traces or compiles anything (XLA
compile and jaxpr trace events are counted while the block runs).

The other tests check the rest of the contract: a rejected input leaves the
caller's arrays and files as they were, and the command line's ``--json``
and the benchmark harness write their files atomically.
"""

from __future__ import annotations

import builtins
import bz2
import contextlib
import gzip
import json
import os
import pathlib
import re
import types
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpjax
from conftest import load_benchmark, run_cli
from dpjax import accounting, cli, data, training, transforms
from dpjax.mechanisms import sampling

ERRORS_DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "errors.md"
COLUMNS = ["id", "input", "raised", "message (excerpt)", "fix"]
_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class Row(NamedTuple):
  id: str
  input: str
  raised: str
  message: str
  fix: str


def _cells(line: str) -> list[str]:
  return [c.strip() for c in line.strip().strip("|").split("|")]


def _unquote(cell: str) -> str:
  """A cell's text without one enclosing pair of backticks."""
  return cell[1:-1] if len(cell) >= 2 and cell[0] == cell[-1] == "`" else cell


def table_rows() -> list[Row]:
  """The rows of the first table under ``# Errors`` in docs/errors.md."""
  lines = ERRORS_DOC.read_text(encoding="utf-8").splitlines()
  start = lines.index("# Errors")
  end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
  table = []
  for line in lines[start + 1:end]:
    if line.startswith("|"):
      table.append(line)
    elif table:
      break  # The first table only.
  assert len(table) >= 3, "docs/errors.md has no table under # Errors"
  assert _cells(table[0]) == COLUMNS, f"header {_cells(table[0])}, expected {COLUMNS}"
  assert set("".join(_cells(table[1]))) <= set("-:"), "the second line must be the separator"
  rows = []
  for line in table[2:]:
    cells = _cells(line)
    assert len(cells) == len(COLUMNS), f"expected {len(COLUMNS)} cells in {line!r}"
    rows.append(Row(*(_unquote(c) for c in cells)))
  return rows


ROWS = table_rows()
ROWS_BY_ID = {row.id: row for row in ROWS}

# ----------------------------------------------------------------------------
# Inputs: tiny synthetic data (n = 50, d = 3) and small LIBSVM files.

DS = data.synthetic(0, n=50, d=3)
X, Y = DS
N, D = X.shape
G = jnp.full((D,), 0.1, jnp.float32)  # a gradient for the transforms


def _fit(ds=DS, algorithm="dp-gd", **kwargs):
  """``dpjax.fit`` with epsilon=1, steps=2 unless given (None removes one)."""
  kwargs = {"epsilon": 1.0, "steps": 2, **kwargs}
  return dpjax.fit(ds, algorithm, **{k: v for k, v in kwargs.items() if v is not None})


def _dp_gd(**kwargs):
  return transforms.dp_gd(**{"n": N, "rho": 0.1, "steps": 2, "key": 0, **kwargs})


def _file(tmp: pathlib.Path, name: str, content: str | bytes) -> pathlib.Path:
  path = tmp / name
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content)
  return path


def _libsvm(tmp, raises, content, **kwargs):
  path = _file(tmp, "bad.svm", content)
  with raises():
    data.load_libsvm(path, **kwargs)


# ----------------------------------------------------------------------------
# One case per row of the table.


def _nan_or_inf_in_data(tmp, raises):
  for bad in (np.nan, np.inf, -np.inf):
    x = X.copy()
    x[3, 1] = bad
    with raises():
      _fit((x, Y))
    x_jax = jnp.asarray(x)  # built outside the check: creating it compiles a conversion
    with raises():
      data.validate_dataset((x_jax, Y))
  y = Y.copy()
  y[2] = np.nan
  with raises():
    _fit((X, y), "otb", steps=None, batch_size=10)


def _row_norm_above_1(tmp, raises):
  with raises():
    _fit((2 * X, Y))
  with raises():
    _fit((2 * X, Y), "dp-sgd", batch_size=10)
  with raises():  # no tolerance: a relative excess of 1e-6 is refused
    data.validate_dataset((X * np.float32(1 + 1e-6), Y))


def _labels_not_pm1(tmp, raises):
  with raises():
    _fit((X, (Y > 0).astype(np.float32)))
  with raises():
    _fit((X, (Y > 0).astype(np.float32)), "dp-sgd", batch_size=10)
  with raises():
    data.validate_dataset((X, 2 * Y))


def _labels_above_label_bound(tmp, raises):
  with raises():
    _fit((X, 3 * Y), "otb", steps=None, batch_size=10, loss="least_squares")


def _x_not_2d(tmp, raises):
  with raises():
    _fit((X[:, 0], Y))
  with raises():
    data.validate_dataset((X[None], Y))


def _y_not_1d(tmp, raises):
  with raises():
    _fit((X, Y[:, None]))


def _rows_labels_mismatch(tmp, raises):
  with raises():
    _fit((X, Y[:-1]))


def _data_not_a_pair(tmp, raises):
  for bad in ([X, Y], {"x": X, "y": Y}, X, (X, Y, Y)):
    with raises():
      _fit(bad)


def _non_float_data(tmp, raises):
  for x, y in ((X.astype(np.int32), Y), (X, Y.astype(np.int64)), (X > 0, Y),
               (X.astype(np.complex64), Y), (X.astype(object), Y)):
    with raises():
      _fit((x, y))


def _float64_without_x64(tmp, raises):
  assert not jax.config.jax_enable_x64, "this row is about JAX's default 32-bit mode"
  x64 = X.astype(np.float64)
  with raises():
    _fit((x64, Y))
  with raises():
    _fit((x64, Y), "otb", steps=None, batch_size=10)
  with raises():
    _fit((x64, Y), "dp-sgd", batch_size=10)
  with raises():  # a nested list becomes float64
    _fit((X.tolist(), Y))


def _float16_data(tmp, raises):
  x16 = data.clip_rows(X.astype(np.float16))  # meets the row-norm contract in float16
  with raises():
    _fit((x16, Y))
  with raises():
    _fit((x16, Y), "otb", steps=None, batch_size=10)


def _empty_data(tmp, raises):
  empty = (X[:0], Y[:0])
  with raises():
    _fit(empty)
  with raises():
    _fit(empty, "otb", steps=None, batch_size=10)
  with raises():
    _fit(empty, "dp-sgd", batch_size=10)
  with raises():
    _fit(empty, "dp-gd", loss="pseudo_huber", loss_options={"delta": 1.0})
  with raises():
    data.validate_dataset(empty)


def _no_features(tmp, raises):
  flat = (X[:, :0], Y)
  with raises():
    _fit(flat)
  with raises():
    _fit(flat, "otb", steps=None, batch_size=10)
  with raises():
    _fit(flat, "dp-sgd", batch_size=10)
  with raises():
    data.validate_dataset(flat)


def _epsilon_not_positive(tmp, raises):
  for eps in (0.0, -1.0):
    with raises():
      _fit(epsilon=eps)
  with raises():
    training.fit_levels(DS, "dp-gd", epsilons=[1.0, 0.0], steps=2)
  with raises():
    accounting.resolve_budget(N, epsilon=0.0)
  with raises():
    transforms.dp_sgd(n=N, batch_size=10, epsilon=0.0, steps=2, key=0)


def _rho_not_positive(tmp, raises):
  for rho in (0.0, -0.1):
    with raises():
      _fit(epsilon=None, rho=rho)
  with raises():
    _dp_gd(rho=0.0)
  with raises():
    transforms.dp_newton(n=N, rho=-1.0, steps=2, key=0)


def _budget_not_finite(tmp, raises):
  for kwargs in ({"epsilon": np.nan}, {"epsilon": np.inf}, {"epsilon": None, "rho": np.nan},
                 {"delta": np.nan}, {"delta": np.inf}):
    with raises():
      _fit(**kwargs)
  with raises():
    _dp_gd(rho=np.inf)


def _budget_not_a_number(tmp, raises):
  for kwargs in ({"epsilon": "1"}, {"epsilon": True}, {"epsilon": None, "rho": [0.1]},
                 {"delta": "1e-5"}):
    with raises():
      _fit(**kwargs)


def _delta_out_of_range(tmp, raises):
  for delta in (0.0, 1.0, -0.1, 2.0):
    with raises():
      _fit(delta=delta)
  with raises():
    accounting.resolve_budget(N, epsilon=1.0, delta=1.0)
  with raises():
    transforms.dp_sgd(n=N, batch_size=10, epsilon=1.0, delta=1.0, steps=2, key=0)


def _epsilon_and_rho(tmp, raises):
  with raises():
    _fit(rho=0.1)
  with raises():
    _fit(epsilon=None)
  with raises():
    accounting.resolve_budget(N, epsilon=1.0, rho=0.1)


def _transform_two_budgets(tmp, raises):
  with raises():
    _dp_gd(rho_per_step=0.05)
  with raises():
    transforms.dp_newton(n=N, rho=0.1, rho_per_step=0.05, steps=2, key=0)


def _transform_no_budget(tmp, raises):
  with raises():
    _dp_gd(rho=None)


def _transform_rho_without_steps(tmp, raises):
  with raises():
    _dp_gd(steps=None)
  with raises():
    transforms.dp_newton(n=N, rho=0.1, key=0)


def _steps_below_1(tmp, raises):
  for steps in (0, -3):
    with raises():
      _fit(steps=steps)
  with raises():
    _dp_gd(steps=0)


def _steps_not_an_integer(tmp, raises):
  for steps in (2.5, 2.0, True, "2"):
    with raises():
      _fit(steps=steps)
  with raises():
    _dp_gd(steps=2.0)


def _steps_missing(tmp, raises):
  for algorithm in ("dp-gd", "hess-clip"):
    with raises():
      _fit(algorithm=algorithm, steps=None)


def _budget_exhausted(tmp, raises):
  tx = _dp_gd()
  step = jax.jit(tx.update)
  state = tx.init(jnp.zeros(D))
  for _ in range(2):
    _, state = step(G, state)
  assert accounting.spent_rho(state.accountant) == pytest.approx(0.1, rel=1e-6)  # all of rho
  with raises():
    tx.update(G, state)
  assert int(state.count) == 2 and not bool(state.budget_exhausted)
  # Under jit the refused step is zeros, charges nothing and says so in the state.
  update, refused = step(G, state)
  assert not np.any(np.asarray(update)) and bool(refused.budget_exhausted)
  assert accounting.spent_rho(refused.accountant) == accounting.spent_rho(state.accountant)
  with raises():
    tx.update(G, refused)


def _plan_over_budget(tmp, raises):
  with raises():
    _fit(epsilon=2.0, epsilon_budget=1.0)
  with raises():
    _fit(epsilon=None, rho=5.0, epsilon_budget=1.0)


def _repeats_below_1(tmp, raises):
  for repeats in (0, -1):
    with raises():
      _fit(repeats=repeats)


def _seed_out_of_range(tmp, raises):
  for seed in (-1, 2**64):
    with raises():
      _fit(seed=seed)


def _transform_n_below_1(tmp, raises):
  with raises():
    _dp_gd(n=0)
  with raises():
    sampling.poisson_sampler(0, sampling_rate=0.5)


def _key_missing(tmp, raises):
  with raises():
    _dp_gd(key=None)
  with raises():
    transforms.dp_newton(n=N, rho=0.1, steps=2, key=None)


def _params_not_float(tmp, raises):
  tx = _dp_gd()
  w = jnp.zeros(D, jnp.int32)
  with raises():
    tx.init(w)
  with raises():
    tx.init(np.zeros(D, np.int64))


def _nan_gradient(tmp, raises):
  tx = _dp_gd()
  state = tx.init(jnp.zeros(D))
  for bad in (np.nan, np.inf):
    g = jnp.asarray([bad, 0.0, 0.0], jnp.float32)
    with raises():
      tx.update(g, state)


def _sampling_rate_out_of_range(tmp, raises):
  for q in (0.0, -0.1, 1.5):
    with raises():
      sampling.poisson_sampler(N, sampling_rate=q)
    with raises():
      transforms.dp_sgd(n=N, sampling_rate=q, noise_multiplier=1.0, steps=2, key=0)
  with raises():
    accounting.subsampled_gaussian_rdp(2.0, 1.0)


def _batch_size_out_of_range(tmp, raises):
  with raises():
    _fit(algorithm="dp-sgd", batch_size=N + 1)
  for b in (0.5, N + 1):
    with raises():
      sampling.poisson_sampler(N, batch_size=b)
  with raises():
    transforms.dp_sgd(n=N, batch_size=60, noise_multiplier=1.0, steps=2, key=0)


def _batch_size_missing(tmp, raises):
  with raises():
    _fit(algorithm="otb", steps=None)
  with raises():
    _fit(algorithm="dp-sgd")
  with raises():
    _fit(algorithm="newton-minibatch", min_eigenvalue=0.1)


def _stream_longer_than_data(tmp, raises):
  for algorithm in ("otb", "dp-ftrl"):
    with raises():
      _fit(algorithm=algorithm, batch_size=10, steps=6)


def _unknown_algorithm(tmp, raises):
  with raises():
    _fit(algorithm="newton")
  with raises():
    training.fit_levels(DS, "newton", epsilons=[1.0], steps=2)


def _unknown_loss(tmp, raises):
  for algorithm in ("dp-gd", "hess-add"):
    with raises():
      _fit(algorithm=algorithm, loss="hinge")
  with raises():
    _fit(algorithm="dp-sgd", batch_size=10, loss="hinge")


def _unknown_accounting(tmp, raises):
  with raises():
    _fit(accounting="rdp")
  with raises():
    accounting.resolve_budget(N, epsilon=1.0, method="rdp")


def _unknown_option(tmp, raises):
  with raises():
    _fit(kappa=3.0)
  with raises():
    _fit(algorithm="precond-gd", learning_rat=1.0)  # a misspelt option


def _unknown_neighbouring(tmp, raises):
  with raises():
    _fit(neighbouring="add-remove")
  with raises():
    training.fit_levels(DS, "dp-gd", epsilons=[1.0], steps=2, neighbouring="add-remove")
  with raises():
    _fit(algorithm="otb", steps=None, batch_size=10, neighbouring="add-remove")
  with raises():
    _dp_gd(neighbouring="add-remove")
  with raises():
    transforms.dp_newton(n=N, rho=0.1, steps=2, key=0, neighbouring="add-remove")


def _replace_one_poisson(tmp, raises):
  with raises():
    _fit(algorithm="dp-sgd", batch_size=10, neighbouring="replace-one")
  with raises():
    _fit(algorithm="newton-minibatch", batch_size=10, min_eigenvalue=0.1,
         neighbouring="replace-one")


def _clip_min_eigenvalue_too_small(tmp, raises):
  for algorithm in ("hess-clip", "qu-clip"):  # L1/n = 0.25/50 = 0.005
    with raises():
      _fit(algorithm=algorithm, min_eigenvalue=0.001)


def _libsvm_bad_label(tmp, raises):
  _libsvm(tmp, raises, "+1 1:0.5\nabc 1:0.2\n")
  _libsvm(tmp, raises, "+1 1:0.5\n-")


def _libsvm_nonfinite_label(tmp, raises):
  for label in ("inf", "nan"):
    _libsvm(tmp, raises, f"+1 1:0.5\n{label} 1:0.3\n")


def _libsvm_malformed_feature(tmp, raises):
  for line in ("-1 1-0.2", "-1 qid:3 1:0.2", "-1 1:0.2 2"):
    _libsvm(tmp, raises, f"+1 1:0.5\n{line}\n")


def _libsvm_non_numeric_value(tmp, raises):
  _libsvm(tmp, raises, "+1 1:0.5\n-1 2:x\n")


def _libsvm_bad_index(tmp, raises):
  _libsvm(tmp, raises, "+1 1:0.5\n-1 a:1\n")


def _libsvm_truncated_line(tmp, raises):
  _libsvm(tmp, raises, "+1 1:0.5 2:0.1\n-1 1:0.2 2:")


def _libsvm_index_below_1(tmp, raises):
  _libsvm(tmp, raises, "+1 0:0.5 1:0.2\n")


def _libsvm_duplicate_index(tmp, raises):
  _libsvm(tmp, raises, "+1 1:0.5 2:0.1 1:0.3\n")


def _libsvm_nonfinite_value(tmp, raises):
  for value in ("nan", "inf", "-inf"):
    _libsvm(tmp, raises, f"+1 1:{value} 2:1\n")


def _libsvm_labels_not_pm1(tmp, raises):
  _libsvm(tmp, raises, "0 1:0.5\n1 1:0.3\n")


def _libsvm_positive_label_absent(tmp, raises):
  _libsvm(tmp, raises, "+1 1:0.5\n-1 1:0.1\n", positive_label=7)


def _libsvm_n_features_too_small(tmp, raises):
  _libsvm(tmp, raises, "+1 1:0.5 5:1\n", n_features=3)


def _libsvm_no_examples(tmp, raises):
  for content in ("", "# only a comment\n\n  \n"):
    _libsvm(tmp, raises, content)


def _libsvm_not_text(tmp, raises):
  _libsvm(tmp, raises, b"\xff\xfe\x00\x01 1:0.5\n")


def _libsvm_corrupt_stream(tmp, raises):
  rng = np.random.default_rng(0)
  lines = [f"{s:+d} 1:{a:.6f} 2:{b:.6f}\n" for s, a, b in
           zip(rng.choice([-1, 1], 12_000), rng.random(12_000), rng.random(12_000))]
  text = "".join(lines).encode()
  gz, bz = gzip.compress(text), bz2.compress(text, compresslevel=1)  # 100 kB bzip2 blocks
  flipped = bytearray(gz)
  flipped[len(gz) // 2] ^= 0xFF
  for name, content in (("half.gz", gz[:len(gz) // 2]), ("half.bz2", bz[:len(bz) // 2]),
                        ("flipped.gz", bytes(flipped)), ("garbage.bz2", b"BZh9" + bytes(64)),
                        ("garbage.gz", b"\x1f\x8b" + bytes(64))):
    path = _file(tmp, name, content)
    with raises() as info:
      data.load_libsvm(path)
    lineno = int(re.search(r", line (\d+):", str(info.value)).group(1))
    if name.startswith("half"):  # The good prefix was read; the line lost is past it.
      assert 1 < lineno <= len(lines), (name, lineno)


def _libsvm_missing_file(tmp, raises):
  with raises():
    data.load_libsvm(tmp / "no-such-file.svm")


def _estimator(**kwargs):
  from dpjax.sklearn import DPLogisticRegression  # the sklearn extra (part of dev)
  return DPLogisticRegression(**{"classes": [-1.0, 1.0], **kwargs})


def _estimator_labels_outside_classes(tmp, raises):
  with raises():
    _estimator(classes=[0, 1]).fit(X, Y)


def _estimator_data_norm_none(tmp, raises):
  with raises():
    _estimator(data_norm=None).fit(X, Y)


def _accountant_over_budget(tmp, raises):
  from dpjax.sklearn import BudgetAccountant
  acc = BudgetAccountant(epsilon=1.0, delta=1e-6)
  with raises():
    _estimator(epsilon=2.0, delta=1e-6, accountant=acc).fit(X, Y)


def _standardize_not_a_standardizer(tmp, raises):
  with raises():
    _fit(DS, standardize=(0.0, 1.0))


def _standardize_bounds_empty(tmp, raises):
  with raises():
    dpjax.mechanisms.standardize.PrivateStandardizer(bounds=(1.0, 1.0))


def _standardize_algorithm(tmp, raises):
  with raises():
    _fit(DS, "dp-sgd", batch_size=10,
         standardize=dpjax.mechanisms.standardize.PrivateStandardizer(bounds=(-1.0, 1.0)))


CASES: dict[str, Callable] = {
    "nan-or-inf-in-data": _nan_or_inf_in_data,
    "row-norm-above-1": _row_norm_above_1,
    "labels-not-pm1": _labels_not_pm1,
    "labels-above-label-bound": _labels_above_label_bound,
    "x-not-2d": _x_not_2d,
    "y-not-1d": _y_not_1d,
    "rows-labels-mismatch": _rows_labels_mismatch,
    "data-not-a-pair": _data_not_a_pair,
    "non-float-data": _non_float_data,
    "float64-without-x64": _float64_without_x64,
    "float16-data": _float16_data,
    "empty-data": _empty_data,
    "no-features": _no_features,
    "epsilon-not-positive": _epsilon_not_positive,
    "rho-not-positive": _rho_not_positive,
    "budget-not-finite": _budget_not_finite,
    "budget-not-a-number": _budget_not_a_number,
    "delta-out-of-range": _delta_out_of_range,
    "epsilon-and-rho": _epsilon_and_rho,
    "transform-two-budgets": _transform_two_budgets,
    "transform-no-budget": _transform_no_budget,
    "transform-rho-without-steps": _transform_rho_without_steps,
    "steps-below-1": _steps_below_1,
    "steps-not-an-integer": _steps_not_an_integer,
    "steps-missing": _steps_missing,
    "budget-exhausted": _budget_exhausted,
    "plan-over-budget": _plan_over_budget,
    "repeats-below-1": _repeats_below_1,
    "seed-out-of-range": _seed_out_of_range,
    "transform-n-below-1": _transform_n_below_1,
    "key-missing": _key_missing,
    "params-not-float": _params_not_float,
    "nan-gradient": _nan_gradient,
    "sampling-rate-out-of-range": _sampling_rate_out_of_range,
    "batch-size-out-of-range": _batch_size_out_of_range,
    "batch-size-missing": _batch_size_missing,
    "stream-longer-than-data": _stream_longer_than_data,
    "unknown-algorithm": _unknown_algorithm,
    "unknown-loss": _unknown_loss,
    "unknown-accounting": _unknown_accounting,
    "unknown-option": _unknown_option,
    "unknown-neighbouring": _unknown_neighbouring,
    "replace-one-poisson": _replace_one_poisson,
    "clip-min-eigenvalue-too-small": _clip_min_eigenvalue_too_small,
    "estimator-labels-outside-classes": _estimator_labels_outside_classes,
    "estimator-data-norm-none": _estimator_data_norm_none,
    "accountant-over-budget": _accountant_over_budget,
    "standardize-not-a-standardizer": _standardize_not_a_standardizer,
    "standardize-bounds-empty": _standardize_bounds_empty,
    "standardize-algorithm": _standardize_algorithm,
    "libsvm-bad-label": _libsvm_bad_label,
    "libsvm-nonfinite-label": _libsvm_nonfinite_label,
    "libsvm-malformed-feature": _libsvm_malformed_feature,
    "libsvm-non-numeric-value": _libsvm_non_numeric_value,
    "libsvm-bad-index": _libsvm_bad_index,
    "libsvm-truncated-line": _libsvm_truncated_line,
    "libsvm-index-below-1": _libsvm_index_below_1,
    "libsvm-duplicate-index": _libsvm_duplicate_index,
    "libsvm-nonfinite-value": _libsvm_nonfinite_value,
    "libsvm-labels-not-pm1": _libsvm_labels_not_pm1,
    "libsvm-positive-label-absent": _libsvm_positive_label_absent,
    "libsvm-n-features-too-small": _libsvm_n_features_too_small,
    "libsvm-no-examples": _libsvm_no_examples,
    "libsvm-not-text": _libsvm_not_text,
    "libsvm-corrupt-stream": _libsvm_corrupt_stream,
    "libsvm-missing-file": _libsvm_missing_file,
}

# ----------------------------------------------------------------------------
# The table and the cases.

_COMPILE_EVENTS = ("/jax/core/compile/backend_compile_duration",
                   "/jax/core/compile/jaxpr_trace_duration")


@contextlib.contextmanager
def raises_before_compiling(exc: type[BaseException], pattern: str):
  """``pytest.raises(exc, match=pattern)`` that also fails if JAX traced or compiled inside."""
  events = []

  def listener(name, _seconds, **_kwargs):
    if name in _COMPILE_EVENTS:
      events.append(name)

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    with pytest.raises(exc, match=pattern) as info:
      yield info
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)
  assert not events, f"JAX traced or compiled before raising: {events}"


def test_errors_table_is_well_formed():
  assert ROWS, "the errors table of docs/errors.md has no rows"
  ids = [row.id for row in ROWS]
  assert len(ids) == len(set(ids)), f"duplicate ids: {sorted(i for i in ids if ids.count(i) > 1)}"
  for row in ROWS:
    assert _ID.match(row.id), f"{row.id!r} is not a short kebab-case id"
    exc = getattr(builtins, row.raised, None)
    assert isinstance(exc, type) and issubclass(exc, Exception), f"{row.id}: {row.raised!r}"
    assert row.input and row.message and row.fix, f"{row.id}: an empty cell"


def test_every_row_has_a_case_and_every_case_a_row():
  table, cases = {row.id for row in ROWS}, set(CASES)
  assert table == cases, (f"rows without a case: {sorted(table - cases)}; "
                          f"cases without a row: {sorted(cases - table)}")


@pytest.mark.parametrize("row_id", [row.id for row in ROWS])
def test_error_row(row_id, tmp_path):
  row = ROWS_BY_ID[row_id]
  exc = getattr(builtins, row.raised)
  checked = []

  def raises():
    checked.append(True)
    return raises_before_compiling(exc, re.escape(row.message))

  CASES[row_id](tmp_path, raises)
  assert checked, f"the case of {row_id!r} checked no call"


# ----------------------------------------------------------------------------
# Nothing is silently changed.


@pytest.mark.parametrize(
    "bad",
    [
        lambda x, y: y.__setitem__(0, 0.0),  # a label outside {-1, +1}
        lambda x, y: x.__setitem__((0, slice(None)), 2.0),  # a row norm above 1
        lambda x, y: x.__setitem__((1, 2), np.nan),  # NaN
    ],
    ids=["bad-label", "row-norm", "nan"],
)
@pytest.mark.parametrize("algorithm", ["dp-gd", "otb", "dp-sgd", "aop"])
def test_rejected_input_leaves_the_callers_arrays_unchanged(bad, algorithm):
  x, y = X.copy(), Y.copy()
  bad(x, y)
  x_before, y_before = x.copy(), y.copy()
  kwargs = {"otb": {"steps": None, "batch_size": 10}, "dp-sgd": {"batch_size": 10},
            "aop": {"steps": None}}.get(algorithm, {})
  with pytest.raises(ValueError):
    _fit((x, y), algorithm, **kwargs)
  # Bit for bit (NaN included), same dtype, still writable: nothing clipped, mapped or frozen.
  for after, before in ((x, x_before), (y, y_before)):
    assert after.dtype == before.dtype and after.flags.writeable
    assert after.tobytes() == before.tobytes()


def test_rejected_libsvm_file_is_left_as_it_was(tmp_path):
  content = b"+1 1:0.5\n0 1:0.3\n-1 2:x\n"
  path = _file(tmp_path, "bad.svm", content)
  stat = path.stat()
  with pytest.raises(ValueError, match="line 3"):
    data.load_libsvm(path)
  assert path.read_bytes() == content and path.stat().st_mtime_ns == stat.st_mtime_ns
  assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.svm"]


# ----------------------------------------------------------------------------
# No partial output file: the command line's --json and the benchmark harness.


def test_cli_corrupt_libsvm_writes_no_json(tmp_path, capsys):
  good = b"".join(b"%+d 1:%.3f 2:0.5\n" % (1 - 2 * (i % 2), i / 500) for i in range(500))
  for name, content in (("bad.svm.gz", gzip.compress(good)[:-40]),
                        ("bad.svm", b"+1 1:0.5\n-1 1:0.2 2:")):
    src = _file(tmp_path, name, content)
    out = tmp_path / "out.json"
    code, err = run_cli(["fit", "--data", str(src), "--algorithm", "dp-gd", "--epsilon", "1",
                      "--steps", "2", "--json", str(out)], capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    row = "libsvm-corrupt-stream" if name.endswith(".gz") else "libsvm-truncated-line"
    assert ROWS_BY_ID[row].message in err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file either
    src.unlink()


def _fake_fit_result(**fields):
  """A stand-in for dpjax.fit's result: every field the command line reads."""
  base = dict(algorithm="dp-gd", epsilon=1.0, delta=1e-8, rho=0.02, accounting="gaussian",
              n=10_000, d=100, steps=2, repeats=1, excess_loss_mean=0.1, excess_loss_se=0.0,
              excess_losses=np.array([0.1]), loss_star=0.3, seconds_compile=0.0,
              seconds_run=0.0, guard_resets=np.zeros(1, np.int64), average="none",
              final_excess_losses=np.array([0.1]), gradient_evaluations=2,
              curvature_evaluations=0, options={}, auto_reason="", batch_size=0,
              loss="logistic", private=True, curvature_batch_size=0, seed=None,
              neighbouring="zero-out")
  base.update(fields)
  return types.SimpleNamespace(**base)


_CLI_FIT = ["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1", "--steps", "2"]


def test_cli_json_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path, capsys, monkeypatch):
  out = tmp_path / "out.json"
  out.write_text('{"old": true}\n')
  # The record fails to serialise half-way through (json.dump has already
  # written its first fields): a plain open(out, "w") would leave a partial file.
  monkeypatch.setattr(training, "fit", lambda *a, **k: _fake_fit_result(options={"x": object()}))
  code, err = run_cli(_CLI_FIT + ["--json", str(out)], capsys)
  assert code == 2 and "not JSON serializable" in err
  assert out.read_text() == '{"old": true}\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_cli_json_write_replaces_the_file_with_the_usual_mode(tmp_path, capsys, monkeypatch):
  out = tmp_path / "out.json"
  out.write_text("stale")
  monkeypatch.setattr(training, "fit", lambda *a, **k: _fake_fit_result())
  code, _ = run_cli(_CLI_FIT + ["--json", str(out)], capsys)
  assert code == 0
  record = json.loads(out.read_text())
  assert set(record) == set(cli._JSON_FIELDS) and record["excess_losses"] == [0.1]
  umask = os.umask(0)
  os.umask(umask)
  assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as open(path, "w") would create it
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_cli_json_that_is_a_folder_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
  monkeypatch.setattr(training, "fit", lambda *a, **k: pytest.fail("fit ran"))
  code, err = run_cli(_CLI_FIT + ["--json", str(tmp_path)], capsys)
  assert code == 2 and "is a folder" in err


def test_benchmark_results_are_written_atomically(tmp_path, monkeypatch):
  harness = load_benchmark("_harness")
  json_path, md_path = harness.write_results(tmp_path, "r", {"a": 1}, "# old")
  old = (json_path.read_text(), md_path.read_text())

  def fail_after_writing(fd):  # the bytes are in the temporary file; flushing them fails.
    assert os.fstat(fd).st_size > 0
    raise OSError("No space left on device")

  monkeypatch.setattr(os, "fsync", fail_after_writing)
  with pytest.raises(OSError, match="No space left"):
    harness.write_results(tmp_path, "r", {"a": 2, "b": list(range(100))}, "# new\n" * 50)
  monkeypatch.undo()
  assert (json_path.read_text(), md_path.read_text()) == old
  assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.md"]
  harness.write_results(tmp_path, "r", {"a": 3}, "# new")
  assert json.loads(json_path.read_text())["a"] == 3 and md_path.read_text() == "# new\n"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.md"]
