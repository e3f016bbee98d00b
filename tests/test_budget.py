"""Budget enforcement (dpjax.mechanisms.budget and fit's epsilon_budget): plans, in-graph refusals, overspending.

The transforms' own refusal past ``steps`` (eager ``ValueError``; zeros, no
charge and ``budget_exhausted`` under jit/scan) is tested for every transform
in ``test_transforms_conformance.py::test_scan_cond_state_types_and_exhaustion``
and by the ``budget-exhausted`` row of ``docs/errors.md`` (``test_errors.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpjax
from dpjax import accounting, data, training
from dpjax.training import drivers
from dpjax.mechanisms import budget
from dpjax.transforms import dp_gd

DS = data.synthetic(0, n=200, d=3)


def _no_compile(monkeypatch):
  """Makes any compiled run fail loudly, to prove a refusal happens before compiling."""
  def boom(*args, **kwargs):
    raise AssertionError("compiled although the plan was over budget")
  monkeypatch.setattr(training.loop, "execute", boom)
  monkeypatch.setattr(drivers, "run", boom)
  monkeypatch.setattr(training.api, "_fit_stream", boom)


@pytest.mark.parametrize("algorithm, kwargs", [
    ("dp-gd", dict(epsilon=2.0, steps=3)),
    ("hess-clip", dict(rho=5.0, steps=3)),
    ("dp-sgd", dict(epsilon=1.5, steps=3, batch_size=20)),
    ("otb", dict(epsilon=3.0, batch_size=10)),
])
def test_plan_over_budget_raises_before_compiling(monkeypatch, algorithm, kwargs):
  _no_compile(monkeypatch)
  with pytest.raises(budget.BudgetExceededError, match="but epsilon_budget=1 .*Nothing ran"):
    dpjax.fit(DS, algorithm, epsilon_budget=1.0, **kwargs)
  assert issubclass(budget.BudgetExceededError, ValueError)


def test_plan_within_budget_runs_and_reports():
  res = dpjax.fit(DS, "dp-gd", epsilon=1.0, steps=3, epsilon_budget=1.0)
  spent = accounting.epsilon_spent(jax.tree.map(lambda a: a[0], res.opt_state.accountant),
                                   res.delta, "gaussian")
  assert spent == pytest.approx(1.0, rel=1e-9)
  with pytest.raises(ValueError, match="epsilon_budget"):
    dpjax.fit(DS, "dp-gd", epsilon=1.0, steps=3, epsilon_budget=-1.0)


@pytest.mark.parametrize("algorithm", ["dp-gd", "hess-clip"])
def test_in_graph_refusal_becomes_an_error(monkeypatch, algorithm):
  """A transform that refuses a step inside the compiled run (its flag) makes fit raise."""
  make = training.make_transform

  def short(name, **kwargs):  # one step less than the plan: the last step is refused in-graph
    return make(name, **{**kwargs, "steps": kwargs["steps"] - 1})
  monkeypatch.setattr(training.registry, "make_transform", short)
  with pytest.raises(budget.BudgetExceededError, match=r"refused a step.*repeats \[0, 1\]"):
    dpjax.fit(DS, algorithm, epsilon=1.0, steps=3, repeats=2)


def test_overspending_accountant_becomes_an_error(monkeypatch):
  make = training.make_transform

  def greedy(name, **kwargs):  # charges 1.5x the run's rho
    return make(name, **{**kwargs, "rho": kwargs["rho"] * 1.5})
  monkeypatch.setattr(training.registry, "make_transform", greedy)
  with pytest.raises(budget.BudgetExceededError, match="accountant reports epsilon=.*above"):
    dpjax.fit(DS, "dp-gd", epsilon=1.0, steps=3)


@pytest.mark.parametrize("use_jit", [False, True])
def test_refused_reads_flags_of_batched_and_chained_states(use_jit):
  tx = dp_gd(n=200, rho=0.1, steps=1, key=0)
  g = jnp.ones(3) * 0.01

  def two_steps(state):
    _, state = tx.update(g, state)
    return tx.update(g, state)[1]

  run = jax.jit(two_steps) if use_jit else two_steps
  state = tx.init(jnp.zeros(3))
  if use_jit:
    final = run(state)
    assert bool(budget.refused(final))
    batched = jax.tree.map(lambda a, b: jnp.stack([a, b]), state, final)
    np.testing.assert_array_equal(budget.refused((batched, ())), [False, True])
    with pytest.raises(budget.BudgetExceededError, match=r"repeats \[1\]"):
      budget.check_spent(batched, epsilon=10.0, delta=1e-5, method="gaussian")
  else:
    with pytest.raises(ValueError, match="privacy budget exhausted"):
      run(state)
  assert not bool(budget.refused(state))
  budget.check_spent(state, epsilon=1.0, delta=1e-5, method="gaussian")  # nothing spent yet
