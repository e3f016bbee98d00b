"""Tests for dpjax.data (the data contract, the reference preprocessing, synthetic data)."""

from __future__ import annotations

import bz2
import gzip
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import shared_data_file

import dpjax
from dpjax import data

TOY = """# toy file
+1 1:2 3:0.5
-1 2:1 3:-1.5   # trailing comment

+1 1:1 2:1 3:1
-1 4:7
"""


def _row_norms(x):
  # Exactly as dpjax._validate.check_row_norms computes them (the contract).
  x = np.asarray(x, np.float64)
  return np.sqrt(np.einsum("ij,ij->i", x, x))


def _write(tmp_path, text, name="toy.svm"):
  path = tmp_path / name
  path.write_text(text)
  return path


def _reference_paper(x):
  """Independent reference: StandardScaler -> normalize -> bias -> /max(1, norm)."""
  x = np.asarray(x, np.float64)
  mu = x.mean(0)
  sd = np.sqrt(((x - mu) ** 2).mean(0))
  z = np.zeros_like(x)
  for j in range(x.shape[1]):
    if np.ptp(x[:, j]) > 0:
      z[:, j] = (x[:, j] - mu[j]) / sd[j]
  for i in range(x.shape[0]):
    nrm = math.sqrt(float(z[i] @ z[i]))
    if nrm > 0:
      z[i] = z[i] / nrm
  out = np.hstack([np.ones((x.shape[0], 1)), z])
  for i in range(out.shape[0]):
    out[i] /= max(1.0, math.sqrt(float(out[i] @ out[i])))
  return out


def _reference_per_row(x, bound=1.0):
  """Independent reference of the default: [1, x_i / max(B, ||x_i||)] / sqrt(2), row by row."""
  out = np.empty((x.shape[0], x.shape[1] + 1))
  for i, row in enumerate(np.asarray(x, np.float64)):
    z = row / max(bound, math.sqrt(float(row @ row)))
    out[i] = np.concatenate([[1.0], z]) / math.sqrt(2.0)
  return out


def _paper(path, **kwargs):
  """``load_libsvm(..., preprocess="paper")``, which must warn that it is not private."""
  with pytest.warns(dpjax.PrivacyLeakWarning, match="not private|no privacy guarantee"):
    return data.load_libsvm(path, preprocess="paper", **kwargs)


def _libsvm_text(x, y):
  return "".join(f"{int(y[i]):+d} " + " ".join(f"{j + 1}:{float(x[i, j])!r}"
                                               for j in range(x.shape[1]) if x[i, j] != 0) + "\n"
                 for i in range(x.shape[0]))


# --- LIBSVM reader --------------------------------------------------------------


def test_load_none_reads_dense_values(tmp_path):
  ds = data.load_libsvm(_write(tmp_path, TOY), preprocess="none", dtype=np.float64)
  expected = np.array([[2, 0, 0.5, 0], [0, 1, -1.5, 0], [1, 1, 1, 0], [0, 0, 0, 7]], float)
  np.testing.assert_array_equal(ds.x, expected)
  np.testing.assert_array_equal(ds.y, [1, -1, 1, -1])
  assert (ds.n, ds.d) == (4, 4)


def test_plain_gz_bz2_identical(tmp_path):
  plain = _write(tmp_path, TOY)
  gz = tmp_path / "toy.svm.gz"
  gz.write_bytes(gzip.compress(TOY.encode()))
  bz = tmp_path / "toy.bz2"
  bz.write_bytes(bz2.compress(TOY.encode()))
  odd = tmp_path / "compressed_without_suffix"
  odd.write_bytes(bz2.compress(TOY.encode()))
  ref = data.load_libsvm(plain)
  for path in (gz, bz, odd, str(gz)):
    got = data.load_libsvm(path)
    np.testing.assert_array_equal(got.x, ref.x)
    np.testing.assert_array_equal(got.y, ref.y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_paper_matches_independent_reference(tmp_path, dtype):
  rng = np.random.default_rng(1)
  n, d = 40, 6
  x = np.round(rng.normal(size=(n, d)), 3) * (rng.random((n, d)) < 0.6)
  x[:, 4] = 0.1  # zero-variance (constant) column whose mean does not round exactly
  x[:, 5] = 0.0  # all-zero column
  y = np.where(rng.random(n) < 0.5, 1, -1)
  lines = [f"{y[i]:+d} " + " ".join(f"{j + 1}:{float(x[i, j])!r}" for j in range(d) if x[i, j] != 0)
           for i in range(n)]
  path = _write(tmp_path, "\n".join(lines) + "\n")
  ds = _paper(path, n_features=d, dtype=dtype)
  ref = _reference_paper(x)
  assert ds.x.dtype == dtype and ds.y.dtype == dtype
  rtol = 1e-12 if dtype == np.float64 else 3e-7
  np.testing.assert_allclose(ds.x, ref, rtol=rtol, atol=rtol)
  np.testing.assert_array_equal(ds.x[:, 5:], 0.0)  # constant and zero columns -> 0
  assert (_row_norms(ds.x) <= 1.0).all()
  np.testing.assert_array_equal(ds.y, y)


def test_paper_zero_row_becomes_intercept_only(tmp_path):
  # Feature 1 is constant (all 1): its standardized column is 0, not noise.
  text = "+1 1:1 2:5\n-1 1:1 3:2\n+1 1:1\n-1 1:1 2:1 3:1\n"
  ds = _paper(_write(tmp_path, text), dtype=np.float64)
  np.testing.assert_allclose(ds.x[:, 1], 0.0)  # column 1 is constant (all 1)
  rows = _row_norms(ds.x)
  np.testing.assert_allclose(rows, 1.0, rtol=1e-15)
  # Non-zero standardized rows are [1, u]/sqrt(2) with ||u|| = 1.
  np.testing.assert_allclose(ds.x[:, 0], 1 / math.sqrt(2), rtol=1e-15)


def test_paper_all_zero_standardized_row(tmp_path):
  # Row 2 equals the column mean, so its standardized row is zero.
  text = "+1 1:0\n-1 1:2\n+1 1:1\n"
  ds = _paper(_write(tmp_path, text), n_features=1, dtype=np.float64)
  np.testing.assert_array_equal(ds.x[2], [1.0, 0.0])
  np.testing.assert_allclose(ds.x[:2, 0], 1 / math.sqrt(2), rtol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_default_is_per_row_and_matches_independent_reference(tmp_path, dtype):
  rng = np.random.default_rng(3)
  n, d = 50, 7
  x = np.round(rng.normal(size=(n, d)) * rng.choice([0.01, 1.0, 30.0], size=(n, 1)), 4)
  x *= rng.random((n, d)) < 0.7
  x[5] = 0.0  # a zero row stays zero (only the intercept)
  y = np.where(rng.random(n) < 0.5, 1, -1)
  path = _write(tmp_path, _libsvm_text(x, y))
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # the private default warns about nothing
    ds = data.load_libsvm(path, n_features=d, dtype=dtype)
  ref = _reference_per_row(x)
  assert ds.x.shape == (n, d + 1) and ds.x.dtype == dtype
  rtol = 1e-15 if dtype == np.float64 else 3e-7
  np.testing.assert_allclose(ds.x, ref, rtol=rtol, atol=rtol)
  np.testing.assert_array_equal(ds.x[:, 0], dtype(1 / math.sqrt(2)))  # one constant intercept
  np.testing.assert_array_equal(ds.x[5, 1:], 0.0)
  norms = _row_norms(ds.x)
  assert (norms <= 1.0).all()
  small = _row_norms(x) < 1  # rows inside the ball keep their length: no renormalization
  assert small.any() and (~small).any()
  np.testing.assert_allclose(norms[small] ** 2, (1 + _row_norms(x[small]) ** 2) / 2, rtol=1e-6)
  np.testing.assert_allclose(norms[~small], 1.0, rtol=1e-6)
  np.testing.assert_array_equal(data.scale_rows(x, dtype=dtype), ds.x)


def _extra_row_pairs(rng, n, d):
  """(x, y) and the same rows with one extreme row inserted at a random position."""
  x = np.round(rng.normal(size=(n, d)), 3) * (rng.random((n, d)) < 0.5)
  y = np.where(rng.random(n) < 0.5, 1, -1)
  extra = np.zeros(d)
  extra[[0, d - 1]] = [1e6, -3e5]  # far outside every column's range
  at = int(rng.integers(0, n + 1))
  return x, y, np.insert(x, at, extra, axis=0), np.insert(y, at, 1), at


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_adding_one_row_changes_no_other_loaded_row(tmp_path, dtype):
  rng = np.random.default_rng(11)
  n, d = 200, 9
  x, y, x2, y2, at = _extra_row_pairs(rng, n, d)
  path, path2 = _write(tmp_path, _libsvm_text(x, y)), _write(tmp_path, _libsvm_text(x2, y2), "plus.svm")
  ds = data.load_libsvm(path, n_features=d, dtype=dtype)
  ds2 = data.load_libsvm(path2, n_features=d, dtype=dtype)
  others = np.delete(ds2.x, at, axis=0)
  np.testing.assert_array_equal(others, ds.x)  # bit for bit
  np.testing.assert_array_equal(np.delete(ds2.y, at), ds.y)
  assert not np.array_equal(ds2.x[at], ds.x[min(at, n - 1)])
  # The same check sees the paper's standardization: the extra row moves all the others.
  moved = np.delete(_paper(path2, n_features=d, dtype=dtype).x, at, axis=0)
  assert (np.abs(moved - _paper(path, n_features=d, dtype=dtype).x).max(axis=1) > 0).mean() > 0.9


@pytest.mark.parametrize("name", ["a1a.t.bz2", "a9a.bz2"])
def test_adding_one_row_to_real_libsvm_file(tmp_path, name):
  lines = bz2.decompress(shared_data_file(name).read_bytes()).decode().splitlines(keepends=True)
  head = lines[:3000]
  path = _write(tmp_path, "".join(head), "head.svm")
  for at, line in ((0, lines[-1]), (1234, "+1 1:1 5:1 123:1\n"), (3000, "-1\n")):
    path2 = _write(tmp_path, "".join(head[:at] + [line] + head[at:]), "plus.svm")
    ds = data.load_libsvm(path, n_features=123)
    ds2 = data.load_libsvm(path2, n_features=123)
    np.testing.assert_array_equal(np.delete(ds2.x, at, axis=0), ds.x)
    np.testing.assert_array_equal(np.delete(ds2.y, at), ds.y)
    assert (_row_norms(ds2.x) <= 1).all()


def test_row_bound_is_public_and_keeps_short_rows_short(tmp_path):
  text = "+1 1:1 2:1 3:1 4:1\n-1 1:1\n+1 2:3 3:4\n"
  path = _write(tmp_path, text)
  ds = data.load_libsvm(path, row_bound=2.0, dtype=np.float64)
  np.testing.assert_allclose(ds.x, _reference_per_row(np.array(
      [[1, 1, 1, 1], [1, 0, 0, 0], [0, 3, 4, 0]], float), bound=2.0), rtol=1e-15)
  np.testing.assert_allclose(ds.x[1, 1], 0.5 / math.sqrt(2), rtol=1e-15)  # 1 / B, not 1
  with pytest.raises(ValueError, match="row_bound must be > 0"):
    data.load_libsvm(path, row_bound=0.0)
  with pytest.raises(ValueError, match="row_bound=2.0 applies to preprocess='per-row' only"):
    data.load_libsvm(path, row_bound=2.0, preprocess="none")


def test_paper_warns_privacy_leak(tmp_path):
  path = _write(tmp_path, TOY)
  with pytest.warns(dpjax.PrivacyLeakWarning) as caught:
    data.load_libsvm(path, preprocess="paper")
  assert len(caught) == 1 and issubclass(caught[0].category, RuntimeWarning)
  assert "per-row" in str(caught[0].message) and "PrivateStandardizer" in str(caught[0].message)
  assert caught[0].filename == __file__  # attributed to the caller of load_libsvm
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    data.load_libsvm(path, preprocess="none")


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_scale_rows_rounding_fix(dtype):
  rng = np.random.default_rng(5)
  x = rng.normal(size=(400, 9)) * 10
  out = data.scale_rows(x, dtype=dtype)
  assert out.dtype == dtype and (_row_norms(out) <= 1.0).all()
  direct = _reference_per_row(x).astype(dtype)
  assert (_row_norms(direct) > 1.0).any(), "fixture should need the rounding fix"
  ulps = np.abs(direct.astype(np.float64) - out) / np.spacing(np.abs(direct))
  assert ulps.max() <= 4 and (np.abs(out) <= np.abs(direct)).all()


def test_scale_rows_inputs():
  x = np.array([[3.0, 4.0], [0.0, 0.5]], np.float32)
  got = data.scale_rows(jnp.asarray(x), intercept=False)
  assert isinstance(got, np.ndarray) and got.dtype == np.float32
  np.testing.assert_allclose(got, [[0.6, 0.8], [0.0, 0.5]], rtol=1e-7)
  assert data.scale_rows(x, dtype=np.float64).dtype == np.float64
  with pytest.raises(TypeError, match="intercept must be True or False"):
    data.scale_rows(x, intercept=1)
  with pytest.raises(ValueError, match="row_bound must be > 0"):
    data.scale_rows(x, row_bound=-1.0)
  with pytest.raises(TypeError, match="x must have a floating dtype"):
    data.scale_rows(x.astype(int))
  with pytest.raises(ValueError, match="x contains NaN"):
    data.scale_rows(np.array([[np.nan, 1.0]]))
  with pytest.raises(TypeError, match="dtype must be"):
    data.scale_rows(x, dtype=np.int32)
  with pytest.raises(TypeError, match="runs on the host"):
    jax.jit(data.scale_rows)(x)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_rounding_fix_keeps_norms_and_moves_few_ulps(tmp_path, dtype):
  rng = np.random.default_rng(7)
  n, d = 300, 9
  x = rng.normal(size=(n, d))
  lines = [f"{1 if i % 2 else -1} " + " ".join(f"{j + 1}:{float(x[i, j])!r}" for j in range(d))
           for i in range(n)]
  path = _write(tmp_path, "\n".join(lines) + "\n")
  ds = _paper(path, dtype=dtype)
  assert (_row_norms(ds.x) <= 1.0).all()
  direct = _reference_paper(x).astype(dtype)
  assert (_row_norms(direct) > 1.0).any(), "fixture should need the rounding fix"
  # Each entry moves towards zero by at most a few ulps, never away.
  ulps = np.abs(direct.astype(np.float64) - ds.x) / np.spacing(np.abs(direct))
  assert ulps.max() <= 4
  assert (np.abs(ds.x) <= np.abs(direct)).all()


def test_degenerate_files_load(tmp_path):
  # d > n, duplicate rows, constant label, a label-only (all-zero) line.
  text = "+1 1:1 7:2\n+1 1:1 7:2\n+1\n+1 3:4\n"
  ds = data.load_libsvm(_write(tmp_path, text))
  assert ds.x.shape == (4, 8)
  assert (_row_norms(ds.x) <= 1).all()
  np.testing.assert_array_equal(ds.x[0], ds.x[1])
  data.validate_dataset(ds)


@pytest.mark.parametrize(
    "line, match",
    [
        ("abc 1:1", r"line 3: cannot read the label 'abc'"),
        ("+1 5", r"line 3: malformed feature '5'"),
        ("+1 1:2:3", r"line 3: malformed feature '1:2:3'"),
        ("+1 qid:3 1:1", r"line 3: malformed feature 'qid:3'.*qid"),
        ("+1 a:1", r"line 3: feature index in 'a:1' is not an integer"),
        ("+1 1.5:1", r"line 3: feature index in '1.5:1' is not an integer"),
        ("+1 1:x", r"line 3: feature value in '1:x' is not a number"),
        ("+1 0:1", r"line 3: feature index 0 < 1.*1-based"),
        ("+1 2:1 2:3", r"line 3: feature index 2 appears twice"),
        ("+1 1:nan", r"line 3: feature value is NaN or inf"),
        ("inf 1:1", r"line 3: the label is not finite"),
    ],
)
def test_malformed_lines_name_the_line(tmp_path, line, match):
  path = _write(tmp_path, f"+1 1:1\n\n{line}\n-1 2:1\n")
  with pytest.raises(ValueError, match=match):
    data.load_libsvm(path)


def test_n_features(tmp_path):
  path = _write(tmp_path, TOY)
  assert data.load_libsvm(path, n_features=10, preprocess="none").x.shape == (4, 10)
  with pytest.raises(ValueError, match=r"n_features=3 is smaller than the largest feature index 4"):
    data.load_libsvm(path, n_features=3)
  with pytest.raises(ValueError, match="n_features must be >= 1"):
    data.load_libsvm(path, n_features=0)
  with pytest.raises(TypeError, match="n_features must be an integer"):
    data.load_libsvm(path, n_features=3.0)


def test_labels_and_positive_label(tmp_path):
  path = _write(tmp_path, "0 1:1\n1 2:1\n2 1:1 2:1\n1 1:2\n")
  with pytest.raises(ValueError, match=r"found \[0.0, 2.0\].*positive_label"):
    data.load_libsvm(path)
  ds = data.load_libsvm(path, positive_label=1)
  np.testing.assert_array_equal(ds.y, [-1, 1, -1, 1])
  with pytest.raises(ValueError, match=r"positive_label=5 does not occur.*\[0.0, 1.0, 2.0\]"):
    data.load_libsvm(path, positive_label=5)
  with pytest.raises(TypeError, match="positive_label must be a number"):
    data.load_libsvm(path, positive_label="1")
  with pytest.raises(TypeError, match="positive_label must be a number"):
    data.load_libsvm(path, positive_label=True)
  with pytest.raises(ValueError, match="positive_label must be finite"):
    data.load_libsvm(path, positive_label=math.nan)


def test_load_bad_arguments(tmp_path):
  path = _write(tmp_path, TOY)
  with pytest.raises(ValueError, match="preprocess must be one of"):
    data.load_libsvm(path, preprocess="standard")
  with pytest.raises(TypeError, match="dtype must be"):
    data.load_libsvm(path, dtype=np.int32)
  with pytest.raises(TypeError, match="dtype must be"):
    data.load_libsvm(path, dtype="not a dtype")
  with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
    data.load_libsvm(3)
  with pytest.raises(ValueError, match="contains no examples"):
    data.load_libsvm(_write(tmp_path, "# nothing\n\n", "empty.svm"))
  with pytest.raises(ValueError, match="has no features; pass n_features"):
    data.load_libsvm(_write(tmp_path, "+1\n-1\n", "nofeat.svm"))
  bad = tmp_path / "binary.svm"
  bad.write_bytes(b"+1 1:1\n\xff\xfe\n")
  with pytest.raises(ValueError, match="not UTF-8"):
    data.load_libsvm(bad)
  with pytest.raises(FileNotFoundError):
    data.load_libsvm(tmp_path / "missing.svm")


def test_real_a1a_t():
  path = shared_data_file("a1a.t.bz2")
  ds = data.load_libsvm(path, n_features=123)
  raw = data.load_libsvm(path, n_features=123, preprocess="none", dtype=np.float64)
  assert ds.x.shape == (30956, 124) and ds.y.shape == (30956,)
  assert ds.x.dtype == np.float32
  norms = _row_norms(ds.x)
  assert (norms <= 1.0).all()
  assert set(np.unique(ds.y).tolist()) == {-1.0, 1.0}
  assert int((ds.y == 1).sum()) == 7446
  # 11 to 14 ones per row, so every row is clipped to norm 1: [1, x_i / ||x_i||] / sqrt(2).
  np.testing.assert_array_equal(ds.x[:, 0], np.float32(1 / math.sqrt(2)))
  np.testing.assert_allclose(ds.x[:, 1:], raw.x / _row_norms(raw.x)[:, None] / math.sqrt(2),
                             rtol=3e-7)
  np.testing.assert_allclose(norms, 1.0, rtol=1e-6)
  data.validate_dataset(ds)
  paper = _paper(path, n_features=123)  # the reference pipeline, as the paper's benchmarks use it
  assert paper.x.shape == ds.x.shape
  np.testing.assert_allclose(paper.x[:, 0], 1 / math.sqrt(2), rtol=3e-7)
  np.testing.assert_allclose(_row_norms(paper.x[:, 1:]) * math.sqrt(2), 1.0, rtol=1e-6)


def test_real_phishing_needs_positive_label():
  path = shared_data_file("phishing.bz2")
  with pytest.raises(ValueError, match="positive_label"):
    data.load_libsvm(path)
  ds = data.load_libsvm(path, positive_label=1)
  assert ds.x.shape == (11055, 69)
  assert int((ds.y == 1).sum()) == 6157 and int((ds.y == -1).sum()) == 4898
  data.validate_dataset(ds)


# --- synthetic ------------------------------------------------------------------


def test_synthetic_shapes_norms_determinism():
  a = data.synthetic(3, n=500, d=20)
  b = data.synthetic(3, n=500, d=20)
  c = data.synthetic(4, n=500, d=20)
  assert a.x.shape == (500, 20) and a.y.shape == (500,) and a.x.dtype == np.float32
  np.testing.assert_array_equal(a.x, b.x)
  np.testing.assert_array_equal(a.y, b.y)
  assert not np.array_equal(a.x, c.x)
  norms = _row_norms(a.x)
  assert (norms <= 1.0).all()
  np.testing.assert_allclose(norms, 1.0, rtol=1e-6)  # on the unit sphere
  assert set(np.unique(a.y).tolist()) <= {-1.0, 1.0}
  d64 = data.synthetic(3, n=500, d=20, dtype=np.float64)
  np.testing.assert_allclose(d64.x, a.x, rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(d64.y, a.y)
  data.validate_dataset(a)


def test_synthetic_labels_follow_sigmoid_model():
  n, d = 20_000, 100
  ds = data.synthetic(0, n=n, d=d, dtype=np.float64)
  p = 1 / (1 + np.exp(-ds.x.sum(axis=1)))
  # Sum of independent Bernoulli(p_i): mean sum(p), sd sqrt(sum p(1-p)).
  sd = math.sqrt(float((p * (1 - p)).sum()))
  assert abs(float((ds.y == 1).sum()) - float(p.sum())) < 4 * sd
  # And the labels agree with the margins' signs more often than chance:
  # E[#(y = sign z)] = sum max(p, 1-p).
  agree = float((ds.y == np.sign(ds.x.sum(axis=1))).sum())
  q = np.maximum(p, 1 - p)
  assert abs(agree - float(q.sum())) < 4 * math.sqrt(float((q * (1 - q)).sum()))


def test_synthetic_bad_arguments():
  with pytest.raises(TypeError, match="seed must be an integer"):
    data.synthetic(1.5)
  with pytest.raises(ValueError, match="seed must be >= 0"):
    data.synthetic(-1)
  with pytest.raises(ValueError, match="n must be >= 1"):
    data.synthetic(0, n=0)
  with pytest.raises(TypeError, match="d must be an integer"):
    data.synthetic(0, d=2.0)
  with pytest.raises(TypeError, match="dtype must be"):
    data.synthetic(0, dtype=np.int64)


# --- clip_rows ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("bound", [1.0, 0.3])
def test_clip_rows(dtype, bound):
  rng = np.random.default_rng(2)
  x = (rng.normal(size=(400, 7)) * rng.uniform(0.01, 3, size=(400, 1))).astype(dtype)
  out = data.clip_rows(x, bound)
  assert out.dtype == dtype and out.shape == x.shape
  norms_in, norms_out = _row_norms(x), _row_norms(out)
  assert (norms_out <= bound).all()
  inside = norms_in <= bound
  np.testing.assert_array_equal(out[inside], x[inside])  # untouched, bit for bit
  eps = np.finfo(dtype).eps
  np.testing.assert_allclose(norms_out[~inside], bound, rtol=8 * eps)
  # Same direction.
  cos = (out[~inside].astype(float) * x[~inside]).sum(1) / (norms_out[~inside] * norms_in[~inside])
  np.testing.assert_allclose(cos, 1.0, rtol=8 * eps)


def test_clip_rows_jax_array_and_zero_rows():
  x = jnp.array([[3.0, 4.0], [0.0, 0.0]])
  out = data.clip_rows(x)
  assert isinstance(out, jax.Array)
  assert (_row_norms(out) <= 1).all()
  np.testing.assert_array_equal(np.asarray(out)[1], [0, 0])


def test_clip_rows_bad_input():
  with pytest.raises(ValueError, match="bound must be > 0"):
    data.clip_rows(np.ones((2, 2)), 0.0)
  with pytest.raises(TypeError, match="x must have a floating dtype"):
    data.clip_rows(np.ones((2, 2), np.int32))
  with pytest.raises(ValueError, match="x must have 2 dimension"):
    data.clip_rows(np.ones(3))
  with pytest.raises(ValueError, match="x contains NaN or inf"):
    data.clip_rows(np.array([[np.nan, 1.0]]))
  with pytest.raises(TypeError, match="call it on concrete arrays outside jit"):
    jax.jit(data.clip_rows)(jnp.ones((2, 2)))


# --- validate_dataset -----------------------------------------------------------


def test_validate_dataset_accepts_and_returns_same_arrays():
  x = np.eye(3, dtype=np.float32)
  y = np.array([1, -1, 1], np.float32)
  ds = data.validate_dataset(data.Dataset(x, y))
  assert ds.x is x and ds.y is y
  data.validate_dataset((jnp.asarray(x), jnp.asarray(y)))
  data.validate_dataset((2 * x, y), row_norm_bound=2.0)
  # Degenerate but valid: d > n, duplicate rows, constant label, zero row.
  xd = np.zeros((3, 10), np.float32)
  xd[0, 0] = xd[1, 0] = 1.0
  data.validate_dataset((xd, np.ones(3, np.float32)))


@pytest.mark.parametrize(
    "args, err, match",
    [
        ((np.eye(2),), TypeError, "data must be a dpjax.data.Dataset"),
        ("xy", TypeError, "data must be a dpjax.data.Dataset"),
        ((np.eye(2, dtype=int), np.ones(2)), TypeError, "x must have a floating dtype"),
        ((np.ones(2), np.ones(2)), ValueError, "x must have 2 dimension"),
        ((np.eye(2), np.ones((2, 1))), ValueError, "y must have 1 dimension"),
        ((np.eye(2), np.ones(3)), ValueError, "x has 2 rows but y has 3 labels"),
        ((np.zeros((0, 2)), np.zeros(0)), ValueError, "x is empty"),
        ((np.array([[np.inf, 0.0]]), np.ones(1)), ValueError, "x contains NaN or inf"),
        ((np.eye(2), np.array([1.0, 0.0])), ValueError, r"y must contain only the labels -1 and \+1"),
        ((np.array([[1.0, 1.0]]), np.ones(1)), ValueError, "row 0 has L2 norm 1.41.*clip_rows"),
    ],
)
def test_validate_dataset_rejects(args, err, match):
  with pytest.raises(err, match=match):
    data.validate_dataset(args)


def test_validate_dataset_bad_bound():
  with pytest.raises(ValueError, match="row_norm_bound must be > 0"):
    data.validate_dataset((np.eye(2), np.ones(2)), row_norm_bound=-1.0)
