"""``delta-eval view`` and ``delta-eval calibrate RUN_DIR`` from the command line."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from delta_eval.cli import main
from delta_eval.store.labels import Label, write_labels
from delta_eval.viewer.server import HOST, Server


def test_view_refuses_a_folder_that_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(tmp_path)]) == 1
    assert "not a delta_eval run folder" in capsys.readouterr().err


def test_view_serves_the_runs_it_is_given(demo_run: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    served: dict[str, object] = {}

    def serve(runs: list[object], *, user: str, port: int) -> None:  # stands in for uvicorn: no port is opened
        served.update(runs=runs, user=user, port=port)

    monkeypatch.setattr("delta_eval.viewer.serve", serve)
    assert main(["view", str(demo_run), "--port", "9911", "--user", "ana"]) == 0
    assert served["user"] == "ana"
    assert served["port"] == 9911
    assert "http://127.0.0.1:9911/" in capsys.readouterr().out
    monkeypatch.setenv("USER", "bo")
    monkeypatch.setenv("LOGNAME", "bo")
    assert main(["view", str(demo_run)]) == 0
    assert served["user"] == "bo"


def test_calibrate_without_a_labels_file_reads_the_runs_labels(demo_run: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from delta_eval import open_run

    query = "SELECT pair_id FROM verdicts WHERE outcome = 'equivalent' LIMIT 1"
    ((pair,),) = open_run(demo_run).execute(query).fetchall()
    write_labels(demo_run, [Label(pair_id=pair, label="same")], user="ana")
    assert main(["calibrate", str(demo_run)]) == 0
    out = capsys.readouterr().out
    assert "1 labelled pairs compared" in out
    assert "agreement  100.0%" in out


def test_the_readme_example_of_the_viewer_runs(demo_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from delta_eval.store.labels import LABELS

    root = Path(__file__).resolve().parents[2]
    section = (root / "README.md").read_text().split("## Look at the pairs", 1)[1].split("\n## ", 1)[0]
    [python] = re.findall(r"```python\n(.+?)\n```", section, flags=re.S)
    [bash] = re.findall(r"```bash\n(.+?)\n```", section, flags=re.S)
    assert all(line.startswith("delta-eval view ") for line in bash.splitlines())
    for word in ("candidate better", "baseline better", "same", "judge wrong"):
        assert word in section
    assert len(LABELS) == 4
    write_labels(demo_run, [Label(pair_id="x#0", label="same")], user="ana")
    exec(python.replace('"runs/demo"', repr(str(demo_run))), {})
    assert "calibration of" in capsys.readouterr().out


def test_a_background_server_holds_its_port_from_the_start(demo_run: Path) -> None:
    # The port is bound when the server is made, not found free and bound later: another process (a test on
    # another worker) cannot take it in between.
    server = Server([demo_run], user="ana")
    with socket.socket() as other, pytest.raises(OSError, match="in use"):
        other.bind((HOST, server.port))
    with server:
        assert httpx.get(server.url + "/", timeout=10, follow_redirects=True).status_code == 200
