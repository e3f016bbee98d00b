"""A private damped Newton method with the noises of Avella-Medina et al. (2021), rho-zCDP.

**Private: yes, rho-zCDP** (``n`` public; ``neighbouring="zero-out"``, the
default, or ``"replace-one"``, :mod:`dpjax.problem._neighbouring`). Each step releases
the noisy mean gradient and the symmetrised noisy mean Hessian, two Gaussian
mechanisms of ``rho/T`` together (:func:`damped_newton_noise`), charged to the
accountant; ``T`` steps compose to ``rho``. The step size is post-processing
of those releases (``"noisy-decrement"``) or a public constant, unlike the
non-private :func:`damped_newton`, whose step size reads the noise-free
Newton step.

Paper: the noisy damped Newton method of Avella-Medina, Bradshaw, Loh,
"Differentially private inference via noisy optimization" (2021,
arXiv:2103.11003), with its step size made private, for the comparison of
Ganesh, Haghifam, Steinke, Thakurta (NeurIPS 2023, arXiv:2305.13209), Sec. 6.
"""

from __future__ import annotations

import jax
import optax

from dpjax import _validate
from dpjax.baselines._damped_newton_core import damped_newton_transform

__all__ = ["damped_newton_private"]


def damped_newton_private(
    *,
    n: int,
    rho: float | jax.Array | None = None,
    steps: int | None = None,
    rho_per_step: float | jax.Array | None = None,
    grad_frac: float = 0.7,
    min_eigenvalue: float = 1e-5,
    step_size: float | str = "noisy-decrement",
    row_norm_bound: float = 1.0,
    key: int | jax.Array,
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """A private damped Newton method with the noises of Avella-Medina et al. (2021).

  **Private: yes, rho-zCDP** (``n`` public; ``neighbouring="zero-out"``, the
  default, or ``"replace-one"``). Each step releases ``g~ = g + N(0, sigma_g^2
  I)`` (sensitivity ``L/n``; ``2L/n`` for replace-one; budget ``grad_frac
  rho_t``) and ``H + (E + E^T)/2`` (Frobenius sensitivity ``L^2/(4n)``;
  ``sqrt(2) L^2/(4n)`` for replace-one, two PSD rank-one terms; budget ``(1 -
  grad_frac) rho_t``), calibrated by :func:`damped_newton_noise` and charged to
  the accountant where they are drawn; everything else is post-processing of
  those releases and public constants:

  * ``H~ = eigclip(H + (E + E^T)/2, min_eigenvalue)``, direction ``p = H~^{-1} g~``;
  * ``step_size="noisy-decrement"`` (default): the paper's damping
    ``eta = min(1, log(1 + beta~) / beta~)`` with ``beta~ = ||p||`` computed
    from the released noisy quantities instead of the noise-free ones
    (compare :func:`damped_newton`);
  * ``step_size=<float in (0, 1]>``: a public constant ``eta``.

  Returns ``-eta p``. Budget arguments and gate as :func:`dpjax.transforms.dp_gd`.

  Args:
    n: number of examples.
    rho, steps, rho_per_step: the budget (see ``dp_gd``).
    grad_frac: ``gamma`` in (0, 1).
    min_eigenvalue: eigen-clip floor (1e-5).
    step_size: ``"noisy-decrement"`` or a public constant in (0, 1].
    row_norm_bound: ``L``.
    key: int seed or typed PRNG key.
    neighbouring: ``"zero-out"`` (default) or ``"replace-one"`` (gradient noise
      x 2, Hessian noise x sqrt(2)).
    disable_noise_for_testing: no noise at all (NOT private). For tests only.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` with a :class:`DampedNewtonState`.

  Examples:
    >>> import jax
    >>> from dpjax import accounting, baselines, data
    >>> from dpjax.problem import glm
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> tx = baselines.damped_newton_private(n=1000, rho=1.0, steps=2, key=0)
    >>> w = jax.numpy.zeros(5)
    >>> state = tx.init(w)
    >>> for _ in range(2):
    ...   _, g, h = glm.logistic_grad_and_curvature(w, x, y)
    ...   u, state = tx.update(g, state, w, curvature_matrix=h)
    ...   w = w + u
    >>> round(accounting.spent_rho(state.accountant), 12)
    1.0
  """
  if isinstance(step_size, str):
    if step_size != "noisy-decrement":
      raise ValueError(f"step_size must be 'noisy-decrement' or a number in (0, 1], got "
                       f"{step_size!r}.")
  else:
    step_size = _validate.positive_float(step_size, "step_size")
    if step_size > 1.0:
      raise ValueError(f"step_size must be in (0, 1] (a damped Newton step), got {step_size!r}.")
  return damped_newton_transform(
      n=n, rho=rho, steps=steps, rho_per_step=rho_per_step, grad_frac=grad_frac,
      min_eigenvalue=min_eigenvalue, step_size=step_size, row_norm_bound=row_norm_bound, key=key,
      neighbouring=neighbouring, disable_noise_for_testing=disable_noise_for_testing,
      name="damped_newton_private")
