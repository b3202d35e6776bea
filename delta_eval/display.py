"""A live progress display of a run on the terminal (rich), polling :class:`~delta_eval.progress.RunProgress`.

One bar for pairs, with the per-stage counts beside it: how many pairs were replayed, decided by stage 1
(deterministic), stage 2 (equivalence) and stage 3 (judge), ended in error, and written to disk.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from delta_eval.progress import RunProgress

__all__ = ["ProgressDisplay", "stage_counts"]


def stage_counts(p: RunProgress) -> str:
    """The per-stage counts of a run, on one line."""
    return (
        f"replayed {p.replayed} | stage1 {p.deterministic} stage2 {p.equivalence} judge {p.judge} "
        f"error {p.error} | saved {p.written}"
    )


class _RunBar(Progress):
    def __init__(self, run: RunProgress, console: Console) -> None:
        self.run = run
        self.task: TaskID | None = None
        super().__init__(
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stages]}"),
            TimeElapsedColumn(),
            console=console,
            refresh_per_second=8,
        )
        self.task = self.add_task("starting", total=None, stages="")

    def get_renderables(self) -> Iterable[RenderableType]:
        p = self.run
        total = max(0, p.pairs_total - p.pairs_resumed) or None
        if self.task is not None:
            self.update(self.task, description=p.phase, total=total, completed=p.decided, stages=stage_counts(p))
        yield from super().get_renderables()


class ProgressDisplay:
    """Context manager showing a run's progress until it ends.

    Example::

        progress = RunProgress()
        with ProgressDisplay(progress):
            await execute(config, progress=progress)
    """

    def __init__(self, progress: RunProgress, console: Console | None = None) -> None:
        self._bar = _RunBar(progress, console or Console(stderr=True))

    def __enter__(self) -> ProgressDisplay:
        self._bar.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._bar.refresh()
        self._bar.stop()
