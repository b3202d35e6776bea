"""The package layout follows the flow of DESIGN.md: no stage imports a later one, and no module imports itself
back through a cycle.

Every ``import`` in every module counts, including those inside functions and under ``TYPE_CHECKING``: a lazy
import is still a dependency. Run ``pytest tests/test_architecture.py -q`` to check a change.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "delta_eval"

#: Each module's layer, by its first name under ``delta_eval``.
LAYER_OF = {
    **dict.fromkeys(
        (
            "exceptions",
            "failures",
            "schema",
            "calls",
            "matching",
            "callables",
            "pricing",
            "redact",
            "paths",
            "chat_format",
            "allocation",
            "interrupts",
            "sync",
            "gc_thresholds",
            "memo",
            "catalog",
            "tagged",
            "sql",
            "fingerprint",
            "uris",
            "installed",
            "lazy",
            "replay_sums",
            "duckdb_connect",
        ),
        "core",
    ),
    "mapping": "core",
    "ingest": "ingest",
    "sampling": "sampling",
    "adapters": "adapters",
    "variant": "variant",
    "replay": "replay",
    "judges": "judges",
    "store": "store",
    "metrics": "metrics",
    "config": "config",
    "progress": "progress",
    "pipeline": "pipeline",
    "stopping": "pipeline",
    "runner": "runner",
    "executors": "runner",
    "run_models": "pipeline",
    "estimate": "runner",
    "result": "result",
    "analysis": "analysis",
    "testing": "testing",
    "viewer": "viewer",
    **dict.fromkeys(("api", "display", "demo", "cli", "__init__", "__main__", "data", "skills"), "front"),
}

_STAGES = {"core", "ingest", "sampling", "adapters", "variant", "replay", "judges", "store", "config", "progress"}

#: What each layer may import besides itself. The flow: source -> sample -> replay (through adapters) -> judges
#: -> store -> metrics / analysis. Adapters know nothing of judges; judges reach models only through adapters; the
#: store knows nothing of providers; config and replay do not reach into ingest; the pipeline uses no test double.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "ingest": {"core"},
    "sampling": {"core", "ingest"},
    "adapters": {"core"},
    "variant": {"core", "adapters"},
    "replay": {"core", "adapters", "variant"},
    "judges": {"core", "adapters"},
    "store": {"core"},
    "metrics": {"core"},
    "config": {"core", "adapters", "variant", "sampling", "judges", "metrics"},
    "progress": {"core"},
    "pipeline": _STAGES | {"metrics"},
    "runner": _STAGES | {"pipeline", "metrics"},
    "result": {"core", "store", "metrics"},
    # adapters: theme names from the judge model; replay: a pair's user message from the turn's context, rebuilt
    # with replay's own function
    "analysis": {"core", "store", "metrics", "result", "adapters", "replay"},
    # the web viewer reads runs (store, result, metrics, saved themes) and rebuilds a turn's context with replay's
    # own function, so that a pair page shows exactly what the sides were sent
    "viewer": {"core", "store", "metrics", "result", "analysis", "replay"},
    "testing": {"core", "adapters"},  # test doubles and fake servers speak the canonical types, nothing later
    "front": set(LAYER_OF.values()),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def imports_of(path: Path) -> set[str]:
    """The ``delta_eval`` modules a file imports, anywhere in it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("delta_eval"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "delta_eval":
                # `from delta_eval import demo` imports a submodule
                found.update(f"delta_eval.{alias.name}" for alias in node.names)
            elif node.module.startswith("delta_eval."):
                found.add(node.module)
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return LAYER_OF["__init__" if len(parts) == 1 else parts[1]]


MODULES = {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in MODULES if m != "delta_eval" and m.split(".")[1] not in LAYER_OF)
    assert unplaced == [], "add these to LAYER_OF and ALLOWED"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_follow_the_flow(module: str) -> None:
    mine = layer(module)
    wrong = sorted(
        f"{module} ({mine}) imports {target} ({layer(target)})"
        for target in MODULES[module]
        if layer(target) != mine and layer(target) not in ALLOWED[mine]
    )
    assert wrong == []


def test_the_fake_servers_know_nothing_of_the_catalogue_or_the_adapters_parameter_rules() -> None:
    # The fakes refuse what each real model refuses from rules of their own: were they to read the adapters'
    # catalogue or mapping, a wrong adapter would pass by agreeing with itself. (The simulated model they answer
    # with is an adapter, and so reaches the catalogue; its answers never depend on it.)
    servers = [m for m in MODULES if m.startswith("delta_eval.testing.servers")]
    assert servers
    forbidden = ("delta_eval.catalog", "delta_eval.adapters.thinking", "delta_eval.adapters.openai_common")
    wrong = sorted(f"{m} -> {t}" for m in servers for t in MODULES[m] if t.startswith(forbidden))
    assert wrong == []


def test_no_import_cycles() -> None:
    graph = {m: {t for t in targets if t in MODULES and t != m} for m, targets in MODULES.items()}
    # A package's __init__ re-exports its modules; a module importing its own package's __init__ is the cycle.
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == []


def test_the_checks_can_fail() -> None:
    # The rules really bind: a replay module reaching into ingest, or the store into adapters, is refused.
    assert "ingest" not in ALLOWED["replay"]
    assert "ingest" not in ALLOWED["config"]
    assert "adapters" not in ALLOWED["store"]
    assert "testing" not in ALLOWED["pipeline"] | ALLOWED["runner"]
    assert "judges" not in ALLOWED["adapters"]
    assert layer("delta_eval.replay.render") == "replay"
    assert layer("delta_eval.ingest") == "ingest"


def _connect_calls(path: Path) -> list[int]:
    """The lines where a file calls ``duckdb.connect`` (code, not a docstring's example)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "connect"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "duckdb"]  # fmt: skip


def test_every_duckdb_connection_is_opened_quiet() -> None:
    # DuckDB prints a progress bar into a run's output for any query over two seconds: every connection the
    # library opens goes through delta_eval.duckdb_connect, which turns it off.
    found = sorted(f"{p.relative_to(PACKAGE.parent)}:{n}" for p in PACKAGE.rglob("*.py")
                   if p.name != "duckdb_connect.py" for n in _connect_calls(p))  # fmt: skip
    assert found == []
    assert _connect_calls(PACKAGE / "duckdb_connect.py")  # (the check finds what it looks for)
