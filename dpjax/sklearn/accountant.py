"""The budget accountant: zCDP charges of many fits composed against one total.

:class:`BudgetAccountant` (diffprivlib's design, Holohan et al. 2019, arXiv
1907.02444), the amounts it states (:class:`Budget`), its ledger entries
(:class:`Charge`) and :class:`BudgetExceededError`. Needs no scikit-learn.
"""

from __future__ import annotations

import math
import numbers
import threading
from typing import Any, NamedTuple

import numpy as np

from dpjax import _validate
from dpjax import accounting as accounting_lib
from dpjax.mechanisms import budget as budget_lib

__all__ = ["Budget", "BudgetAccountant", "BudgetExceededError", "Charge"]


BudgetExceededError = budget_lib.BudgetExceededError  # a ValueError, as diffprivlib's BudgetError


# --- the budget accountant ------------------------------------------------------


class Budget(NamedTuple):
  """A privacy amount: ``rho`` (zCDP) and the (``epsilon``, ``delta``)-DP it implies.

  ``epsilon`` is ``None`` when there is no ``delta`` to state it at (an
  accountant built without one).
  """

  rho: float
  epsilon: float | None
  delta: float | None


class Charge(NamedTuple):
  """One entry of :attr:`BudgetAccountant.spent_budget`: ``rho`` spent by ``what``."""

  rho: float
  what: str


class BudgetAccountant:
  """A privacy budget shared by many fits: charges compose, one past the total is refused.

  Anchored on diffprivlib's ``BudgetAccountant`` (Holohan et al. 2019, arXiv
  1907.02444): a total budget ``(epsilon, delta)`` (unlimited by default),
  the ledger :attr:`spent_budget`, :attr:`spent`, :meth:`remaining`,
  :meth:`check` / :meth:`spend`, a process-wide default accountant
  (:meth:`set_default`, :meth:`pop_default`, :meth:`load_default`) and the
  context manager ``with accountant:`` (the default inside the block).

  **Composition: zCDP, not a sum of (epsilon, delta).** Charges are zCDP
  amounts ``rho`` and add up (Bun & Steinke 2016, arXiv 1605.02065, Lemma
  2.3). The total ``(epsilon, delta)`` is the zCDP budget
  ``rho_total = epsilon_to_zcdp(epsilon, delta, accounting)``; a charge is
  refused when ``spent_rho + rho`` would pass it (with the library's float
  tolerance, :data:`dpjax.mechanisms.budget.RTOL`). The spend is reported once, as the
  epsilon of ``spent_rho`` at the accountant's ``delta``. diffprivlib's
  ``slack`` (the delta traded for its advanced composition, Kairouz, Oh &
  Viswanath 2015) has no counterpart: zCDP composition needs no slack, and
  the conversion to (epsilon, delta) happens once, at ``delta``. The
  per-fit ``delta_`` only states each fit on its own and plays no part here.

  ``accounting="gaussian"`` (the default, as the estimator's) converts
  exactly, which is valid because every charge of
  :class:`DPLogisticRegression` is a composition of Gaussian mechanisms
  (Dong, Roth & Su 2019); charge other zCDP mechanisms to an accountant with
  ``accounting="cks"`` (valid for any zCDP mechanism).

  **One ledger, never copied.** ``copy.copy``/``copy.deepcopy`` return the
  accountant itself, so ``sklearn.base.clone`` (``GridSearchCV``,
  ``cross_val_score``) shares it between the clones and every fit is
  charged; charges are atomic under a lock (threads may share it). A copy
  made by pickling (another process: ``n_jobs > 1`` with joblib's default
  process backend) can be read but refuses charges, because they would not
  reach the original. The default accountant is per process: fits in worker
  processes with ``accountant=None`` are charged to that worker's own default,
  so pass an explicit accountant to enforce a total under process-based
  parallelism (its copies then refuse), or use ``n_jobs=1``.

  Args:
    epsilon: the total epsilon (> 0), ``math.inf`` (the default) for no limit.
    delta: the total delta in (0, 1); required when ``epsilon`` is finite.
      ``None`` (only with no limit) states the spend in ``rho`` alone.
    accounting: the zCDP -> (epsilon, delta) conversion, one of
      :data:`dpjax.accounting.METHODS`.

  Examples:
    >>> from dpjax.sklearn import BudgetAccountant, BudgetExceededError
    >>> acc = BudgetAccountant(epsilon=3.0, delta=1e-6)
    >>> round(acc.remaining(8).epsilon, 4)  # each one's epsilon at delta = 1e-6
    0.965
    >>> for _ in range(7):
    ...   _ = acc.spend(0.02801448191263034)  # a fit at epsilon = 1, delta = 1e-6
    >>> round(acc.spent.epsilon, 4), len(acc.spent_budget)
    (2.8899, 7)
    >>> try:
    ...   acc.spend(0.02801448191263034, what="fit 8")
    ... except BudgetExceededError as err:
    ...   print(str(err)[:72])
    fit 8: charging rho=0.0280145 would bring the total to rho=0.224116, pas
  """

  _default: BudgetAccountant | None = None
  _default_lock = threading.Lock()

  def __init__(self, *, epsilon: float = math.inf, delta: float | None = None,
               accounting: str = "gaussian") -> None:
    if isinstance(epsilon, (bool, np.bool_)) or not isinstance(epsilon, numbers.Real):
      raise TypeError(f"epsilon must be a positive number or math.inf (no limit), got "
                      f"{type(epsilon).__name__}.")
    if not (float(epsilon) > 0):  # also refuses NaN
      raise ValueError(f"epsilon must be > 0 (or math.inf for no limit), got {epsilon!r}.")
    if delta is not None:
      if isinstance(delta, (bool, np.bool_)) or not isinstance(delta, numbers.Real):
        raise TypeError(f"delta must be None or a number in (0, 1), got {type(delta).__name__}.")
      if not 0.0 < float(delta) < 1.0:
        raise ValueError(f"delta must be in the open interval (0, 1), got {delta!r}.")
      delta = float(delta)
    elif math.isfinite(epsilon):
      raise ValueError(f"a finite epsilon={epsilon!r} needs delta=<the total delta in (0, 1)>: "
                       "zCDP charges imply (epsilon, delta)-DP only at a stated delta.")
    self._epsilon = float(epsilon)
    self._delta = delta
    self._accounting = _validate.choice(accounting, "accounting", accounting_lib.METHODS)
    self._rho = (math.inf if math.isinf(self._epsilon) else
                 accounting_lib.epsilon_to_zcdp(self._epsilon, delta, self._accounting))
    self._charges: dict[int, Charge] = {}  # insertion-ordered; keys are charge tickets
    self._tickets = 0
    self._lock = threading.Lock()
    self._restored = False

  # --- reading --------------------------------------------------------------

  @property
  def epsilon(self) -> float:
    """The total epsilon (``math.inf``: no limit)."""
    return self._epsilon

  @property
  def delta(self) -> float | None:
    """The total delta (``None``: no limit, spend stated in rho)."""
    return self._delta

  @property
  def accounting(self) -> str:
    """The zCDP -> (epsilon, delta) conversion (:data:`dpjax.accounting.METHODS`)."""
    return self._accounting

  @property
  def rho(self) -> float:
    """The total as a zCDP budget: the largest rho that is (epsilon, delta)-DP."""
    return self._rho

  @property
  def spent_budget(self) -> list[Charge]:
    """The ledger, one :class:`Charge` per charge, oldest first (a copy)."""
    with self._lock:
      return list(self._charges.values())

  @property
  def spent_rho(self) -> float:
    """The zCDP spent so far: the sum of the charges (composition adds rho)."""
    with self._lock:
      return math.fsum(c.rho for c in self._charges.values())

  def _budget(self, rho: float, delta: float | None) -> Budget:
    if delta is None:
      return Budget(rho, None, None)
    if math.isinf(rho):
      return Budget(rho, math.inf, delta)
    return Budget(rho, accounting_lib.zcdp_to_epsilon(max(rho, 0.0), delta, self._accounting),
                  delta)

  @property
  def spent(self) -> Budget:
    """What was spent: ``Budget(rho, epsilon, delta)``, epsilon at the accountant's delta."""
    return self._budget(self.spent_rho, self._delta)

  def total(self, *, delta: float | None = None) -> Budget:
    """The spend stated at ``delta`` (default: the accountant's delta)."""
    if delta is None:
      delta = self._delta
    else:
      delta = _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
    return self._budget(self.spent_rho, delta)

  def remaining(self, k: int = 1) -> Budget:
    """What each of ``k`` further equal charges may spend: ``(rho - spent_rho) / k``.

    ``epsilon`` is that rho's epsilon at the accountant's delta: a fit with
    this ``epsilon`` at the same ``delta`` and ``accounting`` fits ``k`` times.
    Unlimited: ``Budget(inf, inf, delta)``.
    """
    k = _validate.positive_int(k, "k")
    left = max(self._rho - self.spent_rho, 0.0)
    return self._budget(left / k, self._delta)

  # --- charging -------------------------------------------------------------

  def _check_locked(self, rho: float, what: str) -> None:
    if self._restored:
      raise ValueError(
          f"{what}: this BudgetAccountant was restored from a pickle, a copy of the original "
          "ledger, so a charge to it would not reach the original (GridSearchCV or "
          "cross_val_score with n_jobs > 1 run fits in other processes). Use n_jobs=1 (or "
          "joblib's threading backend), or build a new accountant and spend the old "
          "spent_rho on it.")
    spent = math.fsum(c.rho for c in self._charges.values())
    if not spent + rho <= self._rho * (1.0 + budget_lib.RTOL):
      left = max(self._rho - spent, 0.0)
      raise BudgetExceededError(
          f"{what}: charging rho={rho:.6g} would bring the total to rho={spent + rho:.6g}, "
          f"past this BudgetAccountant's rho={self._rho:.6g} (epsilon={self._epsilon:.6g} at "
          f"delta={self._delta:.3g}, {self._accounting}); {left:.6g} is left. Nothing was "
          "charged (a refused fit computes nothing). Lower the fit's epsilon, or use an "
          "accountant with a larger budget.")

  def check(self, rho: float, *, what: str = "BudgetAccountant.check") -> None:
    """Raises :class:`BudgetExceededError` unless ``rho`` more fits in the total."""
    rho = _validate.nonnegative_float(rho, "rho")
    with self._lock:
      self._check_locked(rho, what)

  def spend(self, rho: float, *, what: str = "BudgetAccountant.spend") -> BudgetAccountant:
    """Charges ``rho`` (zCDP), atomically with :meth:`check`; returns ``self``.

    To charge an (epsilon, delta) of a zCDP mechanism, convert it first with
    :func:`dpjax.accounting.epsilon_to_zcdp`.
    """
    self._charge(rho, what)
    return self

  def _charge(self, rho: Any, what: str) -> int:
    """Check and spend under the lock; returns a ticket for :meth:`_settle` / :meth:`_refund`."""
    rho = _validate.nonnegative_float(rho, "rho")
    if not isinstance(what, str):
      raise TypeError(f"what must be a str, got {type(what).__name__}.")
    with self._lock:
      self._check_locked(rho, what)
      self._tickets += 1
      self._charges[self._tickets] = Charge(rho, what)
      return self._tickets

  def _settle(self, ticket: int, rho: float) -> None:
    """Replaces a planned charge by the amount the run's own accountants read."""
    with self._lock:
      self._charges[ticket] = self._charges[ticket]._replace(rho=float(rho))

  def _refund(self, ticket: int) -> None:
    """Removes a charge whose fit failed its last checks before it drew any noise."""
    with self._lock:
      del self._charges[ticket]

  # --- the default accountant -----------------------------------------------

  @staticmethod
  def load_default(accountant: BudgetAccountant | None = None) -> BudgetAccountant:
    """``accountant`` itself, or the current default accountant for ``None``."""
    if accountant is None:
      with BudgetAccountant._default_lock:
        if BudgetAccountant._default is None:
          BudgetAccountant._default = BudgetAccountant()
        return BudgetAccountant._default
    if not isinstance(accountant, BudgetAccountant):
      raise TypeError(f"accountant must be None (the default accountant) or a "
                      f"dpjax.sklearn.BudgetAccountant, got {type(accountant).__name__}.")
    return accountant

  def set_default(self) -> BudgetAccountant:
    """Makes this accountant the default (``accountant=None`` charges it); returns ``self``."""
    with BudgetAccountant._default_lock:
      BudgetAccountant._default = self
    return self

  @staticmethod
  def pop_default() -> BudgetAccountant:
    """Returns the current default and installs a fresh unlimited one."""
    with BudgetAccountant._default_lock:
      old = BudgetAccountant._default
      BudgetAccountant._default = BudgetAccountant()
    return old if old is not None else BudgetAccountant()

  def __enter__(self) -> BudgetAccountant:
    with BudgetAccountant._default_lock:
      self.__dict__.setdefault("_previous", []).append(BudgetAccountant._default)
      BudgetAccountant._default = self
    return self

  def __exit__(self, *exc: Any) -> None:
    with BudgetAccountant._default_lock:
      BudgetAccountant._default = self._previous.pop()

  # --- copies ---------------------------------------------------------------

  def __copy__(self) -> BudgetAccountant:
    return self  # one ledger: sklearn.base.clone shares it between clones.

  def __deepcopy__(self, memo: dict) -> BudgetAccountant:
    return self

  def __getstate__(self) -> dict:
    with self._lock:
      state = {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_previous")}
      state["_charges"] = dict(self._charges)
    return state

  def __setstate__(self, state: dict) -> None:
    self.__dict__.update(state)
    self._lock = threading.Lock()
    self._restored = True  # a copy: readable, refuses charges.

  def __repr__(self) -> str:
    limit = ("no limit" if math.isinf(self._epsilon) else
             f"epsilon={self._epsilon:g}, delta={self._delta:g}")
    return (f"BudgetAccountant({limit}, accounting={self._accounting!r}; spent rho="
            f"{self.spent_rho:.6g} in {len(self._charges)} charge(s))")
