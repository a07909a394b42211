"""The documentation: the site builds strict with no warning, its generated reference pages are
those the code makes, and every fenced Python block of ``docs/`` and ``README.md`` runs against
a real Redis (the session's embedded server), page by page, in order.

A block that cannot run alone (a fragment of a Django project, a wait for a worker) carries a
``<!-- not-run: why -->`` line just before it; that set is kept small (``MAX_NOT_RUN``). The
README's quickstart and the tutorial are also followed as a user would: saved as files, run by
``antre worker`` and the CLI's own commands, as the pages write them.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import inspect
import os
import re
import secrets
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from antre.observe.readmodels import ReadModels
from helpers import on_own_thread

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```",
                   re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not-run:(?P<why>[^>]*)-->\s*$")
SNIPPET = re.compile(r'^--8<-- "(?P<path>[^"]+)"$', re.M)
MAX_NOT_RUN = 8  # four today: a flow's wait, a result's wait, a Django project, an action entry


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    not_run: str | None  # the reason, when the block is marked not to run

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, with ``--8<--`` includes read in as the site does."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        code = SNIPPET.sub(lambda s: (REPO / s["path"]).read_text(), m["body"])
        out.append(Block(page, line, m["lang"], code, marker["why"].strip() if marker else None))
    return out


def python_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang in ("python", "py")]


PYTHON_PAGES = [p for p in PAGES if python_blocks(p)]


# -- the site -------------------------------------------------------------------------------------
@pytest.mark.timeout(600)
def test_the_site_builds_strict_with_no_warning(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link between pages or into the repository, a page
    missing from the nav, an API reference mkdocstrings cannot resolve fail the build."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert "WARNING" not in output, output[-5000:]
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    for name in ("Antre", "JobContext", "Permanent", "LimitPolicy", "RetryPolicy", "Queue"):
        assert f'id="antre.{name}"' in api or f'id="antre.errors.{name}"' in api, name
    tutorial = (tmp_path / "site" / "tutorial" / "index.html").read_text()
    assert "Fix the bug, replay the job" in tutorial


def test_a_link_out_of_docs_becomes_a_repository_link_and_a_missing_file_is_named() -> None:
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    text = ("See [the example](../../examples/fastapi_app.py#L1), [a page](../install.md) and "
            "[gone](../../bench/NOPE.md).\n```\n[in code](../../nowhere.md)\n```\n")
    out, missing = hooks.rewrite(text, "how-to/x.md", "https://example.org/r")
    assert "(https://example.org/r/blob/main/examples/fastapi_app.py#L1)" in out
    assert "[a page](../install.md)" in out and "[in code](../../nowhere.md)" in out
    assert missing == ["bench/NOPE.md"]


def test_the_readmes_links_name_files_of_the_checkout() -> None:
    """GitHub renders the README outside the site: each relative link is checked here."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text())
    local = [link for link in links if not re.match(r"^[a-z]+:", link)]
    assert len(local) >= 20, local
    assert [link for link in local if not (REPO / link).exists()] == []


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["cli.md", "metrics.md", "alerts.md", "logs.md", "settings.md"])
def test_the_generated_reference_pages_are_current(name: str) -> None:
    gen = _generator()
    made = gen.PAGES[name]()
    committed = (REPO / "docs" / "reference" / name).read_text()
    assert committed == made, (f"docs/reference/{name} is not what the code makes: run "
                               "python docs/gen_reference.py")


def test_the_cli_reference_lists_every_command_of_the_action_table() -> None:
    from antre.actions import SELECTIONS, TABLE
    page = (REPO / "docs" / "reference" / "cli.md").read_text()
    words = {tuple(a.cli) for a in TABLE if a.cli}
    words |= {tuple(op.cli) for s in SELECTIONS for op in s.ops if op.cli}
    missing = [w for w in words if f"`antre {' '.join(w)}`" not in page]
    assert not missing, missing
    assert "audited as `dlq.replay`" not in page or "role `operator`" in page


def test_the_metrics_and_log_references_name_every_registered_one() -> None:
    from antre.observe.logs import FIELD_HELP, FIELDS
    from antre.observe.metrics import METRIC_NAMES
    metrics = (REPO / "docs" / "reference" / "metrics.md").read_text()
    assert [m for m in METRIC_NAMES if f"`{m}`" not in metrics] == []
    assert set(FIELD_HELP) == set(FIELDS)
    logs = (REPO / "docs" / "reference" / "logs.md").read_text()
    assert "`succeeded`" in logs and "`buried`" in logs and "`retried`" in logs


# -- the snippets ---------------------------------------------------------------------------------
def test_blocks_marked_not_to_run_say_why_and_stay_few() -> None:
    marked = [b for p in PAGES for b in python_blocks(p) if b.not_run is not None]
    assert all(b.not_run for b in marked), [b.where for b in marked if not b.not_run]
    assert len(marked) <= MAX_NOT_RUN, [f"{b.where}: {b.not_run}" for b in marked]
    total = sum(len(python_blocks(p)) for p in PAGES)
    assert total >= 30, total  # the pages' examples are found (a broken fence regex finds none)


def _run(code: str, namespace: dict[str, Any], where: str) -> None:
    """``code`` in ``namespace`` on a thread of its own, as a reader's script runs (no event loop
    of the test process's around it); a block with a top-level ``await`` runs on an event loop."""
    compiled = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)

    def block() -> None:
        result = eval(compiled, namespace)  # noqa: S307 - the documentation's own examples
        if inspect.iscoroutine(result):
            asyncio.run(result)

    on_own_thread(block)


@pytest.fixture
def docs_env(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """What a reader's shell has: ``ANTRE_REDIS_URL`` (the test Redis, flushed), a secret key
    for the dashboard, no database unless a block names one; the working directory a scratch
    folder (a block may write files there)."""
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_SECRET_KEY", secrets.token_hex(32))
    monkeypatch.delenv("ANTRE_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_python_block_of_the_page_runs(page: Path, docs_env: Path) -> None:
    """The page's blocks run in order in one namespace (a page is one story: a later block uses
    what an earlier one made), as a script run as ``__main__``."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    main = ModuleType("__main__")
    main.__dict__.update(namespace)
    namespace = main.__dict__
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main  # dataclasses and pydantic look their module up there
    try:
        for block in python_blocks(page):
            if block.not_run is None:
                _run(block.code, namespace, block.where)
    finally:
        sys.modules["__main__"] = saved


# -- the README's quickstart, as a user runs it ---------------------------------------------------
def _cli_env(redis_url: str, **more: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("ANTRE_")}
    return {**keep, "ANTRE_REDIS_URL": redis_url, "PYTHONPATH": "", **more}


def _shell(line: str, cwd: Path, env: dict[str, str], timeout: float = 240) -> str:
    """A command line of the docs, with ``antre`` and ``python`` those of this interpreter.
    ``antre result --wait S`` waits longer here than the page says (it returns at the job's
    end, so only a loaded machine's slowness makes a difference)."""
    words = shlex.split(re.sub(r"--wait \d+", "--wait 180", line))
    if words[0] == "antre":
        words = [sys.executable, "-m", "antre_cli", *words[1:]]
    elif words[0] == "python":
        words = [sys.executable, *words[1:]]
    done = subprocess.run(words, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _commands(page: Path) -> list[str]:
    """The command lines of the page's ``sh`` blocks, without their comments."""
    return [ln.split("  #")[0].strip() for b in blocks(page) if b.lang == "sh"
            for ln in b.code.splitlines() if ln.strip() and not ln.startswith("#")]


def _command(page: Path, start: str) -> str:
    found = [c for c in _commands(page) if c.startswith(start)]
    assert found, f"{page.name} has no command starting {start!r}"
    return found[0]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_readme_quickstart_runs_one_job_and_its_worker_enqueues_none(
        redis_url: str, r: Any, tmp_path: Path) -> None:
    """Saved as ``myapp/jobs.py``: ``python -m myapp.jobs`` enqueues one job, ``antre worker``
    (here ``--burst``) imports the module without enqueuing another, and runs it."""
    readme = REPO / "README.md"
    (code,) = [b.code for b in python_blocks(readme)]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(code)
    env = _cli_env(redis_url)
    _shell(_command(readme, "python -m myapp.jobs"), tmp_path, env)
    _shell(_command(readme, "antre worker myapp.jobs:app") + " --burst", tmp_path, env)
    out = _shell(_command(readme, "antre result receipt:42"), tmp_path, env)
    assert out.startswith("completed") and '"sent_to": "a@example.org"' in out, out
    stats = ReadModels(r).queue_info("default").stats
    assert stats.get("acked") == 1, stats  # one job: the worker's import enqueued nothing


# -- the tutorial, followed step by step ----------------------------------------------------------
TUTORIAL = REPO / "docs" / "tutorial.md"
SHOWN_ID = "fa368bddad87b89f71172e3f07fb7ece"  # the dead job's id in the tutorial's outputs


def _worker(tmp_path: Path, env: dict[str, str], procs: list[Any]) -> subprocess.Popen[bytes]:
    words = shlex.split(_command(TUTORIAL, "antre worker shop_jobs:app"))
    proc = subprocess.Popen([sys.executable, "-m", "antre_cli", *words[1:]], cwd=tmp_path,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(proc)
    return proc


@pytest.mark.slow
@pytest.mark.timeout(600)  # Python starts a dozen times, and the retries wait their backoff
def test_the_tutorial_runs_a_job_dead_letters_a_failure_and_replays_it_after_the_fix(
        redis_url: str, tmp_path: Path, procs: list[Any]) -> None:
    """The tutorial's file and commands, in its order, on a real Redis and SQLite, with a real
    worker: a job completes; order 13 fails three times and is dead; the fix as the page
    writes it, a restarted worker, the replay: completed."""
    first, fix = [b.code for b in python_blocks(TUTORIAL)]
    (tmp_path / "shop_jobs.py").write_text(first)
    env = _cli_env(redis_url, ANTRE_DATABASE_URL=f"sqlite:///{tmp_path / 'antre.db'}",
                   ANTRE_LOG_FORMAT="text")
    from antre.stores.sql import make_engine, migrate
    engine = make_engine(env["ANTRE_DATABASE_URL"])
    migrate(engine)  # what the demo's start did to its database
    engine.dispose()
    worker = _worker(tmp_path, env, procs)

    _shell(_command(TUTORIAL, "python -c \"from shop_jobs import send_receipt; print(send_receipt.enqueue(order_id=1))"), tmp_path, env)
    out = _shell(_command(TUTORIAL, "antre result receipt:1"), tmp_path, env)
    assert out.startswith("completed") and '"sent_to": "ada@example.org"' in out, out

    dead_id = _shell(_command(TUTORIAL, "python -c \"from shop_jobs import send_receipt; print(send_receipt.enqueue(order_id=13))"), tmp_path, env).strip()
    out = _shell(_command(TUTORIAL, "antre result receipt:13"), tmp_path, env)
    assert out.startswith(f"failed (job {dead_id})"), out
    assert "attempts exhausted (3/3); last error: AttributeError" in out, out
    listed = _shell(_command(TUTORIAL, "antre dlq --queue tutorial list"), tmp_path, env)
    assert listed.startswith("1 dead in tutorial") and dead_id in listed, listed
    shown = _shell(_command(TUTORIAL, "antre dlq --queue tutorial show").replace(SHOWN_ID, dead_id),
                   tmp_path, env)
    assert '"order_id": 13' in shown and "shop_jobs.py" in shown, shown

    fixed_line = next(ln for ln in fix.splitlines() if "orders@example.org" in ln)
    fixed = re.sub(r"^    address = ADDRESSES\[order_id\]$", fixed_line, first, flags=re.M)
    assert fixed != first and all(ln in fixed.splitlines() for ln in fix.splitlines()), \
        "the tutorial's fix is not its first file with one line changed"
    (tmp_path / "shop_jobs.py").write_text(fixed)
    worker.terminate()
    assert worker.wait(120) == 0
    _worker(tmp_path, env, procs)

    replay = _command(TUTORIAL, "antre dlq --queue tutorial replay")
    assert SHOWN_ID in replay
    out = _shell(replay.replace(SHOWN_ID, dead_id), tmp_path, env)
    assert "replay: 1 of 1 jobs" in out, out
    out = _shell(_command(TUTORIAL, "antre result receipt:13"), tmp_path, env)
    assert out.startswith(f"completed (job {dead_id})"), out
    assert '"sent_to": "orders@example.org"' in out, out
