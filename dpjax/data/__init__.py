"""Datasets for DP logistic regression: LIBSVM loading, preprocessing, synthetic data.

Every dpjax optimizer assumes the contract of Ganesh et al. (NeurIPS 2023,
arXiv:2305.13209), Sec. 5.1:
rows ``||x_i||_2 <= 1`` and labels ``y_i in {-1, +1}``. This module produces
data that meets it and checks it:

* :func:`load_libsvm` reads svmlight/LIBSVM text (plain, gzip or bzip2) and, by
  default, scales each row into the unit ball on its own (:func:`scale_rows`), so
  adding or removing a row changes no other row; the paper's column
  standardization (that of the paper's reference code) stays available as
  ``preprocess="paper"``, which is not private (it warns), and
  :mod:`dpjax.mechanisms.standardize` is its private replacement;
* :func:`scale_rows` is that per-row map: clip each row to a public norm bound,
  prepend a constant intercept, and scale into ``||x_i|| <= 1``;
* :func:`synthetic` is the paper's generator (section 5.1, Jul-2023 code);
* :func:`clip_rows` projects rows into a ball, exactly in the array's own dtype;
* :func:`validate_dataset` is the eager check optimizers run at the privacy
  boundary.

Arrays are host (numpy) arrays; they are valid inputs to every jax function.
"""

from dpjax.data import contract  # the row contract and its checks
from dpjax.data import libsvm  # LIBSVM files
from dpjax.data import synthetic_data  # the paper's generator
from dpjax.data.contract import Dataset, clip_rows, scale_rows, validate_dataset
from dpjax.data.libsvm import PAPER_LEAK, PREPROCESS, load_libsvm
from dpjax.data.synthetic_data import synthetic

__all__ = [
    "Dataset",
    "PREPROCESS",
    "load_libsvm",
    "scale_rows",
    "synthetic",
    "clip_rows",
    "validate_dataset",
]
