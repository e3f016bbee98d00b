"""Damped Newton of Avella-Medina et al. (2021) as run in Ganesh et al. (2023). NOT private.

**Private: no.** The gradient and Hessian noises are the rho-zCDP Gaussian
mechanisms of :func:`damped_newton_private` (``n`` public,
``neighbouring="zero-out"`` or ``"replace-one"``) and are charged to the
accountant, but the step size ``min(1, log(1 + beta) / beta)`` reads
``beta = ||H^{-1} g||`` from the NOISE-FREE gradient and Hessian: a
data-dependent choice paid for by no noise, so the iterates are not
differentially private at any budget. The budget only names the noise drawn,
so that the noise matches the private methods at the same budget.

Paper: Avella-Medina, Bradshaw, Loh, "Differentially private inference via
noisy optimization" (2021, arXiv:2103.11003), p. 22, run as Baseline 3 of
Ganesh, Haghifam, Steinke, Thakurta (NeurIPS 2023, arXiv:2305.13209), Sec. 6,
which notes that it is not private.
"""

from __future__ import annotations

import jax
import optax

from dpjax.baselines._damped_newton_core import damped_newton_transform

__all__ = ["damped_newton"]


def damped_newton(
    *,
    n: int,
    rho: float | jax.Array | None = None,
    steps: int | None = None,
    rho_per_step: float | jax.Array | None = None,
    grad_frac: float = 0.7,
    min_eigenvalue: float = 1e-5,
    row_norm_bound: float = 1.0,
    key: int | jax.Array,
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """Damped Newton of Avella-Medina et al. 2021 as run in the paper (Sec. 6). NOT PRIVATE.

  **Private: no.** ``update(g, state, params, *, curvature_matrix=H)`` takes
  the noise-free mean gradient ``g`` and Hessian ``H`` and returns
  ``-eta H~^{-1} g~`` with ``g~ = g + N(0, sigma_g^2 I)``,
  ``H~ = eigclip(H + (E + E^T)/2, min_eigenvalue)`` (:func:`damped_newton_noise`,
  :func:`dpjax.mechanisms.noise.add_gaussian_symmetric`) and the paper's step size
  ``eta = min(1, log(1 + beta) / beta)``, ``beta = ||H^{-1} g||`` computed from
  the NOISE-FREE ``g`` and ``H`` (``H`` eigen-clipped at the same floor, so
  singular Hessians are handled). That step size is a data-dependent choice
  paid for by no noise, so the iterates are not differentially private (the
  paper says so, following [Medina21, p. 22]). The accountant is still charged
  the budget of the noise drawn (``rho/T`` per step), so the noise matches
  :func:`damped_newton_private` at the same budget.

  Budget arguments and the step gate are those of :func:`dpjax.transforms.dp_gd`.

  Args:
    n: number of examples.
    rho, steps, rho_per_step: the nominal budget (see ``dp_gd``).
    grad_frac: ``gamma``: share of each step's budget for the gradient (0.7).
    min_eigenvalue: eigen-clip floor of ``H~`` (1e-5, the Jul-2023 reference).
    row_norm_bound: ``L``, the bound on row norms (``sigma`` scales).
    key: int seed or typed PRNG key.
    neighbouring: the relation the noise is calibrated for (as in
      :func:`damped_newton_private`, whose noise this matches).
    disable_noise_for_testing: no noise at all. For tests only.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` with a :class:`DampedNewtonState`.

  Examples:
    >>> import jax
    >>> from dpjax import baselines, data
    >>> from dpjax.problem import glm
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> tx = baselines.damped_newton(n=1000, rho=1.0, steps=5, key=0)
    >>> w = jax.numpy.zeros(5)
    >>> state = tx.init(w)
    >>> _, g, h = glm.logistic_grad_and_curvature(w, x, y)
    >>> u, state = tx.update(g, state, w, curvature_matrix=h)
    >>> u.shape, float(state.step_size) <= 1.0
    ((5,), True)
  """
  return damped_newton_transform(
      n=n, rho=rho, steps=steps, rho_per_step=rho_per_step, grad_frac=grad_frac,
      min_eigenvalue=min_eigenvalue, step_size="oracle", row_norm_bound=row_norm_bound, key=key,
      neighbouring=neighbouring, disable_noise_for_testing=disable_noise_for_testing,
      name="damped_newton")
