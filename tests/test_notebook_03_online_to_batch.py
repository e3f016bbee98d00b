"""colab/03_online_to_batch.ipynb: the committed copy and its dpjax references; with --full, executes it headlessly (helper: tests/_notebooks.py)."""

import _notebooks
import pytest

NAME = "03_online_to_batch.ipynb"


def test_committed_notebook():
  _notebooks.check_committed(NAME)


def test_notebook_references_resolve():
  _notebooks.check_references(NAME)


@pytest.mark.full  # the default run checks the references above; --full executes the notebook.
def test_notebook_runs():
  _notebooks.execute(NAME)
