"""Privacy accounting: the accountant pytree, Gaussian budgets, conversions.

Privacy model: ``n`` public and neighbours differing in one row, zero-out (the
default) or replace-one for the full-batch and streaming methods
(:mod:`dpjax.problem._neighbouring`), add/remove for the Poisson-subsampled ones; two
running totals live inside optimizer states:

* rho-zCDP (Bun & Steinke 2016, arXiv 1605.02065) of the full-batch Gaussian
  mechanisms. Rho composes additively; the noise scale of every such
  mechanism is derived from its budget by :func:`gaussian_sigma`.
* the Renyi-DP curve (Mironov 2017) of the Poisson-subsampled Gaussian
  mechanisms (DP-SGD, Abadi et al. CCS 2016; the minibatch Newton method of
  Ganesh et al. NeurIPS 2023, Sec. 6), on the fixed order
  grid :data:`RDP_ORDERS`, plus a total-variation slack ``truncation`` for the
  batch caps of :mod:`dpjax.mechanisms.sampling`. RDP also composes additively, order by
  order; rho-zCDP is the RDP curve ``alpha * rho``, so both combine into one
  curve when a guarantee is read (:func:`epsilon_spent`).

One concern a module, each importing only those listed before it:

* :mod:`~dpjax.accounting.numerics`: host-side float64 erfcx, Brent's root
  finder on a bracket, log-sum-exp;
* :mod:`~dpjax.accounting.compensated`: the error-free (TwoSum) triple-word
  arithmetic of the accountant's totals, in-graph;
* :mod:`~dpjax.accounting.gaussian`: :func:`gaussian_zcdp` and
  :func:`gaussian_sigma`, in-graph;
* :mod:`~dpjax.accounting.conversions`: :func:`zcdp_to_epsilon` and
  :func:`epsilon_to_zcdp` by the methods of :data:`METHODS`, host side;
* :mod:`~dpjax.accounting.resolve`: :func:`resolve_budget`, a run's
  ``(rho, epsilon, delta)`` from one of epsilon and rho, and the cap
  :func:`certifiable_epsilon` / :func:`check_certifiable`;
* :mod:`~dpjax.accounting.rdp`: :data:`RDP_ORDERS`,
  :func:`subsampled_gaussian_rdp` and :func:`rdp_to_epsilon`, host side;
* :mod:`~dpjax.accounting.calibration`: :func:`calibrate_noise_multiplier`;
* :mod:`~dpjax.accounting.accountant`: :class:`AccountantState` with
  :func:`init_accountant`, :func:`charge`, :func:`charge_rdp` (in-graph:
  ``jit``/``vmap``/``lax.scan`` safe) and :func:`spent_rho`,
  :func:`spent_rdp`, :func:`spent_truncation`, :func:`epsilon_spent` (host
  side, concrete states only).

The host-side half uses numpy and ``math`` only: no scipy at runtime. Every
name is importable from here (``dpjax.accounting.charge``).
"""

from dpjax.accounting import accountant, calibration, conversions, gaussian, rdp, resolve
from dpjax.accounting.accountant import (
    AccountantState,
    charge,
    charge_rdp,
    epsilon_spent,
    init_accountant,
    spent_rdp,
    spent_rho,
    spent_truncation,
)
from dpjax.accounting.calibration import calibrate_noise_multiplier
from dpjax.accounting.conversions import METHODS, epsilon_to_zcdp, zcdp_to_epsilon
from dpjax.accounting.gaussian import gaussian_sigma, gaussian_zcdp
from dpjax.accounting.rdp import RDP_ORDERS, rdp_to_epsilon, subsampled_gaussian_rdp
from dpjax.accounting.resolve import certifiable_epsilon, check_certifiable, resolve_budget

# Private helpers that other modules and the tests reach as ``accounting._name``.
from dpjax.accounting.compensated import _two_sum  # noqa: F401
from dpjax.accounting.conversions import (  # noqa: F401
    _cks_eps_at,
    _cks_log_alpha_m1,
    _gaussian_log_delta,
)
from dpjax.accounting.numerics import _erfcx  # noqa: F401
from dpjax.accounting.rdp import _log_a_minus_1_int, _log_a_minus_1_quad  # noqa: F401

# The public names, each listed once, in the module that defines it.
__all__ = [
    *conversions.__all__,
    *rdp.__all__,
    *accountant.__all__,
    *gaussian.__all__,
    *resolve.__all__,
    *calibration.__all__,
]
