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
