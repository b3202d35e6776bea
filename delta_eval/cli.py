"""The ``delta-eval`` command.

    delta-eval --version                   print the installed version
    delta-eval demo [--out DIR] [-n N] [--wire W] [--candidate changed|reword] [--judges llm|rule]
                                           run the bundled demo and print its report; with --wire openai |
                                           openai-responses | anthropic | gemini, through that provider's real
                                           SDK against a fake server on 127.0.0.1
    delta-eval run CONFIG [--out DIR] [--overwrite] [--retry-errors] [--fail-on rejected|partial|never]
                          [--summary PATH] [--junit PATH] [--no-progress] [--progress-every SECONDS]
                          [--workers N | --ray ADDRESS [--shards N]]
                                           run (or resume) the evaluation a TOML/YAML file describes; its exit
                                           status gates a merge (below), with a Markdown summary and JUnit XML;
                                           sharded over N processes, or the tasks of a Ray cluster
    delta-eval estimate CONFIG [--pilot RUN_DIR] [--json] [--mode turn|session]
                                           what the run a config describes will cost, per side and judge stage
                                           (and session simulator) with a low-high range, before any model is
                                           called
    delta-eval report RUN_DIR [--noise-floor AA_RUN_DIR] [--html [PATH]] [--fail-on ...] [--summary PATH]
                              [--junit PATH]
                                           print the report of a run folder (beside an A/A run's win rate), or
                                           write it as one self-contained HTML page; the CI options as for run
    delta-eval analyze RUN_DIR [--json] [--outcome baseline|candidate|tie]
                                           what changed and why: win rates, behaviour changes, themes of the
                                           judge's reasons (cached in RUN_DIR/analysis)
    delta-eval compare RUN_DIR RUN_DIR [...] [--json] [--limit N]
                                           runs side by side: each run's decision, win rate, cost and latency,
                                           the pairs whose outcome differs (matched by pair id), and how
                                           consistent runs of the same candidate are
    delta-eval skills install DIR          copy the coding-agent skills (run, analyze) where an agent looks
    delta-eval calibrate RUN_DIR [LABELS]  compare a run's verdicts with human labels (CSV/Parquet: pair_id, label;
                                           default: the labels saved beside the run by `delta-eval view`)
    delta-eval view RUN_DIR [RUN_DIR ...] [--port P] [--user NAME]
                                           a local web app on 127.0.0.1: the decision, the pairs behind it, each
                                           pair side by side, labels; several runs: where their outcomes differ
    delta-eval models [PATTERN] [--retired] [--json]
                                           the model catalogue: thinking controls, sampling, limits, prices and
                                           retirement dates of every model the adapters know, with its date
    delta-eval fake-server openai|anthropic|gemini [--port P] [--latency-ms L]
                                           serve a fake provider (answering from the demo's recordings) until
                                           Ctrl-C, for a real SDK or a run to talk to

Errors are one line (``--debug`` shows the traceback). Exit status: 0 on success, 1 on an error, 2 on bad usage.
``run`` (and ``report`` given ``--fail-on``, ``--summary`` or ``--junit``) gates a merge
(:class:`~delta_eval.metrics.ExitCode`): 0 when the decision is APPROVED or below the ``--fail-on`` level (default
``rejected`` for ``run``), 3 REJECTED, 4 PARTIAL (with ``--fail-on partial``), 5 a run that started but gave no
decision (failed, interrupted, every pair an error); 1 stays a run that could not start. The summary is appended to
``$GITHUB_STEP_SUMMARY`` when that variable is set. ``demo`` keeps 0 / 1.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from delta_eval.exceptions import ConfigError, DeltaEvalError
from delta_eval.installed import installed
from delta_eval.redact import scrub_known
from delta_eval.uris import is_uri, masked, shown

if TYPE_CHECKING:
    from delta_eval.executors import Executor
    from delta_eval.result import RunResult

__all__ = ["main"]


def _print(*values: object, sep: str = " ", end: str = "\n", file: TextIO | None = None, flush: bool = False) -> None:
    """``print``, without any credential the process knows: a report, an error or a message may quote a provider's
    words, and those may echo a key."""
    print(scrub_known(sep.join(str(v) for v in values)), end=end, file=file, flush=flush)


def _folder(value: str) -> str | Path:
    """A run folder given on the command line: an object-store URI (``s3://bucket/prefix``) kept as it is, else a
    path."""
    return value if is_uri(value) else Path(value)


def _masked_arg(arg: str) -> str:
    """A command-line argument as a message may repeat it: a URI (``--out s3://...``, ``--out=s3://...``) without
    its keys (see :func:`~delta_eval.uris.masked`)."""
    name, eq, value = arg.partition("=")
    if is_uri(arg):
        return masked(arg)
    return f"{name}={masked(value)}" if eq and name.startswith("--") and is_uri(value) else arg


class _Version(argparse.Action):
    """``--version``: print the installed version and exit, read only when asked (argparse's own ``version``
    action takes the text when the parser is built, which every command would pay for)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        import delta_eval

        sys.stdout.write(f"{parser.prog} {delta_eval.__version__}\n")  # on stdout, as argparse's own action
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's default must not undo a --debug given before it.
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of errors")
    parser = argparse.ArgumentParser(prog="delta-eval", description="Delta evaluation of LLM agents.", parents=[common])
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", parents=[common], help="run the bundled tau-bench airline demo on simulated models")
    demo.add_argument("--out", type=_folder, help="run folder: a path or a URI (default: runs/demo-<time>)")
    demo.add_argument("-n", type=int, default=100, help="conversations to sample (default 100)")
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--latency-ms", type=float, default=20.0, help="median simulated latency per call")
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    demo.add_argument(
        "--wire",
        choices=["openai", "openai-responses", "anthropic", "gemini"],
        help="go through this provider's real SDK, against a fake server of it on 127.0.0.1",
    )
    demo.add_argument(
        "--candidate",
        choices=["changed", "reword"],
        default="changed",
        help="changed: new prompt, a model that rewords, skips and changes calls; reword: it only rewords more",
    )
    demo.add_argument(
        "--judges", choices=["llm", "rule"], default="llm", help="LLM judges (on simulated models) or rule-based"
    )

    run = sub.add_parser("run", parents=[common], help="run or resume the evaluation a config file describes")
    run.add_argument("config", type=Path, help="a TOML or YAML run configuration")
    run.add_argument("--out", type=_folder, help="run folder, a path or a URI (overrides the config's 'out')")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--progress-every", type=float, default=10.0, metavar="SECONDS",
                     help="without a terminal (CI logs), a progress line every SECONDS (default 10)")  # fmt: skip
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in a run folder of another configuration (removes only the library's files)",
    )
    run.add_argument(
        "--mode",
        choices=["turn", "session"],
        help="replay recorded turns, or roll whole sessions forward with a user simulator (overrides the config's)",
    )
    run.add_argument(
        "--retry-errors",
        action="store_true",
        help="on resuming, try again every pair that ended in an error (default: only retryable provider errors)",
    )
    where = run.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, metavar="N",
                       help="shard the pairs over N processes here, this one among them (0: one per core)")  # fmt: skip
    where.add_argument("--ray", metavar="ADDRESS",
                       help="shard the pairs over the Ray cluster at ADDRESS ('auto': the one running)")  # fmt: skip
    run.add_argument("--shards", type=int, metavar="N", help="with --ray: tasks to cut the run into (default: CPUs)")
    _ci_options(run, "rejected")

    est = sub.add_parser("estimate", parents=[common], help="what a run will cost, before any model is called")
    est.add_argument("config", type=Path, help="a TOML or YAML run configuration")
    est.add_argument("--pilot", type=Path, help="a pilot run folder: the judging funnel's shares to assume")
    est.add_argument("--json", action="store_true", help="print JSON")
    est.add_argument(
        "--mode", choices=["turn", "session"], help="estimate replayed turns or whole sessions (overrides the config's)"
    )

    report = sub.add_parser("report", parents=[common], help="print the report of a run folder")
    report.add_argument("run_dir", type=_folder)
    report.add_argument(
        "--noise-floor", help="an A/A run folder (a path or a URI): its win rate is the judge's noise floor"
    )
    report.add_argument("--candidate", help="in a run of several candidates, the one to report (default: the first)")
    report.add_argument(
        "--html",
        nargs="?",
        const=True,
        metavar="PATH",
        help="write one self-contained HTML page instead (default RUN_DIR/report.html)",
    )
    _ci_options(report, None)

    an = sub.add_parser("analyze", parents=[common], help="what changed and why: summary, behaviours, themes")
    an.add_argument("run_dir", type=_folder)
    an.add_argument("--candidate", help="in a run of several candidates, the one to analyse (default: the first)")
    an.add_argument("--json", action="store_true", help="one JSON document (for agents and scripts)")
    an.add_argument(
        "--outcome",
        choices=["baseline", "candidate", "tie"],
        default="baseline",
        help="themes of the pairs with this outcome (default baseline: where the candidate lost)",
    )

    cmp = sub.add_parser("compare", parents=[common], help="runs side by side: decisions and the pairs that differ")
    cmp.add_argument("run_dirs", type=_folder, nargs="+", metavar="RUN_DIR", help="two or more run folders")
    cmp.add_argument("--json", action="store_true", help="one JSON document {summary, differences}")
    cmp.add_argument("--limit", type=int, default=20, metavar="N", help="list up to N differing pairs (default 20)")

    skills = sub.add_parser("skills", parents=[common], help="the coding-agent skills shipped with delta_eval")
    skills.add_argument("action", choices=["install", "list"])
    skills.add_argument("dir", type=Path, nargs="?", help="where to install them (e.g. .claude/skills)")

    cal = sub.add_parser("calibrate", parents=[common], help="compare a run's verdicts with human labels")
    cal.add_argument("run_dir", type=_folder)
    cal.add_argument(
        "labels",
        type=Path,
        nargs="?",
        help="CSV or Parquet: pair_id and label (candidate / baseline / tie); default: the run's own labels",
    )

    view = sub.add_parser("view", parents=[common], help="browse runs' pairs and label them, on 127.0.0.1")
    view.add_argument("run_dirs", type=_folder, nargs="+", metavar="RUN_DIR")
    view.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (default 8765)")
    view.add_argument("--user", help="who labels (default: $USER)")

    models = sub.add_parser("models", parents=[common], help="list the model catalogue: capabilities and prices")
    models.add_argument("pattern", nargs="?", help="a part of the model id, or a glob (anthropic:*opus*)")
    models.add_argument("--retired", action="store_true", help="list retired models too")
    models.add_argument("--json", action="store_true", help="print JSON")

    fake = sub.add_parser("fake-server", parents=[common], help="serve a fake provider on 127.0.0.1 until Ctrl-C")
    fake.add_argument("provider", choices=["openai", "anthropic", "gemini"])
    fake.add_argument("--port", type=int, default=0, help="port (default: any free one, printed)")
    fake.add_argument("--latency-ms", type=float, default=0.0, help="median latency of an answer")
    return parser


def _ci_options(parser: argparse.ArgumentParser, fail_on: str | None) -> None:
    """The merge-gate options of ``run`` and ``report`` (``fail_on``: the default level; ``None``: no gating)."""
    parser.add_argument(
        "--fail-on",
        choices=["rejected", "partial", "never"],
        default=fail_on,
        help="the least severe decision that exits non-zero: rejected (exit 3), partial (PARTIAL exits 4 too) or "
        f"never (default {fail_on or 'never: report only'})",
    )
    parser.add_argument("--summary", type=Path, metavar="PATH", help="write a Markdown summary for a PR or CI page")
    parser.add_argument("--junit", type=Path, metavar="PATH", help="write JUnit XML: one case per gate and stratum")


def _executor(args: argparse.Namespace) -> Executor | None:
    """The executor ``run``'s options ask for (``None``: this process)."""
    from delta_eval.executors import ProcessExecutor, RayExecutor

    if args.ray is not None:
        return RayExecutor(args.ray, shards=args.shards)
    if args.shards is not None:
        raise ConfigError("--shards goes with --ray")
    if args.workers is not None:
        if args.workers < 0:
            raise ConfigError(f"--workers must be 0 (one per core) or more, got {args.workers}")
        return ProcessExecutor(args.workers or None)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``delta-eval`` command; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    args.debug = getattr(args, "debug", False)
    if args.command == "compare" and len(args.run_dirs) < 2:
        parser.error("compare: give two or more run folders")
    if args.command == "compare" and args.limit < 0:
        parser.error("compare: --limit must be 0 or more")
    # Each command imports what it uses, here, so that `delta-eval --help` and the light commands (models, skills)
    # do not pay for the run's and the analysis' modules.
    out = (
        args.out
        if args.command == "demo" and args.out
        else Path("runs") / datetime.now(UTC).strftime("demo-%Y%m%d-%H%M%S")
    )
    # For a run's exit status: whether the run folder gained a session (the run started) before an error.
    run_dir: Path | None = None
    sessions = 0
    try:
        if args.command == "estimate":
            from delta_eval.api import make_config
            from delta_eval.estimate import estimate

            estimated = estimate(make_config(args.config, mode=args.mode), pilot=args.pilot)
            _print(json.dumps(estimated.to_dict(), indent=1) if args.json else estimated)
            return 0
        if args.command == "report" and args.html:
            from delta_eval.analysis.comparison import analyze
            from delta_eval.analysis.html import write_html
            from delta_eval.result import open_result

            chosen = open_result(args.run_dir, args.candidate)
            _print(write_html(analyze(chosen), None if args.html is True else args.html))
            return _gate(args, chosen) if _gating(args) else 0
        if args.command == "report":
            from delta_eval.analysis.report import render_report
            from delta_eval.result import open_result

            result = open_result(args.run_dir, args.candidate)
            _print(render_report(result, noise_floor=args.noise_floor))
            return _gate(args, result) if _gating(args) else 0
        if args.command == "analyze":
            from delta_eval.analysis.comparison import analyze
            from delta_eval.analysis.text import analysis_text
            from delta_eval.result import open_result

            a = analyze(open_result(args.run_dir, args.candidate))
            data = {"summary": a.summary(), "changes": a.changes(), "themes": a.themes(outcome=args.outcome)}
            _print(json.dumps(data, indent=1, default=str) if args.json else analysis_text(data, args.outcome))
            return 0
        if args.command == "compare":
            from delta_eval.analysis.comparison import analyze
            from delta_eval.analysis.text import comparison_text

            c = analyze(args.run_dirs)
            summary, differences = c.summary(), c.differences(limit=args.limit)
            data = {"summary": summary, "differences": differences}
            _print(json.dumps(data, indent=1, default=str) if args.json else comparison_text(summary, differences))
            return 0
        if args.command == "skills":
            return _skills(args.action, args.dir)
        if args.command == "calibrate":
            from delta_eval.analysis.calibration import calibrate
            from delta_eval.result import open_result

            _print(calibrate(open_result(args.run_dir), args.labels))
            return 0
        if args.command == "view":
            from delta_eval.store.remote import local_run

            # A URI run is viewed from its working copy (labels are written there, not uploaded).
            return _view([local_run(d) for d in args.run_dirs], args.port, args.user)
        if args.command == "models":
            from delta_eval.catalog.listing import models_json, models_text

            show = models_json if args.json else models_text
            _print(show(args.pattern, retired=args.retired))
            return 0
        if args.command == "fake-server":
            return _serve_fake(args.provider, args.port, args.latency_ms)
        from delta_eval.analysis.report import render_report
        from delta_eval.api import run
        from delta_eval.demo import demo_config, demo_conversations, wire_models

        if args.command == "demo" and args.wire:
            _print(
                f"delta-eval demo: tau-bench airline conversations through the real {args.wire} SDK, against a fake "
                f"{args.wire} server on 127.0.0.1 (SIMULATED models), run folder {out}",
                file=sys.stderr,
            )
            kinds = {"candidate": args.candidate, "judges": args.judges}
            with wire_models(args.wire, seed=args.seed, latency_ms=args.latency_ms, **kinds) as models:
                said = (
                    f"NOTE: the models are simulated behind a fake {args.wire} server on 127.0.0.1, reached "
                    f"through the real {args.wire} SDK; no real model was called."
                )
                config = demo_config(out, n=args.n, seed=args.seed, models=models, description=said)
                result = run(config, conversations=demo_conversations(), progress=not args.no_progress)
        elif args.command == "demo":
            _print(
                "delta-eval demo: tau-bench airline conversations on SIMULATED models, run folder "
                f"{shown(str(out)) if is_uri(out) else out}",
                file=sys.stderr,
            )
            config = demo_config(
                out, n=args.n, seed=args.seed, latency_ms=args.latency_ms, candidate=args.candidate, judges=args.judges
            )
            result = run(config, conversations=demo_conversations(), progress=not args.no_progress)
        else:
            from delta_eval.analysis.ci import sessions_of
            from delta_eval.api import make_config

            config = make_config(
                args.config,
                out=args.out,
                overwrite=args.overwrite or None,
                retry_errors=args.retry_errors or None,
                mode=args.mode,
            )
            run_dir, sessions = config.out, sessions_of(config.out)
            result = run(
                config, progress=not args.no_progress, progress_every=args.progress_every, executor=_executor(args)
            )
        _print(render_report(result))
        if args.command == "run":
            return _gate(args, result)
        return 0 if result.status == "completed" else 1
    except DeltaEvalError as exc:
        if args.debug:
            raise
        _print(f"delta-eval: error: {exc}", file=sys.stderr)
        return _failed(args, run_dir, sessions, str(exc))
    except Exception as exc:
        if args.debug:
            raise
        if isinstance(exc, ExceptionGroup) and (ours := _ours(exc)) is not None:
            _print(f"delta-eval: error: {ours}", file=sys.stderr)
            return _failed(args, run_dir, sessions, str(ours))
        from delta_eval.failures import describe_failure

        _print(f"delta-eval: error: {describe_failure(exc)} (--debug shows where)", file=sys.stderr)
        return _failed(args, run_dir, sessions, describe_failure(exc))
    except KeyboardInterrupt:
        given = list(sys.argv[1:] if argv is None else argv)
        if args.command == "demo" and args.out is None:
            given += ["--out", str(out)]
        again = "delta-eval " + shlex.join(_masked_arg(a) for a in given)
        _print(f"delta-eval: interrupted; finished pairs are saved. Run {again} to resume.", file=sys.stderr)
        return _failed(args, run_dir, sessions, "interrupted")


def _gating(args: argparse.Namespace) -> bool:
    """Whether ``report`` was asked to act as a merge gate (it only prints otherwise)."""
    return bool(args.fail_on or args.summary or args.junit)


def _gate(args: argparse.Namespace, result: RunResult) -> int:
    """Write the summary and JUnit file of a run and return its exit status (see the module docstring)."""
    from delta_eval.analysis.ci import gate

    return int(gate(result, fail_on=args.fail_on or "never", summary=args.summary, junit=args.junit))


def _failed(args: argparse.Namespace, run_dir: Path | None, sessions: int, message: str) -> int:
    """The exit status of a command that raised: for ``run``, 5 (``INCOMPLETE``) when the run had started (its
    folder gained a session), else 1; the CI outputs say why either way."""
    if getattr(args, "command", None) != "run":
        return 1
    from delta_eval.analysis.ci import gate, gate_error, sessions_of
    from delta_eval.metrics import ExitCode
    from delta_eval.result import open_result

    if run_dir is not None and sessions_of(run_dir) > sessions:
        try:
            return int(gate(open_result(run_dir), fail_on=args.fail_on, summary=args.summary, junit=args.junit))
        except Exception:
            # The folder cannot be read back, or an output cannot be written (the error above said which): the
            # gate has no decision to give, and a traceback here would hide that line.
            return int(ExitCode.INCOMPLETE)
    gate_error(message, ExitCode.ERROR, summary=args.summary, junit=args.junit)
    return int(ExitCode.ERROR)


def _skills(action: str, target: Path | None) -> int:
    from delta_eval.skills import SKILLS, install_skills

    if action == "list":
        for path in SKILLS:
            _print(path.parent.name)
        return 0
    if target is None:
        raise ConfigError("say where to install the skills: delta-eval skills install DIR (e.g. .claude/skills)")
    for path in install_skills(target):
        _print(f"installed {path}")
    return 0


def _view(run_dirs: list[Path], port: int, user: str | None) -> int:
    import getpass

    missing = [m for m in ("starlette", "uvicorn", "jinja2") if not installed(m)]
    if missing:
        raise ConfigError(
            f"delta-eval view needs {', '.join(missing)}: pip install 'delta-eval[view]' (or '.[view]' in a checkout)"
        )
    from delta_eval.viewer import serve
    from delta_eval.viewer.queries import RunView

    try:
        who = user or getpass.getuser()
    except (OSError, KeyError):  # no $USER, no passwd entry (some containers)
        raise ConfigError("say who labels: delta-eval view RUN_DIR --user NAME") from None
    # opened first: a bad folder is an error before anything listens; a run of several candidates is one view each
    views = [view for path in run_dirs for view in RunView.all_of(path)]
    _print(
        f"delta-eval view: http://127.0.0.1:{port}/ ({len(views)} run(s), labels as {who}; Ctrl-C stops)", flush=True
    )
    serve(views, user=who, port=port)
    return 0


def _ours(group: BaseExceptionGroup) -> DeltaEvalError | None:
    """The first of our own errors in a group (raised inside a task), if any."""
    for exc in group.exceptions:
        if isinstance(exc, DeltaEvalError):
            return exc
        if isinstance(exc, BaseExceptionGroup) and (found := _ours(exc)) is not None:
            return found
    return None


def _serve_fake(provider: str, port: int, latency_ms: float) -> int:
    from delta_eval.demo import WIRES, behaviours, demo_conversations
    from delta_eval.gc_thresholds import fewer_collections

    conversations, _ = demo_conversations().load()
    behaviour = behaviours(latency_ms=latency_ms)["baseline"].model_copy(update={"reword_rate": 0.0})
    server = WIRES[provider][1](recordings=conversations, behaviour=behaviour)
    server.start(port)
    base = getattr(server, "base_url", server.url)
    _print(f"fake {provider} server on {base} (any key works; Ctrl-C stops it)", flush=True)
    # A server under load allocates as a run does (a request's dicts and models a call, a heap of recordings and
    # cached answers that grows): the collector as seldom as a run's.
    with fewer_collections():
        try:
            server.serve_forever_started()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
