"""Tests for dpjax.mechanisms.standardize: private standardization (DP column means and stds, public bounds)."""

from __future__ import annotations

import json
import math

import jax
import numpy as np
import optax
import pytest
from conftest import run_cli, shared_data_file

import dpjax
from dpjax import _common, accounting, data
from dpjax.mechanisms import budget, noise, standardize
from dpjax.mechanisms.standardize import PrivateStandardizer

D = 5
LOWER = np.array([0.0, -1.0, -5.0, 0.0, 10.0])
UPPER = np.array([1.0, 1.0, 5.0, 100.0, 12.0])


def _raw(n=400, seed=0):
  """Raw features inside LOWER..UPPER (a few outside, to be clipped) and labels."""
  rng = np.random.default_rng(seed)
  x = LOWER + (UPPER - LOWER) * rng.beta(2.0, 5.0, size=(n, D))
  x[:3] = [[-7, 3, 9, -1, 50]] * 3  # outside the bounds in every column
  y = np.where(rng.random(n) < 1 / (1 + np.exp(-(x[:, 0] - 0.3) * 6)), 1.0, -1.0)
  return x.astype(np.float32), y.astype(np.float32)


# --- sensitivities: the derivation, checked on neighbouring datasets ------------


@pytest.mark.parametrize("d", [1, 4, 9, 123])
def test_sensitivity_formulas(d):
  root = math.sqrt(d)
  assert standardize.sensitivities(d) == (root / 2, root / 4)
  assert standardize.sensitivities(d, "zero-out") == (root / 2, root / 4)
  assert standardize.sensitivities(d, "replace-one") == (root, root / 4)


def _sums(x):
  return standardize.column_sums(x, lower=LOWER, upper=UPPER)


@pytest.mark.parametrize("neighbouring", standardize.NEIGHBOURING)
def test_sums_move_at_most_the_sensitivity_and_the_bound_is_attained(neighbouring):
  rng = np.random.default_rng(4)
  x = np.asarray(_raw(60)[0], np.float64)
  s1, s2 = _sums(x)
  delta1, delta2 = standardize.sensitivities(D, neighbouring)
  corners = [np.where(rng.random(D) < 0.5, LOWER - 3, UPPER + 3) for _ in range(64)]
  candidates = corners + [rng.uniform(LOWER - 2, UPPER + 2) for _ in range(200)]
  mid = (LOWER + UPPER) / 2  # u = 0: its square is the smallest possible
  worst = np.zeros(2)
  for k in range(x.shape[0]):
    if neighbouring == "zero-out":  # row k -> the null row, which adds nothing to any sum
      pairs = [_sums(np.delete(x, k, axis=0))]
    else:
      pairs = [_sums(np.vstack([np.delete(x, k, axis=0), c])) for c in candidates + [mid]]
    for t1, t2 in pairs:
      worst = np.maximum(worst, [np.linalg.norm(s1 - t1), np.linalg.norm(s2 - t2)])
  assert worst[0] <= delta1 * (1 + 1e-12) and worst[1] <= delta2 * (1 + 1e-12)
  # Attained: a corner row against the null row / the opposite corner / the centre.
  lo, hi = np.vstack([x, LOWER]), np.vstack([x, UPPER])
  base = _sums(x)
  if neighbouring == "zero-out":
    got1 = np.linalg.norm(_sums(hi)[0] - base[0])
    got2 = np.linalg.norm(_sums(hi)[1] - base[1])
  else:
    got1 = np.linalg.norm(_sums(hi)[0] - _sums(lo)[0])
    got2 = np.linalg.norm(_sums(hi)[1] - _sums(np.vstack([x, mid]))[1])
  np.testing.assert_allclose([got1, got2], [delta1, delta2], rtol=1e-12)


def test_values_are_clipped_to_the_public_bounds():
  x = np.asarray(_raw(50)[0], np.float64)
  np.testing.assert_array_equal(_sums(x)[0], _sums(np.clip(x, LOWER, UPPER))[0])
  np.testing.assert_array_equal(_sums(x)[1], _sums(np.clip(x, LOWER, UPPER))[1])
  rel = PrivateStandardizer(bounds=(LOWER, UPPER)).release(0, x, rho=1.0)
  assert (rel.mean >= LOWER).all() and (rel.mean <= UPPER).all()
  far = np.vstack([x[:1] * 0 + UPPER + 1e6, x[:1] * 0 + UPPER])
  out = rel.transform(far)
  np.testing.assert_array_equal(out[0], out[1])  # a value beyond the bound counts as the bound


# --- the release: its charge, its noise, its post-processing --------------------


@pytest.mark.parametrize("mean_share", [0.5, 0.3])
@pytest.mark.parametrize("neighbouring", standardize.NEIGHBOURING)
def test_release_charges_the_configured_rho(mean_share, neighbouring):
  x, _ = _raw()
  rho = 0.1
  std = PrivateStandardizer(bounds=(LOWER, UPPER), mean_share=mean_share,
                            neighbouring=neighbouring)
  rel = std.release(3, x, rho=rho)
  assert rel.rho == rho and rel.neighbouring == neighbouring and rel.n == x.shape[0]
  assert rel.slack == 2 * D * noise.tv_per_coordinate() > 0  # d coordinates per release
  assert rel.rho_mean == mean_share * rho and rel.rho_mean + rel.rho_var <= rho
  assert rel.rho_mean + rel.rho_var == pytest.approx(rho, rel=1e-15)
  n = x.shape[0]  # fsum: each sum within half an ulp of n/2 (n/4), in each of the D columns
  margin = (math.sqrt(D) * np.spacing(n / 2), math.sqrt(D) * np.spacing(n / 4))
  exact = standardize.sensitivities(D, neighbouring)
  np.testing.assert_allclose(rel.sensitivities, np.add(exact, margin), rtol=1e-15)
  assert all(0 < m < 1e-12 * e for m, e in zip(margin, exact))
  for sens, sigma, part in zip(rel.sensitivities, rel.noise_stds, (rel.rho_mean, rel.rho_var)):
    charged = accounting.gaussian_zcdp(sens, sigma)
    assert charged <= part and charged == pytest.approx(part, rel=1e-14)


@pytest.mark.parametrize("neighbouring", standardize.NEIGHBOURING)
def test_released_means_carry_the_stated_noise(neighbouring):
  # Means well inside the bounds (no clipping of m): n (mean - true) / w = noise of S1.
  rng = np.random.default_rng(8)
  n = 1000
  x = LOWER + (UPPER - LOWER) * rng.uniform(0.3, 0.7, size=(n, D))
  true = x.mean(axis=0)
  std = PrivateStandardizer(bounds=(LOWER, UPPER), neighbouring=neighbouring)
  draws = 300
  rels = [std.release(k, x, rho=2.0) for k in range(draws)]
  z = np.array([(r.mean - true) * n / (UPPER - LOWER) for r in rels]) / rels[0].noise_stds[0]
  assert abs(z.mean()) < 4 / math.sqrt(draws * D)
  # The sample variance of 1500 standard normals is within 1 +- 0.15 (more than 4 s.d.).
  assert z.var() == pytest.approx(1.0, abs=0.15)
  # s1 = Delta_1 / sqrt(2 rho_mean) with rho_mean = 1: replace-one's noise is twice zero-out's.
  sigma1 = rels[0].noise_stds[0]
  assert sigma1 == pytest.approx(standardize.sensitivities(D, neighbouring)[0] / math.sqrt(2),
                                 rel=1e-9)
  np.testing.assert_array_equal(std.release(5, x, rho=2.0).mean, rels[5].mean)  # same key


def test_post_processing_at_large_and_small_rho():
  x = np.asarray(_raw(2000, seed=2)[0], np.float64)
  x[:, 4] = 11.0  # a constant column inside its bounds
  clipped = np.clip(x, LOWER, UPPER)
  std = PrivateStandardizer(bounds=(LOWER, UPPER))
  big = std.release(0, x, rho=1e12)  # almost no noise: the clipped data's own statistics
  np.testing.assert_allclose(big.mean, clipped.mean(axis=0), rtol=1e-7, atol=1e-9)
  np.testing.assert_allclose(big.std[:4], clipped.std(axis=0)[:4], rtol=1e-5)
  width = UPPER - LOWER
  floor = width * math.sqrt(big.noise_stds[1] / x.shape[0])  # the noise-level floor
  assert big.std[4] == pytest.approx(floor[4], rel=1e-12) and big.std[4] < 1e-4
  small = std.release(1, x, rho=1e-6)  # mostly noise: still valid statistics
  assert (small.mean >= LOWER).all() and (small.mean <= UPPER).all()
  floor_v = min(small.noise_stds[1] / x.shape[0], 0.25)  # here > 1/4: capped at the largest
  assert floor_v == 0.25
  np.testing.assert_allclose(small.std, width / 2, rtol=1e-15)
  mid = std.release(2, x, rho=1e-2)  # between: floor <= v <= 1/4 - m^2 (Bhatia-Davis)
  floor_v = mid.noise_stds[1] / x.shape[0]
  v = (mid.std / width) ** 2
  m = (mid.mean - LOWER) / width - 0.5
  assert 0 < floor_v < 0.25
  assert (v >= floor_v * (1 - 1e-12)).all()
  assert (v <= np.maximum(0.25 - m * m, floor_v) * (1 + 1e-12)).all()
  given = PrivateStandardizer(bounds=(LOWER, UPPER), min_std=0.05 * width).release(0, x, rho=1e12)
  assert given.std[4] == pytest.approx(0.05 * width[4], rel=1e-12)
  np.testing.assert_allclose(given.std[:4], big.std[:4])


def test_transform_is_per_row_and_meets_the_contract():
  x, _ = _raw()
  rel = PrivateStandardizer(bounds=(LOWER, UPPER)).release(0, x, rho=1.0)
  out = rel.transform(x)
  assert out.shape == (x.shape[0], D + 1) and out.dtype == np.float32
  assert (np.linalg.norm(out.astype(np.float64), axis=1) <= 1).all()
  np.testing.assert_array_equal(out[:, 0], np.float32(1 / math.sqrt(2)))
  z = (np.clip(x.astype(np.float64), LOWER, UPPER) - rel.mean) / rel.std
  np.testing.assert_array_equal(out, data.scale_rows(z, dtype=np.float32))
  extra = np.vstack([x, np.full((1, D), 1e9, np.float32)])
  np.testing.assert_array_equal(rel.transform(extra)[:-1], out)  # other rows unchanged
  no_icpt = PrivateStandardizer(bounds=(LOWER, UPPER), intercept=False, row_bound=2.0)
  rel2 = no_icpt.release(0, x, rho=1.0)
  assert rel2.transform(x, dtype=np.float64).shape == (x.shape[0], D)
  with pytest.raises(ValueError, match="x has 3 columns but the standardization was released for 5"):
    rel.transform(x[:, :3])


def test_fit_transform_and_key():
  x, y = _raw()
  std = PrivateStandardizer(bounds=(LOWER, UPPER))
  ds, rel = std.fit_transform(jax.random.key(9), (x, y), rho=0.5)
  np.testing.assert_array_equal(ds.x, rel.transform(x))
  np.testing.assert_array_equal(ds.y, y)
  data.validate_dataset(ds)
  same = std.release(9, x, rho=0.5)  # an int seed is the same key
  np.testing.assert_array_equal(same.mean, rel.mean)
  assert not np.array_equal(std.release(10, x, rho=0.5).mean, rel.mean)


# --- dpjax.fit(..., standardize=...) ----------------------------------------------


def test_fit_charges_the_standardization_in_its_total():
  x, y = _raw()
  share, seed = 0.25, 5
  std = PrivateStandardizer(bounds=(LOWER, UPPER), budget_share=share)
  with pytest.raises(ValueError, match="norm"):  # raw rows break the contract without it
    dpjax.fit((x, y), "dp-gd", epsilon=1.0, steps=3)
  res = dpjax.fit((x, y), "dp-gd", epsilon=1.0, steps=3, repeats=2, seed=seed, standardize=std)
  total, eps, delta = accounting.resolve_budget(x.shape[0], epsilon=1.0)
  assert (res.rho, res.epsilon, res.delta) == (total, 1.0, delta)
  rel = res.standardization
  assert isinstance(rel, standardize.Standardization) and rel.rho == share * total
  np.testing.assert_allclose(res.rho_spent, total, rtol=1e-7)  # optimizer + standardization
  optimizer = np.asarray(optax.tree.get(res.opt_state, "rho"), np.float64)
  np.testing.assert_allclose(optimizer, total - rel.rho, rtol=1e-7)
  assert res.d == D + 1
  # The same pipeline by hand: the release with the key fit derives, then the rest of the budget.
  key = jax.random.fold_in(_common.key_for(seed), standardize._KEY_TAG)
  ds, by_hand = std.fit_transform(key, (x, y), rho=share * total)
  np.testing.assert_array_equal(by_hand.mean, rel.mean)
  rest = dpjax.fit(ds, "dp-gd", rho=total - share * total, steps=3, repeats=2, seed=seed)
  np.testing.assert_array_equal(rest.params, res.params)


def test_fit_budget_cap_counts_the_standardization():
  x, y = _raw()
  std = PrivateStandardizer(bounds=(LOWER, UPPER))
  with pytest.raises(budget.BudgetExceededError, match="epsilon_budget"):
    dpjax.fit((x, y), "dp-gd", epsilon=1.0, steps=2, epsilon_budget=0.9, standardize=std)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"standardize": (0.0, 1.0)}, TypeError, "standardize must be a dpjax.mechanisms.standardize.PrivateStandardizer"),
    ({"algorithm": "dp-sgd", "batch_size": 10}, ValueError, "zCDP-accounted full-batch algorithms"),
    ({"standardize": PrivateStandardizer(bounds=(LOWER[:3], UPPER[:3]))}, ValueError,
     "bounds lower has 3 values, but the data has 5 columns"),
    ({"epsilon": None}, ValueError, "pass exactly one privacy budget"),
])
def test_fit_standardize_refuses_before_any_work(kwargs, error, match, monkeypatch):
  x, y = _raw()
  monkeypatch.setattr(PrivateStandardizer, "release", lambda *a, **k: pytest.fail("released"))
  args = {"algorithm": "dp-gd", "epsilon": 1.0, "steps": 2,
          "standardize": PrivateStandardizer(bounds=(LOWER, UPPER)), **kwargs}
  algorithm = args.pop("algorithm")
  with pytest.raises(error, match=match):
    dpjax.fit((x, y), algorithm, **{k: v for k, v in args.items() if v is not None})


@pytest.mark.parametrize("kwargs, error, match", [
    ({"bounds": 1.0}, TypeError, "bounds must be a pair"),
    ({"bounds": (1.0, 1.0)}, ValueError, "column 0 has lower=1.0, upper=1.0"),
    ({"bounds": ([0.0, 2.0], [1.0, 1.0])}, ValueError, "column 1 has lower=2.0"),
    ({"bounds": ([0.0, 0.0], [1.0, 1.0, 1.0])}, ValueError, "lower has 2 values but upper has 3"),
    ({"bounds": (0.0, math.inf)}, ValueError, "bounds upper must be finite"),
    ({"bounds": ("0", 1.0)}, TypeError, "bounds lower must be a number"),
    ({"bounds": (np.zeros((2, 2)), 1.0)}, ValueError, "1-d array"),
    ({"budget_share": 1.0}, ValueError, r"budget_share must be in the open interval \(0, 1\)"),
    ({"budget_share": 0.0}, ValueError, "budget_share"),
    ({"mean_share": 1.5}, ValueError, "mean_share"),
    ({"min_std": 0.0}, ValueError, "min_std must be finite and > 0"),
    ({"neighbouring": "add-remove"}, ValueError, "neighbouring must be one of"),
    ({"row_bound": -1.0}, ValueError, "row_bound must be > 0"),
    ({"intercept": "yes"}, TypeError, "intercept must be True or False"),
])
def test_standardizer_settings_are_checked_at_construction(kwargs, error, match):
  with pytest.raises(error, match=match):
    PrivateStandardizer(**{"bounds": (0.0, 1.0), **kwargs})


def test_standardizer_is_keyword_only_and_release_checks_its_inputs():
  with pytest.raises(TypeError):
    PrivateStandardizer((0.0, 1.0))  # pylint: disable=too-many-function-args
  x, _ = _raw()
  std = PrivateStandardizer(bounds=(LOWER, UPPER))
  with pytest.raises(ValueError, match="rho must be > 0"):
    std.release(0, x, rho=0.0)
  with pytest.raises(TypeError, match="key must be"):
    std.release(None, x, rho=1.0)
  with pytest.raises(ValueError, match="x contains NaN"):
    std.release(0, np.where(x > 0.5, np.nan, x), rho=1.0)
  with pytest.raises(ValueError, match=r"min_std=60.0 in column 0 exceeds half its bounds' width \(0.5\)"):
    PrivateStandardizer(bounds=(LOWER, UPPER), min_std=60.0).release(0, x, rho=1.0)
  with pytest.raises(ValueError, match="min_std has 2 values"):
    PrivateStandardizer(bounds=(LOWER, UPPER), min_std=[0.1, 0.1]).release(0, x, rho=1.0)
  with pytest.raises(ValueError, match="y must contain only the labels"):
    std.fit_transform(0, (x, np.zeros(x.shape[0], np.float32)), rho=1.0)
  with pytest.raises(TypeError, match="runs on the host"):
    jax.jit(lambda v: std.release(0, v, rho=1.0))(x)


def test_real_a1a_t_release_is_close_to_the_column_means():
  raw = data.load_libsvm(shared_data_file("a1a.t.bz2"), n_features=123, preprocess="none")
  rel = PrivateStandardizer(bounds=(0.0, 1.0)).release(0, raw.x, rho=1e-3)
  true = raw.x.astype(np.float64).mean(axis=0)
  # s1 / n = sqrt(123)/2 / sqrt(1e-3) / 30956 ~ 0.0057 per column: 5 s.d. is 0.03.
  assert np.abs(rel.mean - true).max() < 5 * rel.noise_stds[0] / raw.n
  ds = data.Dataset(rel.transform(raw.x), raw.y)
  assert ds.x.shape == (30956, 124)
  data.validate_dataset(ds)


# --- the command line: --standardize, --preprocess ----------------------------------


def _svm_file(tmp_path):
  x, y = _raw(120, seed=3)
  path = tmp_path / "raw.svm"
  path.write_text("".join(f"{int(y[i]):+d} " + " ".join(f"{j + 1}:{float(v)!r}" for j, v in
                                                        enumerate(x[i]) if v != 0) + "\n"
                          for i in range(len(y))))
  return path


def test_cli_standardize_and_paper(tmp_path, capsys):
  path, out = _svm_file(tmp_path), tmp_path / "r.json"
  base = ["fit", "--data", str(path), "--algorithm", "dp-gd", "--epsilon", "1", "--steps", "2",
          "--n-features", "5", "--json", str(out)]
  code, err = run_cli(base + ["--standardize=-5,100", "--standardize-share", "0.2"], capsys)
  assert code == 0, err
  record = json.loads(out.read_text())
  total = accounting.epsilon_to_zcdp(1.0, 120.0**-2, "gaussian")
  assert record["rho"] == total and record["epsilon"] == 1.0 and record["d"] == 6
  assert record["standardization"] == {"rho": 0.2 * total, "budget_share": 0.2,
                                       "bounds": [-5.0, 100.0], "neighbouring": "zero-out"}
  assert record["private"] is True
  code, err = run_cli(base, capsys)  # per-row by default
  assert code == 0, err
  assert "standardization" not in json.loads(out.read_text())
  with pytest.warns(dpjax.PrivacyLeakWarning, match="preprocess='paper'"):
    code, err = run_cli(base + ["--preprocess", "paper"], capsys)
  assert code == 0, err
  assert json.loads(out.read_text())["private"] is False


@pytest.mark.parametrize("extra, match", [
    (["--standardize", "1"], "expected LOWER,UPPER"),
    (["--standardize", "0,x"], "expected LOWER,UPPER"),
    (["--standardize-share", "0.2"], "--standardize-share applies with --standardize"),
    (["--standardize", "0,1", "--preprocess", "paper"], "remove --preprocess paper"),
    (["--standardize", "1,0"], "lower < upper"),
    (["--standardize", "0,1", "--standardize-share", "1.5"], "budget_share"),
])
def test_cli_standardize_usage_errors(tmp_path, capsys, extra, match):
  path = _svm_file(tmp_path)
  code, err = run_cli(["fit", "--data", str(path), "--algorithm", "dp-gd", "--epsilon", "1",
                       "--steps", "2"] + extra, capsys)
  assert code == 2 and match in err and len(err.strip().splitlines()) == 1, err


def test_cli_preprocess_is_for_libsvm_files(capsys):
  code, err = run_cli(["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1",
                       "--steps", "2", "--preprocess", "none"], capsys)
  assert code == 2 and "--preprocess applies to LIBSVM files only" in err
