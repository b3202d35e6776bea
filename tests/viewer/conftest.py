"""Fixtures of the viewer's tests: a small demo run (real pipeline, simulated models), a synthetic run whose
outputs hold hostile HTML, and test clients addressed to 127.0.0.1 (the only host the viewer answers)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("starlette", reason="the viewer's web stack is the 'view' extra")

from starlette.testclient import TestClient

import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.viewer import RunView, create_app

ROOT = Path(__file__).resolve().parents[2]
#: Shown as text, never run: the escaping tests look for it.
HOSTILE = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'


def load_benchmark() -> ModuleType:
    """benchmarks/viewer.py, whose synthetic run folder these tests reuse."""
    spec = importlib.util.spec_from_file_location("viewer_benchmark", ROOT / "benchmarks" / "viewer.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def demo_run_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("viewer") / "demo"
    de.run(demo_config(out, n=12, latency_ms=0.0), conversations=demo_conversations(), progress=False)
    return out


@pytest.fixture
def demo_run(demo_run_master: Path, tmp_path: Path) -> Path:
    """A fresh copy of the demo run per test: labels written by one test are not seen by another."""
    out = tmp_path / "demo"
    shutil.copytree(demo_run_master, out)
    return out


@pytest.fixture(scope="session")
def synthetic_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("viewer") / "synthetic"
    return Path(load_benchmark().synthetic_run(out, 300, seed=1, texts={0: HOSTILE}))


@pytest.fixture
def synthetic(synthetic_master: Path, tmp_path: Path) -> Path:
    out = tmp_path / "synthetic"
    shutil.copytree(synthetic_master, out)
    return out


def client_of(*runs: Path, user: str = "tester") -> TestClient:
    return TestClient(create_app([RunView(r) for r in runs], user=user), base_url="http://127.0.0.1")


@pytest.fixture
def demo_client(demo_run: Path) -> TestClient:
    return client_of(demo_run)


@pytest.fixture
def synthetic_client(synthetic: Path) -> TestClient:
    return client_of(synthetic)


@pytest.fixture(scope="session")
def session_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session run on the airline conversations that need a write: the simulated user plays the user, a tool
    model answers the calls the recording never made (the candidate changes arguments), and the candidate never
    writes (it loses on the goal)."""
    from tests.test_session_runs import READS, airline

    out = tmp_path_factory.mktemp("viewer") / "sessions"
    writes = ["book_reservation", "cancel_reservation", "update_reservation_flights", "update_reservation_baggages",
              "update_reservation_passengers", "send_certificate"]  # fmt: skip
    conversations = [c for c in airline(40) if any(a["name"] in writes for a in c.metadata["actions"])][:4]
    config = de.RunConfig(
        baseline=de.Variant(model="simulated:baseline"),
        candidate=de.Variant(
            model="simulated:candidate", provider_options={"skip_tools": writes, "change_args_rate": 0.3}
        ),
        mode="session",
        session=de.Session(
            user="simulated:user",
            scripted=False,
            goal="instruction",
            tool_model="simulated:tools",
            expected="actions",
            ignore=READS,
        ),
        max_tool_rounds=10,
        out=out,
    )
    de.run(config, conversations=conversations, progress=False)
    return out
