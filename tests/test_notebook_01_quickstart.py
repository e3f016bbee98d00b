"""colab/01_quickstart.ipynb: the committed copy and its dpjax references; with --full, executes it headlessly (helper: tests/_notebooks.py)."""

import _notebooks
import pytest

NAME = "01_quickstart.ipynb"


def test_committed_notebook():
  _notebooks.check_committed(NAME)


def test_notebook_references_resolve():
  _notebooks.check_references(NAME)


@pytest.mark.full  # the default run checks the references above; --full executes the notebook.
def test_notebook_runs():
  _notebooks.execute(NAME)


def test_reference_check_flags_what_does_not_exist():
  nbformat = pytest.importorskip("nbformat")
  nb = _notebooks.load(NAME)
  nb.cells.append(nbformat.v4.new_code_cell(
      "import dpjax.no_such_module\nfrom dpjax import no_such_name, accounting\n"
      "dpjax.fitt(1)\naccounting.zcdp_to_epsilon(0.1, 1e-5, methd='gaussian')"))
  problems = _notebooks.reference_problems(nb)
  assert problems == [f"cell {len(nb.cells) - 1}: {p}" for p in (
      "import dpjax.no_such_module fails",
      "from dpjax import no_such_name: no such name",
      "dpjax.fitt does not exist",
      "accounting.zcdp_to_epsilon() takes no keyword 'methd'")], problems
