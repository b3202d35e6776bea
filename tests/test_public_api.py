from __future__ import annotations

import importlib
import inspect
import pkgutil

import delta_eval as de

#: Modules users import as such; every other module is an implementation detail.
PUBLIC_MODULES = {"demo", "testing"}


def test_exports_are_sorted_and_exactly_the_public_names() -> None:
    # dir(), not vars(): the package imports its names on first use (see test_lazy_import.py)
    public = {
        name
        for name in dir(de)
        if not name.startswith("_") and (not inspect.ismodule(getattr(de, name)) or name in PUBLIC_MODULES)
    }
    assert public | {"__version__"} == set(de.__all__)
    assert de.__all__ == sorted(de.__all__)
    modules = {name for name in de.__all__ if inspect.ismodule(getattr(de, name))}
    assert modules == PUBLIC_MODULES


def test_extenders_find_what_they_need_at_the_top() -> None:
    # adapters, judges, renderers, tool simulators and tests all plug in through these
    for name in (
        "AdapterContext",
        "ModelAdapter",
        "ModelPool",
        "register_adapter",
        "JudgeContext",
        "PairView",
        "RenderInput",
        "ToolSimulator",
        "ToolContext",
        "ScriptedAdapter",
        "SimulatedAdapter",
    ):
        assert name in de.__all__, name


def test_every_public_name_has_a_docstring() -> None:
    for name in de.__all__:
        obj = getattr(de, name)
        if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj):
            assert obj.__doc__, name


def test_every_package_and_module_says_what_it_is_for() -> None:
    for info in pkgutil.walk_packages(de.__path__, prefix="delta_eval."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        doc = (module.__doc__ or "").strip()
        # more than a restatement of its own name
        assert len(doc.split()) >= 8, f"{info.name}: {doc!r}"
