"""Start-up cost: ``import delta_eval`` imports its public names on first use, so the processes that start with
it (every Ray worker and actor, every :class:`~delta_eval.ProcessExecutor` child, every ``delta-eval`` command) pay
only for the modules they use.

What a fresh process imports is checked in a subprocess: this test process has imported everything already.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import delta_eval as de

ROOT = Path(__file__).resolve().parents[1]

#: Packages a process that only imports delta_eval, parses the command line or holds a Ray run's limiters never
#: needs: the data engines, the numerics, the terminal UI, the provider SDKs, the web viewer.
HEAVY = ("duckdb", "pyarrow", "numpy", "scipy", "sklearn", "rich", "openai", "anthropic", "google.genai",
         "delta_eval.viewer")  # fmt: skip


def _fresh(code: str) -> dict[str, object]:
    """Run ``code`` in a new interpreter (this checkout first on the path); it prints one JSON value, returned."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    value: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return value


def _loaded(setup: str) -> list[str]:
    """Which of :data:`HEAVY` (and of their submodules) a fresh process holds after ``setup``."""
    got = _fresh(
        f"import json, sys\n{setup}\n"
        f"print(json.dumps({{'loaded': sorted(m for m in sys.modules if m.startswith({HEAVY!r}))}}))"
    )
    loaded = got["loaded"]
    assert isinstance(loaded, list)
    return loaded


def test_importing_the_package_imports_no_heavy_module() -> None:
    assert _loaded("import delta_eval") == []


def test_the_command_line_s_help_and_version_import_no_heavy_module() -> None:
    help_setup = "from delta_eval.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    assert _loaded(help_setup) == []
    # nor the library's stages: parsing the arguments needs none of them
    staged = _fresh(
        f"import json, sys\n{help_setup}\n"
        "print(json.dumps({'stages': sorted(m for m in sys.modules if m.startswith(('pydantic', 'delta_eval.api', "
        "'delta_eval.config', 'delta_eval.schema')))}))"
    )
    assert staged == {"stages": []}


def test_the_model_catalogue_command_imports_no_stage_of_a_run() -> None:
    setup = (
        "import contextlib, io\nfrom delta_eval.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    assert main(['models', 'gpt-4o']) == 0"
    )
    assert _loaded(setup) == []
    staged = _fresh(
        f"import json, sys\n{setup}\n"
        "print(json.dumps({'stages': sorted(m for m in sys.modules if m.startswith(('delta_eval.api', "
        "'delta_eval.analysis', 'delta_eval.demo', 'delta_eval.result')))}))"
    )
    assert staged == {"stages": []}


def test_the_version_option_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    from delta_eval.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"delta-eval {de.__version__}\n"


def test_loading_a_run_s_configuration_imports_neither_the_numerics_nor_the_data_engines() -> None:
    # Every shard and worker of a run loads its configuration first: its decision rule, gates, checks and sample
    # are configuration (delta_eval.metrics.rule, sampling's Stratified), not what computes with them.
    setup = (
        "import delta_eval.config\nimport delta_eval as de\n"
        "rule = de.DecisionRule(gates=(de.Gate(metric='error_rate', max=0.01),), checks=(de.Check(name='c', "
        "tool_called='t'),))\nsample = de.Stratified(n=5)"
    )
    assert [m for m in _loaded(setup) if m.startswith(("numpy", "pyarrow", "duckdb"))] == []


def test_a_ray_run_s_actors_import_only_the_limiters() -> None:
    # Ray sends an actor's class by its module's path: the actor's process imports that module, and only it.
    from delta_eval.executors import ray_cluster

    modules = {ray_cluster.LimiterHost.__module__, ray_cluster.BatchNumbers.__module__}
    setup = "\n".join(f"import {m}" for m in sorted(modules))
    assert _loaded(setup) == []
    shards = _fresh(
        f"import json, sys\n{setup}\n"
        "print(json.dumps({'shard code': sorted(m for m in sys.modules if m.startswith(('delta_eval.executors.shard', "
        "'delta_eval.store', 'delta_eval.config', 'delta_eval.pipeline')))}))"
    )
    assert shards == {"shard code": []}


def test_a_shard_process_imports_neither_the_analysis_nor_the_test_doubles() -> None:
    # What a ProcessExecutor child imports to run its shard (the function it runs, by its path), and a Ray task
    # likewise: the run's stages, not what reads a finished run nor what serves fake providers.
    loaded = _fresh(
        "import json, sys\nimport delta_eval.executors.local, delta_eval.executors.ray_cluster\n"
        "print(json.dumps({'loaded': sorted(m for m in sys.modules if m.startswith(('delta_eval.analysis', "
        "'delta_eval.demo', 'delta_eval.testing', 'delta_eval.viewer', 'delta_eval.result', 'duckdb', 'scipy', "
        "'sklearn', 'rich', 'openai', 'anthropic', 'google.genai')))}))"
    )
    assert loaded == {"loaded": []}


def test_every_public_name_resolves_and_is_listed() -> None:
    fresh = _fresh(
        "import json, delta_eval as de\n"
        "listed = set(dir(de))\n"  # before any name was used
        "names = {n: type(getattr(de, n)).__name__ for n in de.__all__}\n"
        "print(json.dumps({'unlisted': sorted(set(de.__all__) - listed), 'resolved': len(names)}))"
    )
    assert fresh == {"unlisted": [], "resolved": len(de.__all__)}
    for name in de.__all__:
        scope: dict[str, object] = {}
        exec(f"from delta_eval import {name}", scope)
        assert scope[name] is getattr(de, name), name


@pytest.mark.parametrize(
    "package", ["delta_eval.executors", "delta_eval.metrics", "delta_eval.sampling", "delta_eval.testing"]
)
def test_a_lazy_sub_package_s_names_resolve_are_listed_and_import_nothing_first(package: str) -> None:
    fresh = _fresh(
        f"import json, sys, importlib\npackage = importlib.import_module({package!r})\n"
        f"first = sorted(m for m in sys.modules if m.startswith({package + '.'!r}))\n"
        "listed = set(dir(package))\n"
        "names = [n for n in package.__all__ if getattr(package, n) is not None]\n"
        "print(json.dumps({'first': first, 'unlisted': sorted(set(package.__all__) - listed), 'resolved': names}))"
    )
    module = importlib.import_module(package)
    assert fresh == {"first": [], "unlisted": [], "resolved": module.__all__}
    with pytest.raises(AttributeError, match=f"^module '{package}' has no attribute 'no_such_name'$"):
        _ = module.no_such_name


@pytest.mark.parametrize("package", ["delta_eval.metrics", "delta_eval.sampling"])
def test_each_module_of_a_lazy_sub_package_is_its_attribute_on_first_use(package: str) -> None:
    # `delta_eval.metrics.gates` worked when the package imported every module: it still does, in a fresh process
    # where nothing imported the module first.
    module = importlib.import_module(package)
    names = sorted(m.name for m in pkgutil.iter_modules(module.__path__))
    fresh = _fresh(
        f"import json, importlib\npackage = importlib.import_module({package!r})\n"
        f"print(json.dumps({{n: getattr(package, n).__name__ for n in {names!r}}}))"
    )
    assert fresh == {name: f"{package}.{name}" for name in names}
    assert set(names) <= set(dir(module))


def test_a_public_name_is_the_object_its_module_defines() -> None:
    from delta_eval.adapters.simulated import SimulatedAdapter
    from delta_eval.api import run
    from delta_eval.estimate import estimate
    from delta_eval.executors.local import ProcessExecutor

    assert (de.run, de.estimate, de.SimulatedAdapter, de.ProcessExecutor) == (
        run,
        estimate,
        SimulatedAdapter,
        ProcessExecutor,
    )


def test_a_submodule_named_as_a_public_function_does_not_replace_it() -> None:
    # Importing a package's submodule binds it on the package: delta_eval.estimate (the module) must not hide
    # de.estimate (the function), whichever is imported first.
    got = _fresh(
        "import json, inspect\nimport delta_eval.estimate\nimport delta_eval as de\n"
        "print(json.dumps({'function': inspect.isfunction(de.estimate), 'module': de.demo.__name__}))"
    )
    assert got == {"function": True, "module": "delta_eval.demo"}


def test_an_unknown_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"^module 'delta_eval' has no attribute 'no_such_name'$"):
        _ = de.no_such_name  # type: ignore[attr-defined]
    assert not hasattr(de, "no_such_name")
    with pytest.raises(ImportError, match="no_such_name"):
        exec("from delta_eval import no_such_name", {})


def test_models_resolve_by_prefix_when_only_the_run_s_module_was_imported() -> None:
    # No adapter registers itself on import: a model id finds its adapter from the prefix alone.
    got = _fresh(
        "import json\nimport delta_eval.api\nfrom delta_eval.adapters.registry import create_adapter\n"
        "from delta_eval.installed import installed\n"
        "made = {'simulated': type(create_adapter('simulated:base')).__name__}\n"
        "if installed('openai'):\n"
        "    made['openai'] = type(create_adapter('openai:gpt-4o', {'api_key': 'x'})).__name__\n"
        "print(json.dumps(made))"
    )
    assert got["simulated"] == "SimulatedAdapter"
    assert got.get("openai", "ChatCompletionsAdapter") == "ChatCompletionsAdapter"


def test_a_run_from_a_fresh_process_through_the_lazy_names(tmp_path: Path) -> None:
    got = _fresh(
        "import json, delta_eval as de\n"
        "from delta_eval.demo import demo_config, demo_conversations\n"
        f"config = demo_config({str(tmp_path / 'run')!r}, n=3, latency_ms=0)\n"
        "result = de.run(config, conversations=demo_conversations(), progress=False)\n"
        "print(json.dumps({'status': result.status, 'kind': type(result).__name__}))"
    )
    assert got == {"status": "completed", "kind": "RunResult"}
