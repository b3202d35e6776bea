"""notebooks/explore.ipynb executes from top to bottom on a demo run folder (no network), so it never rots."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_the_notebook_executes_and_draws_from_the_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.delenv("DELTA_EVAL_RUN", raising=False)
    notebook = nbformat.read(ROOT / "notebooks" / "explore.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on any failing cell
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2  # the win rates with their intervals, the funnel
    text = "".join(o.get("text", "") for o in outputs)
    assert "decision:" in text
    assert "#0 " in text  # the themes
    assert (tmp_path / "runs" / "notebook-demo" / "analysis").is_dir()  # read through de.analyze, cached
