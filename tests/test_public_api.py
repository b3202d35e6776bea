from __future__ import annotations

import inspect

import delta_eval as de


def test_exports_are_sorted_and_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(de).items()
        if not name.startswith("_") and (not inspect.ismodule(value) or name == "demo")
    }
    assert public | {"__version__"} == set(de.__all__)
    assert de.__all__ == sorted(de.__all__)


def test_every_public_name_has_a_docstring() -> None:
    for name in de.__all__:
        obj = getattr(de, name)
        if callable(obj) or inspect.ismodule(obj):
            assert obj.__doc__, name
