"""precond-gd reproduces the numbers of an earlier, independent prototype of the method.

The prototype (float64 JAX, written separately from dpjax) ran with exact
Gaussian rho at delta = n^-2, start at 0, 3% of rho on the one release of
X^T X / (4n), and its tuned kappa = 6. Means of 20 fresh repeats must be
within +-15% of the prototype's (its own s.e. is 2-3%).
The LIBSVM cells skip when the shared data is absent (CI has it).

The default run reproduces the synthetic cell; the two LIBSVM cells (a1a.t,
a5a: the same ``training.fit`` of precond-gd on other data, a third of this
file's time each) run under ``python -m pytest --full``. What they add beyond the
synthetic cell is covered in the default run elsewhere: the paper preprocessing
and its ``PrivacyLeakWarning`` in ``test_data.py``, precond-gd's last-quarter
output (the a5a cell) exactly in ``test_training.py``
(``test_average_is_the_mean_of_the_last_iterates``).

The float64 optimum ``loss_star`` of each dataset (``training.optimum_loss``,
20-40 s on a1a.t and on the separable a5a, most of this file's time) comes from
``conftest.KNOWN_OPTIMA``: the value it returns, keyed by a digest of the data
(data that differs in any bit falls back to computing it). The optimum itself
is tested in ``test_solve.py`` (``test_real_a1a_t``, ``test_real_w8a_with_ridge``).
"""

from __future__ import annotations

import pytest

from conftest import known_optima, load_benchmark, shared_data_file
import dpjax
from dpjax import training as fit_lib

# (dataset, epsilon, m, average, the prototype's mean of 20 fresh repeats)
CELLS = [
    pytest.param("a1a.t", 1.0, 160, "last-half", 0.005289, marks=pytest.mark.full),
    ("synthetic", 10.0, 40, "last-half", 0.0001564),
    pytest.param("a5a", 1.0, 160, "last-quarter", 0.02635, marks=pytest.mark.full),
]


@pytest.mark.parametrize("name,epsilon,m,average,reference", CELLS)
def test_reproduces_the_research_note(name, epsilon, m, average, reference):
  harness = load_benchmark("_harness")
  spec = harness.DATASETS[name]
  data_dir = harness.DEFAULT_DATA_DIR if spec.file is None else shared_data_file(spec.file).parent
  if spec.file is None:
    ds = harness.load_dataset(name, data_dir)
  else:  # the prototype used the paper's preprocessing, which is not private
    with pytest.warns(dpjax.PrivacyLeakWarning):
      ds = harness.load_dataset(name, data_dir)
  with known_optima():
    res = fit_lib.fit(ds, "precond-gd", epsilon=epsilon, steps=m, repeats=20, seed=1,
                      average=average, kappa=6.0, curvature_frac=0.03, accounting="gaussian")
  assert res.delta == 1.0 / ds.x.shape[0] ** 2 and res.curvature_evaluations == 1
  assert res.excess_loss_mean == pytest.approx(reference, rel=0.15), (
      f"{name} eps={epsilon} m={m}: {res.excess_loss_mean:.4g} +- {res.excess_loss_se:.2g} "
      f"against the prototype's {reference}")
