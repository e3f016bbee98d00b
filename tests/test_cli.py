"""Tests for the dpjax command line."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import check_demo_output, known_optima, run_cli
from dpjax import accounting, cli, data, training as fit_lib

_JSON_FIELDS = {
    "algorithm", "epsilon", "delta", "rho", "accounting", "n", "d", "steps", "repeats",
    "excess_loss_mean", "excess_loss_se", "excess_losses", "loss_star", "seconds_compile",
    "seconds_run", "guard_resets", "average", "final_excess_losses", "gradient_evaluations",
    "curvature_evaluations", "options", "auto_reason", "batch_size", "loss", "private",
    "curvature_batch_size", "seed", "neighbouring",
}


@pytest.fixture(scope="module", autouse=True)
def _known_synthetic_optimum():
  """``--data synthetic``'s float64 optimum from conftest.KNOWN_OPTIMA, not a Newton solve.

  The solver is tested in test_solve.py; here the optimum is reporting only (the
  tests compare the CLI's numbers with the library's, both against the same value).
  """
  with known_optima():
    yield


def _libsvm_file(tmp_path, n=60, labels=(0, 1)):
  """A small LIBSVM file with 0/1 labels and 3 features."""
  rng = np.random.default_rng(0)
  lines = []
  for i in range(n):
    f = rng.normal(size=3)
    label = labels[int(f.sum() + rng.normal() > 0)]
    lines.append(f"{label} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(f)))
  path = tmp_path / "toy.svm"
  path.write_text("\n".join(lines) + "\n")
  return path


def test_fit_synthetic_writes_json(tmp_path, capsys):
  out = tmp_path / "res.json"
  argv = ["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1", "--steps", "5",
          "--repeats", "2", "--seed", "3", "--accounting", "cks", "--json", str(out)]
  assert cli.main(argv) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("dp-gd on synthetic(seed=0) (n=10000, d=100)")
  assert lines[0].endswith("; noise seed 3 (reproducible; private only while the seed stays secret)")
  record = json.loads(out.read_text())
  assert set(record) == _JSON_FIELDS and record["seed"] == 3
  assert record["algorithm"] == "dp-gd" and record["accounting"] == "cks"
  assert (record["n"], record["d"], record["steps"], record["repeats"]) == (10000, 100, 5, 2)
  assert record["delta"] == 1e-8 and record["epsilon"] == 1.0
  assert record["rho"] == accounting.epsilon_to_zcdp(1.0, 1e-8, "cks")
  assert len(record["excess_losses"]) == 2 and record["guard_resets"] == [0, 0]
  assert record["excess_loss_mean"] == pytest.approx(np.mean(record["excess_losses"]))
  # The same call through the library gives the same numbers.
  res = fit_lib.fit(data.synthetic(0), "dp-gd", epsilon=1.0, steps=5, repeats=2, seed=3,
                    accounting="cks")
  assert record["excess_losses"] == res.excess_losses.tolist()
  assert record["loss_star"] == res.loss_star


def test_fit_streaming_least_squares_writes_json(tmp_path, capsys):
  out = tmp_path / "otb.json"
  argv = ["fit", "--data", "synthetic", "--algorithm", "otb-strongly-convex", "--epsilon", "2",
          "--batch-size", "500", "--loss", "least_squares", "--mu", "0.01", "--radius", "2",
          "--repeats", "2", "--seed", "0", "--json", str(out)]
  assert cli.main(argv) == 0
  line = capsys.readouterr().out.strip()
  assert line.startswith("otb-strongly-convex (least_squares, single pass, batch 500) on synthetic")
  record = json.loads(out.read_text())
  assert set(record) == _JSON_FIELDS
  assert (record["steps"], record["batch_size"], record["loss"]) == (20, 500, "least_squares")
  assert record["options"] == {"mu": 0.01, "radius": 2.0}
  res = fit_lib.fit(data.synthetic(0), "otb-strongly-convex", epsilon=2.0, batch_size=500,
                    loss="least_squares", mu=0.01, radius=2.0, repeats=2, seed=0)
  assert record["excess_losses"] == res.excess_losses.tolist()


def test_fit_minibatch_and_baselines_write_json(tmp_path, capsys):
  out = tmp_path / "sgd.json"
  argv = ["fit", "--data", "synthetic", "--algorithm", "dp-sgd", "--epsilon", "1", "--steps",
          "5", "--batch-size", "500", "--clip-norm", "0.5", "--json", str(out)]
  assert cli.main(argv) == 0
  line = capsys.readouterr().out.strip()
  assert line.startswith("dp-sgd (Poisson batches of expected size 500) on synthetic")
  assert "rho=n/a (rdp)" in line
  record = json.loads(out.read_text())
  assert set(record) == _JSON_FIELDS
  assert record["private"] is True and record["rho"] is None and record["accounting"] == "rdp"
  assert (record["batch_size"], record["options"]) == (500, {"clip_norm": 0.5})
  out = tmp_path / "dn.json"
  argv = ["fit", "--data", "synthetic", "--algorithm", "damped-newton", "--epsilon", "1",
          "--steps", "2", "--json", str(out)]
  assert cli.main(argv) == 0
  assert "[NOT PRIVATE: a non-private baseline]" in capsys.readouterr().out
  assert json.loads(out.read_text())["private"] is False


def test_fit_precond_gd_and_dp_gd_options(tmp_path, capsys):
  out = tmp_path / "p.json"
  argv = ["fit", "--data", "synthetic", "--algorithm", "precond-gd", "--epsilon", "1",
          "--steps", "6", "--repeats", "2", "--kappa", "6", "--curvature-frac", "0.05",
          "--refresh-every", "4", "--average", "last-quarter", "--seed", "0", "--json", str(out)]
  assert cli.main(argv) == 0
  assert "output last-quarter" in capsys.readouterr().out
  record = json.loads(out.read_text())
  assert record["options"] == {"kappa": 6.0, "curvature_frac": 0.05, "refresh_every": 4}
  assert (record["average"], record["curvature_evaluations"]) == ("last-quarter", 2)
  res = fit_lib.fit(data.synthetic(0), "precond-gd", epsilon=1.0, steps=6, repeats=2, kappa=6.0,
                    curvature_frac=0.05, refresh_every=4, average="last-quarter", seed=0)
  assert record["excess_losses"] == res.excess_losses.tolist()
  argv = ["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1", "--steps", "6",
          "--learning-rate", "16", "--json", str(out)]
  assert cli.main(argv) == 0
  assert json.loads(out.read_text())["options"] == {"learning_rate": 16.0}


def test_fit_seed_defaults_to_fresh_entropy_and_is_recorded(tmp_path, capsys):
  base = ["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1", "--steps", "2"]
  records = []
  for extra in ([], [], ["--seed", str(2**64 - 1)]):
    out = tmp_path / f"r{len(records)}.json"
    assert cli.main(base + extra + ["--json", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    records.append(json.loads(out.read_text()))
    if not extra:
      assert line.endswith("; noise from fresh OS entropy")
  fresh_a, fresh_b, given = records
  assert fresh_a["seed"] is None and fresh_b["seed"] is None  # JSON null: nothing recorded
  assert fresh_a["excess_losses"] != fresh_b["excess_losses"]  # a fresh key every run
  assert given["seed"] == 2**64 - 1  # every bit kept, through JSON too
  res = fit_lib.fit(data.synthetic(0), "dp-gd", epsilon=1.0, steps=2, seed=2**64 - 1)
  assert given["excess_losses"] == res.excess_losses.tolist()


@pytest.mark.parametrize("seed,match", [
    ("-1", r"seed must be in [0, 2**64), got -1"),
    (str(2**64), r"seed must be in [0, 2**64), got 18446744073709551616"),
    ("1.5", "--seed: invalid int value"),
])
def test_fit_bad_seed_exits_2(seed, match, capsys):
  code, err = run_cli(["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1",
                       "--steps", "2", "--seed", seed], capsys)
  assert code == 2 and match in err and len(err.strip().splitlines()) == 1


def test_demo_data_is_fixed_and_its_noise_fresh_by_default(capsys):
  parser = cli._build_parser()
  args = parser.parse_args(["demo"])
  assert args.seed is None and args.data_seed == 0  # the same workload, fresh noise
  # A small demo: --data-seed picks the data, --seed the noise (and is reported).
  assert cli.main(["demo", "--n", "300", "--d", "3", "--repeats", "2", "--epsilons", "1",
                   "--data-seed", "4", "--seed", "5"]) == 0
  captured = capsys.readouterr()
  check_demo_output(captured.out, captured.err, seed=4, n=300, d=3, epsilons=(1.0,))
  assert "noise seed 5 (reproducible" in captured.out


def test_fit_auto_needs_no_steps(tmp_path, capsys):
  out = tmp_path / "a.json"
  argv = ["fit", "--data", "synthetic", "--algorithm", "auto", "--epsilon", "1", "--json", str(out)]
  assert cli.main(argv) == 0
  line = capsys.readouterr().out.strip()
  record = json.loads(out.read_text())
  assert line.startswith(f"{record['algorithm']} (chosen by auto) on synthetic")
  assert record["algorithm"] == "precond-gd" and record["auto_reason"].startswith("precond-gd:")
  assert record["steps"] >= 1


def test_fit_libsvm_file_as_module(tmp_path):
  path = _libsvm_file(tmp_path)
  out = tmp_path / "r.json"
  proc = subprocess.run(
      [sys.executable, "-m", "dpjax", "fit", "--data", str(path), "--algorithm", "qu-add",
       "--rho", "0.5", "--delta", "1e-4", "--steps", "3", "--init", "random-unit",
       "--n-features", "4", "--positive-label", "1", "--json", str(out)],
      capture_output=True, text=True, timeout=120,
  )
  assert proc.returncode == 0, proc.stderr
  assert len(proc.stdout.strip().splitlines()) == 1 and "qu-add on toy.svm (n=60, d=5)" in proc.stdout
  record = json.loads(out.read_text())
  assert record["rho"] == 0.5 and record["delta"] == 1e-4 and record["d"] == 5
  assert record["epsilon"] == accounting.zcdp_to_epsilon(0.5, 1e-4, "gaussian")


_FIT = ["fit", "--data", "synthetic", "--algorithm", "hess-clip", "--steps", "2"]
_OTB = ["fit", "--data", "synthetic", "--algorithm", "otb", "--epsilon", "1"]


@pytest.mark.parametrize(
    "argv,match",
    [
        (["demo", "--n", "0"], "--n: must be >= 1"),
        (["demo", "--d", "-3"], "--d: must be >= 1"),
        (["demo", "--n", "many"], "invalid int value"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
        (_FIT, "one of the arguments --epsilon --rho is required"),
        (_FIT + ["--epsilon", "1", "--rho", "1"], "not allowed with argument"),
        (_FIT + ["--epsilon", "0"], "epsilon must be > 0"),
        (_FIT + ["--epsilon", "-1"], "epsilon must be > 0"),
        (_FIT + ["--rho", "0"], "rho must be > 0"),
        (_FIT + ["--epsilon", "1", "--delta", "1"], "delta must be in the open interval"),
        (_FIT + ["--epsilon", "1", "--delta", "0"], "delta must be in the open interval"),
        (_FIT + ["--epsilon", "1", "--steps", "0"], "steps must be >= 1"),
        (_FIT + ["--epsilon", "1", "--repeats", "0"], "repeats must be >= 1"),
        (_FIT + ["--epsilon", "nan"], "epsilon must be finite"),
        (["fit", "--data", "synthetic", "--algorithm", "newton", "--epsilon", "1", "--steps", "2"],
         "invalid choice: 'newton'"),
        (_FIT + ["--epsilon", "1", "--accounting", "rdp"], "invalid choice: 'rdp'"),
        (_FIT + ["--epsilon", "1", "--init", "ones"], "invalid choice: 'ones'"),
        (_FIT + ["--epsilon", "1", "--n-features", "5"], "--n-features applies to LIBSVM files only"),
        (["fit", "--data", "/no/such/file.svm", "--algorithm", "dp-gd", "--epsilon", "1",
          "--steps", "2"], "no such file"),
        (_FIT + ["--epsilon", "1", "--json", "/no/such/folder/r.json"], "does not exist"),
        (_FIT + ["--epsilon", "1", "--plot", "/no/such/folder/loss.png"], "does not exist"),
        (_FIT + ["--epsilon", "1", "--plot", "loss.xyz"], "must name an image format"),
        (_FIT + ["--epsilon", "1", "--plot", "loss"], "must name an image format"),
        (["fit", "--data", "synthetic", "--algorithm", "aop", "--epsilon", "1", "--plot",
          "loss.png"], "aop takes no steps"),
        (["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1"],
         "steps is required for algorithm 'dp-gd'"),
        (["fit", "--data", "synthetic", "--algorithm", "auto", "--epsilon", "1", "--steps", "5"],
         "algorithm='auto' chooses the steps"),
        (_FIT + ["--epsilon", "1", "--average", "mean"], "invalid choice: 'mean'"),
        (_FIT + ["--epsilon", "1", "--kappa", "3"], "unknown option(s) ['kappa']"),
        (["fit", "--data", "synthetic", "--algorithm", "precond-gd", "--epsilon", "1", "--steps",
          "5", "--kappa", "0"], "kappa must be > 0"),
        (["fit", "--data", "synthetic", "--algorithm", "precond-gd", "--epsilon", "1", "--steps",
          "5", "--curvature-frac", "1"], "curvature_frac must be in the open interval (0, 1)"),
        (["fit", "--data", "synthetic", "--algorithm", "precond-gd", "--epsilon", "1", "--steps",
          "5", "--refresh-every", "0"], "refresh_every must be >= 1"),
        (_OTB + ["--batch-size", "0"], "batch_size must be >= 1"),
        (_OTB + ["--batch-size", "10001"], "batch_size=10001 is larger than the n=10000"),
        (_OTB, "pass batch_size"),
        (_OTB + ["--batch-size", "10", "--loss", "hinge"], "invalid choice: 'hinge'"),
        (_OTB + ["--batch-size", "10", "--kappa", "3"], "unknown option(s) ['kappa']"),
        (_FIT + ["--epsilon", "1", "--batch-size", "10"], "batch_size applies to the streaming"),
        (_FIT + ["--epsilon", "1", "--loss", "least_squares"], "fits logistic regression"),
        (_FIT + ["--epsilon", "1", "--loss", "pseudo_huber"], "fits logistic regression"),
        (["fit", "--data", "synthetic", "--algorithm", "dp-sgd", "--epsilon", "1", "--steps",
          "2"], "pass batch_size"),
        (["fit", "--data", "synthetic", "--algorithm", "newton-minibatch", "--epsilon", "1",
          "--steps", "2", "--batch-size", "10001", "--min-eigenvalue", "0.1"], "batch_size"),
        (["fit", "--data", "synthetic", "--algorithm", "newton-minibatch", "--epsilon", "1",
          "--steps", "2", "--batch-size", "100"], "newton-minibatch needs min_eigenvalue"),
        (["fit", "--data", "synthetic", "--algorithm", "dp-sgd", "--epsilon", "1", "--steps",
          "2", "--batch-size", "10", "--curvature-batch-size", "10"],
         "curvature_batch_size applies to newton-minibatch only"),
        (["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1", "--steps", "2",
          "--loss", "pseudo_huber", "--loss-option", "delta"], "expected KEY=VALUE"),
        (["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1", "--steps", "2",
          "--loss", "pseudo_huber", "--loss-option", "width=2"], "unknown parameter(s) ['width']"),
        (["fit", "--data", "synthetic", "--algorithm", "hess-add", "--epsilon", "1", "--steps",
          "2", "--loss", "pseudo_huber"], "fixed min_eigenvalue"),
        (["fit", "--data", "synthetic", "--algorithm", "cubic-newton", "--epsilon", "1",
          "--steps", "2"], "cubic-newton needs mu"),
        (["fit", "--data", "synthetic", "--algorithm", "cubic-newton", "--epsilon", "1",
          "--steps", "2", "--mu", "0"], "mu must be > 0"),
        (["fit", "--data", "synthetic", "--algorithm", "aop", "--epsilon", "1", "--steps", "2"],
         "aop is not iterative"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, match, capsys):
  code, err = run_cli(argv, capsys)
  assert code == 2
  assert match in err
  assert len(err.strip().splitlines()) == 1
  assert "Traceback" not in err


def test_bad_libsvm_inputs_exit_2(tmp_path, capsys):
  path = _libsvm_file(tmp_path)
  base = ["fit", "--data", str(path), "--algorithm", "dp-gd", "--epsilon", "1", "--steps", "2"]
  code, err = run_cli(base, capsys)  # labels 0/1 without --positive-label
  assert code == 2 and "labels" in err and len(err.strip().splitlines()) == 1
  code, err = run_cli(base + ["--positive-label", "7"], capsys)
  assert code == 2 and len(err.strip().splitlines()) == 1
  code, err = run_cli(base + ["--positive-label", "1", "--n-features", "2"], capsys)
  assert code == 2 and "n_features" in err and len(err.strip().splitlines()) == 1
  bad = tmp_path / "bad.svm"
  bad.write_text("+1 1:0.5\n-1 2:x\n")
  code, err = run_cli(["fit", "--data", str(bad), "--algorithm", "dp-gd", "--epsilon", "1",
                    "--steps", "2"], capsys)
  assert code == 2 and "line 2" in err and len(err.strip().splitlines()) == 1


def test_bad_arguments_as_module_exit_2():
  proc = subprocess.run(
      [sys.executable, "-m", "dpjax", "fit", "--data", "synthetic", "--algorithm", "dp-gd",
       "--epsilon", "-1", "--steps", "2"],
      capture_output=True, text=True, timeout=120,
  )
  assert proc.returncode == 2
  assert proc.stderr.strip() == "dpjax fit: error: epsilon must be > 0, got -1.0."


class _Terminal(io.StringIO):
  """A stderr that says it is a terminal, so the progress bar draws in place."""

  def isatty(self) -> bool:
    return True


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_fit_plot_writes_the_loss_curve(tmp_path, capsys, ext):
  out = tmp_path / f"loss.{ext}"
  argv = ["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1", "--steps", "6",
          "--repeats", "2", "--average", "last-half", "--plot", str(out)]
  assert cli.main(argv) == 0
  assert capsys.readouterr().err == ""  # no bar when stderr is not a terminal
  blob = out.read_bytes()
  if ext == "png":
    assert blob.startswith(b"\x89PNG") and len(blob) > 10_000
  else:
    text = blob.decode()
    assert "<svg" in text and "excess loss" in text and "step t" in text
    assert "dp-gd on synthetic(seed=0)" in text and "last-half average" in text
  assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary file left
  tty = _Terminal()
  # pytest.MonkeyPatch, not the fixture: only sys.stderr is replaced, no library function, so
  # the compiled programs stay shared (tests/conftest.py drops them for the fixture).
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(sys, "stderr", tty)
    assert cli.main(argv) == 0
  frames = tty.getvalue().split("\r")
  assert "dpjax fit [" in frames[1] and "load synthetic" in frames[1]
  assert "3/3" in frames[-1] and frames[-1].rstrip().endswith("done")


def test_fit_plot_without_matplotlib_fails_before_therun_cli(tmp_path, capsys):
  with pytest.MonkeyPatch.context() as mp:  # no library function replaced: see above
    mp.setitem(sys.modules, "matplotlib.figure", None)
    code, err = run_cli(["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1",
                         "--steps", "2", "--plot", str(tmp_path / "loss.png")], capsys)
  assert code == 2 and "pip install 'dpjax[plot]'" in err
  assert list(tmp_path.iterdir()) == []


def test_fit_neighbouring_flag(tmp_path, capsys):
  out = tmp_path / "r1.json"
  argv = ["fit", "--data", "synthetic", "--algorithm", "dp-gd", "--epsilon", "1", "--steps", "2",
          "--seed", "4", "--json", str(out)]
  assert cli.main(argv) == 0
  assert "neighbours]" not in capsys.readouterr().out
  assert json.loads(out.read_text())["neighbouring"] == "zero-out"  # the default, recorded
  assert cli.main(argv + ["--neighbouring", "replace-one"]) == 0
  assert "dp-gd [replace-one neighbours] on synthetic" in capsys.readouterr().out
  record = json.loads(out.read_text())
  assert record["neighbouring"] == "replace-one"
  assert record["options"] == {"neighbouring": "replace-one"}
  res = fit_lib.fit(data.synthetic(0), "dp-gd", epsilon=1.0, steps=2, seed=4,
                    neighbouring="replace-one")
  assert record["excess_losses"] == res.excess_losses.tolist()
  code, err = run_cli(argv + ["--neighbouring", "add-remove"], capsys)
  assert code == 2 and "argument --neighbouring: invalid choice: 'add-remove'" in err
  code, err = run_cli(["fit", "--data", "synthetic", "--algorithm", "dp-sgd", "--epsilon", "1",
                       "--steps", "2", "--batch-size", "500", "--neighbouring", "replace-one"],
                      capsys)
  assert code == 2 and "neighbouring='replace-one' is not offered for the Poisson" in err
