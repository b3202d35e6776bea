"""The viewer's web app: Starlette routes rendering Jinja2 templates (autoescaped), and the one write it makes,
a label saved beside the run.

Routes (``i`` is the run's place on the command line, from 0):

- ``/``: one run: its page; several: their decisions side by side, and a link to the pairs where they differ;
- ``/run/{i}``: the decision, each gate and test linking to its pairs, and the pair list (filters in the query);
- ``/run/{i}/pair?id=PAIR&pos=N&...``: one pair (in a session run, the two sides' transcripts side by side); the
  list's query rides along so that j/k walk the same list;
- ``POST /run/{i}/label``: a label (``pair_id``, ``label``, ``note``), then back to the pair;
- ``/compare``: the pairs whose outcome differs between the runs;
- ``/static/...``: the stylesheet and script shipped in the package (nothing is fetched from elsewhere).

Only requests addressed to 127.0.0.1 or localhost are served (``Host``), and a label is refused when the browser
says it comes from another site (``Origin``): a page on the web cannot make a person's browser write labels.

Example::

    app = create_app(["runs/demo"], user="ana")    # an ASGI app: uvicorn, or starlette's TestClient
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jinja2
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from delta_eval.analysis.evidence import decision_view
from delta_eval.analysis.transcripts import SOURCE_LABELS, USER_LABELS
from delta_eval.store.labels import LABELS, Label, write_labels
from delta_eval.viewer.compare import Comparison
from delta_eval.viewer.pages import message_view, rounds, session_view
from delta_eval.viewer.queries import FLAGS, PAGE_SIZE, SORTS, PairFilter, RunView

__all__ = ["ALLOWED_HOSTS", "create_app"]

#: The host names the viewer answers to: it serves this machine only.
ALLOWED_HOSTS = ("127.0.0.1", "localhost")
_HERE = Path(__file__).parent


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_HERE / "templates"),
        autoescape=True,  # every value is escaped: pair content is untrusted model output
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pct"] = lambda v: "n/a" if v is None else f"{v:.1%}"
    env.filters["num"] = lambda v, fmt=".3g": "" if v is None else format(v, fmt)
    return Jinja2Templates(env=env)


class _Viewer:
    """The app's state: the runs, their comparison, who labels."""

    def __init__(self, runs: Sequence[RunView], user: str) -> None:
        self.runs = list(runs)
        self.user = user
        self.templates = _templates()
        self._comparison: Comparison | None = None

    @property
    def comparison(self) -> Comparison:
        if self._comparison is None:
            self._comparison = Comparison(self.runs)
        return self._comparison

    def run(self, request: Request) -> tuple[int, RunView]:
        try:
            i = int(request.path_params["i"])
            return i, self.runs[i]
        except (ValueError, IndexError):
            raise _NotFound(f"no run {request.path_params['i']}") from None

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("runs", self.runs)
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    # -- pages ---------------------------------------------------------------------------------------------------

    def index(self, request: Request) -> Response:
        if len(self.runs) == 1:
            return RedirectResponse("/run/0", status_code=307)
        table = []
        for i, run in enumerate(self.runs):
            d = run.decision()
            win_rate = d.non_inferiority.win_rate.estimate
            table.append({"i": i, "run": run, "decision": d, "win_rate": win_rate})
        return self.render(request, "index.html", table=table)

    def run_page(self, request: Request) -> Response:
        i, run = self.run(request)
        query = _query(request)
        f = PairFilter.from_query(query)
        page = run.page(f)
        decision = run.decision()
        return self.render(
            request,
            "run.html",
            i=i,
            run=run,
            decision=decision_view(decision),
            f=f,
            page=page,
            facets=run.facets(),
            sorts=list(SORTS),
            flags=list(FLAGS),
        )

    def pair_page(self, request: Request) -> Response:
        i, run = self.run(request)
        query = _query(request)
        pair_id = (query.get("id") or [""])[-1]
        pair = run.pair(pair_id)
        if pair is None:
            return self.render(request, "missing.html", status=404, i=i, run=run, what=f"no pair {pair_id!r}")
        f = PairFilter.from_query(query)
        try:
            pos = max(0, int((query.get("pos") or ["0"])[-1]))
        except ValueError:
            pos = 0
        pos, before, after = run.neighbours(f, pair_id, pos)
        point = pair["point"]
        # A session shows its two rolled transcripts; a turn, the recorded one beside them.
        shown = ("baseline", "candidate") if pair["session"] else ("baseline", "candidate", "recorded")
        context = [message_view(m) for m in point.context] if point else []
        last_user = max((k for k, m in enumerate(context) if m["role"] == "user"), default=None)
        return self.render(
            request,
            "pair.html",
            i=i,
            run=run,
            pair=pair,
            v=pair["verdict"],
            f=f,
            pos=pos,
            page_size=PAGE_SIZE,
            before=before,
            after=after,
            history=context[:last_user] if last_user is not None else context,
            user_message=context[last_user] if last_user is not None else None,
            after_user=context[last_user + 1 :] if last_user is not None else [],
            tools=[(t.name, t.description, t.parameters) for t in point.tools] if point else [],
            rounds=[] if pair["session"] else rounds(pair["sides"]),
            session=session_view({k: r for k, r in pair["sides"].items() if k != "recorded"})
            if pair["session"]
            else None,
            source_labels=SOURCE_LABELS,
            user_labels=USER_LABELS,
            sides=[s for s in shown if s in pair["sides"]],
            label_choices=LABELS,
            user=self.user,
            nav=lambda pid, p: urlencode({"id": pid, "pos": p}) + ("&" + f.query() if f.query() else ""),
        )

    async def label(self, request: Request) -> Response:
        i, run = self.run(request)
        origin = request.headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).hostname not in ALLOWED_HOSTS:
            return PlainTextResponse("labels are only taken from the viewer's own pages", status_code=403)
        form = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
        field = {k: v[-1] for k, v in form.items()}
        try:
            label = Label(pair_id=field.get("pair_id", ""), label=field.get("label", ""), note=field.get("note", ""))
        except ValidationError:
            choices = ", ".join(LABELS)
            return PlainTextResponse(f"a label needs a pair_id and one of: {choices}", status_code=400)
        if await run_in_threadpool(run.pair, label.pair_id) is None:
            return PlainTextResponse(f"no pair {label.pair_id!r} in this run", status_code=404)
        await run_in_threadpool(write_labels, run.path, [label], user=self.user)
        back = field.get("back", "")
        # Back to the pair page only (never to an address the form names): an open redirect would be a hole.
        target = f"/run/{i}/pair?" + (back if back.startswith("id=") else urlencode({"id": label.pair_id}))
        return RedirectResponse(target, status_code=303)

    def compare(self, request: Request) -> Response:
        try:
            page = max(1, int((_query(request).get("page") or ["1"])[-1]))
        except ValueError:
            page = 1
        differences = self.comparison.differences(page)
        return self.render(request, "compare.html", differences=differences)


class _NotFound(Exception):
    pass


def _query(request: Request) -> dict[str, list[str]]:
    return parse_qs(request.url.query, keep_blank_values=False)


def create_app(runs: Sequence[str | Path | RunView], *, user: str) -> Starlette:
    """The viewer of ``runs`` (run folders, or :class:`RunView` already opened), labelling as ``user``."""
    views = [v for r in runs for v in ([r] if isinstance(r, RunView) else RunView.all_of(r))]
    if not views:
        raise ValueError("the viewer needs at least one run folder")
    viewer = _Viewer(views, user)

    async def not_found(request: Request, exc: Exception) -> Response:
        return HTMLResponse(f"<p>{escape(str(exc))}</p>", status_code=404)

    routes = [
        Route("/", viewer.index),
        Route("/run/{i:int}", viewer.run_page),
        Route("/run/{i:int}/pair", viewer.pair_page),
        Route("/run/{i:int}/label", viewer.label, methods=["POST"]),
        Route("/compare", viewer.compare),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(ALLOWED_HOSTS))],
        exception_handlers={_NotFound: not_found},
    )
    app.state.viewer = viewer
    return app
