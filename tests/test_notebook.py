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
    # win rates with their intervals, the funnel, cost and latency per side, behaviours, themes
    assert len(images) == 5  # (a run of one candidate: no leaderboard plot)
    markdown = "".join(o.get("data", {}).get("text/markdown", "") for o in outputs)
    assert "decision: **" in markdown
    assert "| gate |" in markdown  # each gate, passed or not, and the pairs behind it
    assert "| #0 " in markdown  # the themes with their prompt sections
    pairs = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert pairs
    assert all("<details open>" in html and "<div class=side>" in html for html in pairs)
    assert (tmp_path / "runs" / "notebook-demo" / "analysis").is_dir()  # read through de.analyze, cached


def test_the_notebook_shows_the_leaderboard_of_a_run_of_several_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    import delta_eval as de
    from delta_eval.demo import demo_config, demo_conversations

    config = demo_config(tmp_path / "fleet", n=6, latency_ms=0.0)
    candidates = (de.Variant.model_validate({**config.the_candidate.model_dump(), "name": "warm"}),
                  de.Variant.model_validate({**config.baseline.model_dump(), "name": "same"}))  # fmt: skip
    de.run(config.model_copy(update={"candidate": None, "candidates": candidates}),
           conversations=demo_conversations(), progress=False)  # fmt: skip
    monkeypatch.setenv("DELTA_EVAL_RUN", str(tmp_path / "fleet"))
    notebook = nbformat.read(ROOT / "notebooks" / "explore.ipynb", as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    markdown = "".join(o.get("data", {}).get("text/markdown", "") for o in outputs)
    assert "| warm | " in markdown
    assert "| same | " in markdown
    assert "the rest of this notebook: the candidate warm" in markdown
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) == 6  # the fronts, then as for one
