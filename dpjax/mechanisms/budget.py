"""Budget enforcement for whole runs: refuse a plan beyond the budget; no silent refusals.

Two layers guard a privacy budget:

* every transform given a total budget (``rho`` with ``steps``, or
  ``epsilon`` with ``steps``) refuses step ``steps + 1`` itself: eagerly with
  ``ValueError``, and inside ``jit``/``vmap``/``lax.scan`` by returning a zero
  update, charging nothing and setting its ``budget_exhausted`` flag (a tree
  past its capacity sets ``overflow`` and releases NaN);
* :func:`dpjax.fit` checks the plan against an optional cap
  (``epsilon_budget``) before anything compiles (:func:`check_plan`), and after
  the compiled run turns any refusal flag into :class:`BudgetExceededError`
  and checks each repeat's accountant against the budget
  (:func:`check_spent`), so a run that was cut short or overspent never
  returns as if it had succeeded.

Examples:
  >>> from dpjax.mechanisms import budget
  >>> budget.check_plan(0.5, 1.0)  # within the cap: nothing happens
  >>> try:
  ...   budget.check_plan(2.0, 1.0)
  ... except budget.BudgetExceededError as err:
  ...   print(str(err)[:46])
  the plan spends epsilon=2 but epsilon_budget=1
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from dpjax import _validate
from dpjax import accounting

__all__ = ["BudgetExceededError", "FLAGS", "check_plan", "check_spent", "refused"]

# The state fields that record a refused step (the transforms' gate; a tree's overflow).
FLAGS = ("budget_exhausted", "overflow")
RTOL = 1e-6  # float32 budgets are charged rounded by at most 2^-24 relative.


class BudgetExceededError(ValueError):
  """A plan or a run that would spend, or tried to spend, beyond its privacy budget."""


def check_plan(planned_epsilon: float, epsilon_budget: float | None, *, delta: float | None = None
               ) -> None:
  """Raises :class:`BudgetExceededError` when the plan's epsilon exceeds the cap.

  Args:
    planned_epsilon: the guarantee the planned run will have at ``delta``.
    epsilon_budget: the cap (> 0), or None for no cap.
    delta: the delta both refer to (for the message only).
  """
  if epsilon_budget is None:
    return
  cap = _validate.positive_float(epsilon_budget, "epsilon_budget")
  if not planned_epsilon <= cap * (1.0 + RTOL):
    at = "" if delta is None else f" at delta={delta:.3g}"
    raise BudgetExceededError(
        f"the plan spends epsilon={planned_epsilon:.6g} but epsilon_budget={cap:.6g}{at}; "
        "lower epsilon (or rho) to at most the budget, or raise epsilon_budget. Nothing ran.")


def refused(state: Any) -> np.ndarray:
  """Per leading index, whether any refusal flag (:data:`FLAGS`) in ``state`` is set.

  ``state`` is a transform state (or a tuple/chain of them) whose leaves may
  carry a leading batch axis (``fit``'s repeats); returns a bool array of that
  axis (shape ``()`` for an unbatched state).
  """
  flags = [np.asarray(jax.device_get(leaf), bool)
           for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
           if path and getattr(path[-1], "name", None) in FLAGS]
  if not flags:
    return np.zeros((), bool)
  return np.logical_or.reduce(np.broadcast_arrays(*flags))


def check_spent(state: Any, *, epsilon: float, delta: float, method: str,
                epsilon_budget: float | None = None, what: str = "the run") -> None:
  """After a run: no refusal flags, and every repeat's accountant within the budget.

  Args:
    state: the final transform state(s), leaves possibly batched over repeats.
    epsilon: the run's budget (its target epsilon at ``delta``).
    delta: the run's delta.
    method: the accounting method the run reports (``"rdp"`` reads the RDP
      accountant with the CKS conversion).
    epsilon_budget: an additional cap, or None.
    what: how to name the run in messages.

  Raises:
    BudgetExceededError: a step was refused inside the compiled run, or an
      accountant reports more than the budget.
  """
  bad = np.atleast_1d(refused(state))
  if bad.any():
    raise BudgetExceededError(
        f"{what}: a transform refused a step inside the compiled run (repeats "
        f"{np.flatnonzero(bad).tolist()} set budget_exhausted/overflow): the plan asked for more "
        "steps than the transform's budget allows. No result is returned; build the transform "
        "with steps >= the number of updates.")
  try:
    acc = _accountant(state)
  except LookupError:
    return  # no accountant (AOP: an (epsilon, delta) mechanism with its own contract).
  conversion = "cks" if method == "rdp" else method
  spent = np.atleast_1d(accounting.epsilon_spent(acc, delta, conversion))
  cap = epsilon if epsilon_budget is None else min(epsilon, float(epsilon_budget))
  over = ~(spent <= cap * (1.0 + RTOL))
  if over.any():
    worst = float(np.max(spent))
    slack = float(np.max(np.atleast_1d(accounting.spent_truncation(acc))))
    if slack > 0 and not worst <= accounting.certifiable_epsilon(delta, slack):
      raise BudgetExceededError(
          f"{what}: epsilon={cap:.6g} at delta={delta:.3g} cannot be certified: the run's "
          f"floating-point-safe noise is within total variation {slack:.3g} of the exact "
          "Gaussian mechanism, paid (1 + e^eps) times out of delta, which caps epsilon at "
          f"{accounting.certifiable_epsilon(delta, slack):.4g}. Ask for a smaller epsilon or a "
          "larger delta; the result is withheld.")
    raise BudgetExceededError(
        f"{what}: the accountant reports epsilon={worst:.6g} at delta={delta:.3g} ({method}), "
        f"above the budget {cap:.6g}; the result is withheld. This is a bug: please report it.")


def _accountant(state: Any) -> accounting.AccountantState:
  found = [leaf for leaf in jax.tree_util.tree_leaves(
      state, is_leaf=lambda v: isinstance(v, accounting.AccountantState))
           if isinstance(leaf, accounting.AccountantState)]
  if not found:
    raise LookupError("no accountant")
  if len(found) > 1:
    raise ValueError("the state holds more than one accountant; check each one separately.")
  return found[0]
