"""How a run shows its progress, polling :class:`~delta_eval.progress.RunProgress`.

- **Terminal** (stderr is a TTY): a live rich bar of pairs decided, with the per-stage counts (replayed, decided by
  stage 1 deterministic, stage 2 equivalence, stage 3 judge, errors, saved), the model calls with retries and
  rate-limited answers, tokens, cost so far and the ETA.
- **Jupyter** (a running kernel): the same line in one output that updates in place (``IPython.display`` with a
  display id; rich's own notebook support needs ipywidgets, which a kernel may not have).
- **Anything else** (CI, a log file, pytest's captured stderr): a plain line every ``every`` seconds (10 by default)
  and one when the run ends, so a log gets a heartbeat without a line per pair.

:func:`progress_display` picks one of them.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Iterable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from delta_eval.progress import RunProgress

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "DEFAULT_EVERY",
    "LineProgress",
    "NotebookProgress",
    "ProgressDisplay",
    "in_notebook",
    "progress_display",
    "spend_counts",
    "stage_counts",
    "status_line",
]

#: Seconds between two plain progress lines when stderr is not a terminal.
DEFAULT_EVERY = 10.0


def stage_counts(p: RunProgress) -> str:
    """The per-stage counts of a run, on one line."""
    return (
        f"replayed {p.replayed} | stage1 {p.deterministic} stage2 {p.equivalence} judge {p.judge} "
        f"error {p.error} | saved {p.written}"
    )


def _tokens(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def spend_counts(p: RunProgress) -> str:
    """Calls (with retries and rate-limited answers), tokens and cost so far, and the ETA, on one line."""
    calls = p.calls()
    cost = "unknown" if p.cost_usd is None else f"${p.cost_usd:.4f}"
    return (
        f"calls {calls.answered + calls.cached} (retries {calls.retries}, rate-limited {calls.rate_limited}) | "
        f"tokens {_tokens(p.input_tokens)} in {_tokens(p.output_tokens)} out | cost {cost} | "
        f"ETA {_duration(p.eta_seconds())}"
    )


def status_line(p: RunProgress) -> str:
    """The whole progress of a run on one line, as the plain (non-terminal) display prints it.

    Example:
        >>> status_line(RunProgress(phase="replaying", pairs_total=4, judge=1))
        'delta-eval replaying: 1/4 pairs | replayed 0 | stage1 0 stage2 0 judge 1 error 0 | saved 0 | calls 0 (retries 0, rate-limited 0) | tokens 0 in 0 out | cost $0.0000 | ETA ?'
    """  # noqa: E501
    total = p.pairs_to_do or "?"
    return f"delta-eval {p.phase}: {p.decided}/{total} pairs | {stage_counts(p)} | {spend_counts(p)}"


@functools.cache
def _run_bar() -> type[Any]:
    """The terminal's bar (a rich ``Progress``), its class made on first use: rich is imported for a terminal only
    (30 ms of a run's start elsewhere: CI, logs, notebooks)."""
    from rich.console import RenderableType
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class _RunBar(Progress):
        # The bar on its own line, the counts on the lines below it: one wide row would be cut on an 80-column terminal.
        def __init__(self, run: RunProgress, console: Console) -> None:
            self.run = run
            self.task: TaskID | None = None
            super().__init__(
                TextColumn("[bold]{task.description}"),
                BarColumn(bar_width=24),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA {task.fields[eta]}"),
                console=console,
                refresh_per_second=8,
            )
            self.task = self.add_task("starting", total=None, eta="?")

        def get_renderables(self) -> Iterable[RenderableType]:
            p = self.run
            if self.task is not None:
                eta = _duration(p.eta_seconds())
                self.update(self.task, description=p.phase, total=p.pairs_to_do or None, completed=p.decided, eta=eta)
            yield from super().get_renderables()
            calls = p.calls()
            cost = "unknown" if p.cost_usd is None else f"${p.cost_usd:.4f}"
            yield Text(f"  {stage_counts(p)}", overflow="ellipsis", no_wrap=True)
            yield Text(
                f"  cost {cost} | calls {calls.answered + calls.cached}, retries {calls.retries}, rate-limited "
                f"{calls.rate_limited} | tokens {_tokens(p.input_tokens)} in {_tokens(p.output_tokens)} out",
                overflow="ellipsis",
                no_wrap=True,
            )

    return _RunBar


class ProgressDisplay:
    """Context manager showing a run's progress on a terminal (rich) until it ends.

    Example::

        progress = RunProgress()
        with ProgressDisplay(progress):
            await execute(config, progress=progress)
    """

    def __init__(self, progress: RunProgress, console: Console | None = None) -> None:
        from rich.console import Console

        self._bar = _run_bar()(progress, console or Console(stderr=True))

    def __enter__(self) -> ProgressDisplay:
        self._bar.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._bar.refresh()
        self._bar.stop()


class _Ticker:
    """A daemon thread calling ``show`` every ``every`` seconds while the block runs, and once at its end."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="delta-eval-progress", daemon=True)

    def show(self, final: bool) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.show(final=False)

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.show(final=True)


class LineProgress(_Ticker):
    """A plain line of progress (:func:`status_line`) to ``stream`` (stderr) every ``every`` seconds and once when
    the block ends: for logs and CI, where a redrawn bar would be noise.

    Example::

        with LineProgress(progress, every=30):
            await execute(config, progress=progress)
    """

    def __init__(self, progress: RunProgress, every: float = DEFAULT_EVERY, stream: TextIO | None = None) -> None:
        super().__init__(every)
        self.progress = progress
        self.stream = stream

    def show(self, final: bool) -> None:
        """Print the line (flushed, so a log shows it at once)."""
        stream = self.stream or sys.stderr  # looked up late: pytest and notebooks swap sys.stderr
        print(status_line(self.progress), file=stream, flush=True)


class NotebookProgress(_Ticker):
    """The progress line in one Jupyter output, updated in place every ``every`` seconds and at the end."""

    def __init__(self, progress: RunProgress, every: float = 0.5) -> None:
        super().__init__(every)
        self.progress = progress
        self._handle: Any = None

    def __enter__(self) -> NotebookProgress:
        from IPython.display import display

        self._handle = display(status_line(self.progress), display_id=True)  # type: ignore[no-untyped-call]
        super().__enter__()
        return self

    def show(self, final: bool) -> None:
        """Replace the output's text with the current line."""
        if self._handle is not None:
            self._handle.update(status_line(self.progress))


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (a notebook, qtconsole, Colab), not a terminal IPython."""
    ipython_module = sys.modules.get("IPython")
    if ipython_module is None:
        return False
    shell = ipython_module.get_ipython()
    return shell is not None and (type(shell).__name__ == "ZMQInteractiveShell" or "google.colab" in str(type(shell)))


def progress_display(
    progress: RunProgress, *, every: float = DEFAULT_EVERY, stream: TextIO | None = None
) -> AbstractContextManager[Any]:
    """The display that suits where the run's output goes: a notebook output updated in place inside Jupyter, a
    live bar when stderr is a terminal, else a plain line every ``every`` seconds and one at the end."""
    if stream is None and in_notebook():
        return NotebookProgress(progress)
    out = stream or sys.stderr
    if stream is None and out.isatty():
        return ProgressDisplay(progress)
    return LineProgress(progress, every, stream)
