"""nvrx-qual's pytest plugin: a repository's own tests launch a training job under NVRx's
launcher with a fault, and judge its recovery as `nvrx-qual run` does.

Installed with nvrx-qual, it is the `pytest11` entry point `pytest_nvrx_qual` (pytest loads it
into every session of the environment; `-p no:pytest_nvrx_qual` leaves it out). Its public
options and fixtures (docs/testing.md, "The pytest plugin in your own repository"):

- `--work-dir DIR`, `--repeat N`; the ini option `nvrx_launcher_dirs` and
  $NVRX_QUAL_LAUNCHER_DIRS (more side-by-side NVRx installs);
- `qual_run`: `qual_run("kill")` launches the reference workload with a killed rank and returns
  its judged Outcome;
- `scenarios` (the session's ScenarioRunner: each Scenario launched once, its Outcome shared),
  `work_dir`, `run_allocator`, `fresh_run`, `repeat_index`;
- the launchers, found as the command line finds them: `installed_launchers`, `one_launcher`,
  `newest_launcher`, `log_routing_launcher`, and `nvrx_target` (a test that asks for it runs
  under each launcher).

A good citizen of a session that does not use it: importing this module imports nothing but
pytest and the standard library. nvrx-qual's library, the top-level package `harness`, is
imported only when a test asks for one of these fixtures (or for `nvrx_target`), or when a
module imports pytest_nvrx_qual.runs; it is then loaded from beside this plugin even where the
user's repository has a `harness` package of its own earlier on sys.path (`load_harness`).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

# Where the distribution put its packages: this plugin and, beside it, the library `harness`
# (site-packages, or the checkout of an editable install or of this repository).
HOME = Path(__file__).resolve().parent.parent
LIBRARY = "harness"
LAUNCHER_DIRS_INI = "nvrx_launcher_dirs"
LAUNCHER_DIRS_ENV = "NVRX_QUAL_LAUNCHER_DIRS"


class HarnessConflict(ImportError):
    """Another package named `harness` (a repository's own) is imported in this session."""


def load_harness() -> None:
    """Imports nvrx-qual's own `harness` (HOME/harness), also where a package of that name of the
    user's repository comes first on sys.path (pytest puts the repository's root there). A
    session holds one module of a name: when another `harness` is imported already,
    HarnessConflict says which, and what to do."""
    ours = (HOME / LIBRARY).resolve()
    loaded = sys.modules.get(LIBRARY)
    if loaded is None:
        sys.path.insert(0, str(HOME))
        try:
            importlib.import_module(LIBRARY)
        finally:
            sys.path.remove(str(HOME))  # the first occurrence: the one inserted above
        loaded = sys.modules[LIBRARY]
    where = getattr(loaded, "__file__", None)
    where = Path(where).resolve() if where else None
    if where is None or where.parent != ours:
        raise HarnessConflict(
            f"nvrx-qual's fixtures need nvrx-qual's own package `harness` ({ours}), but this session imported another "
            f"`harness` first ({where or 'a namespace package'}), your repository's: a Python session holds one "
            "package of a name. Run the tests that ask for nvrx-qual's launching fixtures in a pytest session that "
            "does not import your `harness` (their own directory, run on its own), or rename yours "
            "(docs/testing.md, 'A package of yours named harness')")


def _library(module: str):
    """A module of nvrx-qual's library (or of this plugin's part built on it), imported on first
    need; a test that cannot have it fails, saying why."""
    try:
        load_harness()
    except HarnessConflict as exc:
        pytest.fail(str(exc), pytrace=False)
    return importlib.import_module(module)


def _runs():
    return _library("pytest_nvrx_qual.runs")


# ---------------------------------------------------------------------------- options and hooks


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_nvrx_qual import hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nvrx-qual", "recovery qualification (nvrx-qual)")
    group.addoption(
        "--work-dir",
        default=None,
        help="where run directories are created (runs/<run-id>/); default: pytest's temp dir",
    )
    group.addoption(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run every test that uses a launched scenario N times, each repeat launching afresh with new run IDs "
             "(test ids get repeat1..repeatN); the pass rate per criterion and p50/p95/max of every latency go to "
             "WORK_DIR/repeats/pytest-<time>-<hex>/summary.{json,md}",
    )
    parser.addini(LAUNCHER_DIRS_INI, type="linelist", default=[".nvrx/*"],
                  help="globs (relative to the rootdir) of side-by-side NVRx installs to test against, besides the "
                       "ones `nvrx-qual run` finds (pip's, and .nvrx/* of the working directory and of nvrx-qual's "
                       f"checkout); ${LAUNCHER_DIRS_ENV} adds more")


def pytest_configure(config: pytest.Config) -> None:
    repeats = config.getoption("--repeat")
    if repeats < 1:
        raise pytest.UsageError(f"--repeat {repeats} must be 1 or more: give the number of runs, e.g. --repeat 5")


_LAUNCHERS = pytest.StashKey[list]()
_SCENARIO_RUNNER = pytest.StashKey[Any]()
_SUMMARY = pytest.StashKey[Any]()  # the SessionSummary written, or why it could not be
_WORKER_SUMMARY = "nvrx_qual_summary_lines"  # (text, red, green) lines an xdist worker hands its controller
_WORKER_LINES = pytest.StashKey[list]()


def installed_launchers_of(config: pytest.Config) -> list:
    """Every NVRx launcher the session tests against (NvrxTarget), oldest first, found once on
    first use as `nvrx-qual run` finds them (harness.machine.nvrx.installed: pip's, and the
    side-by-side installs in .nvrx/ of the working directory and of nvrx-qual's checkout), plus
    those of the nvrx_launcher_dirs globs under the rootdir and of $NVRX_QUAL_LAUNCHER_DIRS."""
    if _LAUNCHERS not in config.stash:
        nvrx = _library("harness.machine.nvrx")
        dirs: list[Path] = []
        for pattern in config.getini(LAUNCHER_DIRS_INI):
            dirs += sorted(p for p in config.rootpath.glob(pattern) if p.is_dir())
        dirs += [Path(p) for p in os.environ.get(LAUNCHER_DIRS_ENV, "").split(os.pathsep) if p]
        config.stash[_LAUNCHERS] = nvrx.installed(extra=tuple(dirs))
    return config.stash[_LAUNCHERS]


def launcher_ids(targets: list) -> list[str]:
    return [f"nvrx-{t.version}" for t in targets]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "nvrx_target" in metafunc.fixturenames:
        targets = installed_launchers_of(metafunc.config)
        metafunc.parametrize("nvrx_target", targets, ids=launcher_ids(targets), scope="session")
    repeats = metafunc.config.getoption("--repeat")
    # Every test whose fixtures reach `scenarios` depends on `repeat_index`. Session scope: the
    # tests of one repeat share its launches, and pytest runs the repeats one after another.
    if repeats > 1 and "repeat_index" in metafunc.fixturenames:
        width = len(str(repeats))
        metafunc.parametrize("repeat_index", range(repeats), ids=[f"repeat{i + 1:0{width}d}" for i in range(repeats)],
                             scope="session")


def _xdist_worker(config: pytest.Config) -> bool:
    """True in a pytest-xdist worker (where the tests are collected and run)."""
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """summary.json / summary.md over every scenario launched, whether or not --repeat was
    given: one file in CI names each scenario's verdict, failing criterion and latency. Under
    pytest-xdist each worker writes the summary of its own launches and hands its lines to the
    controller, which prints them (pytest_testnodedown)."""
    scenarios = session.config.stash.get(_SCENARIO_RUNNER, None)
    if scenarios is None or not scenarios.launched:
        return
    runs = _runs()
    try:
        written = runs.write_session_summary(scenarios)
    except OSError as exc:  # a full or read-only work dir must not hide the test results
        written = f"could not write the summary under {scenarios.work_dir}: {exc}"
    session.config.stash[_SUMMARY] = runs.summary_lines(written)
    if _xdist_worker(session.config):
        session.config.workeroutput[_WORKER_SUMMARY] = session.config.stash[_SUMMARY]


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: called on the controller as a worker ends
def pytest_testnodedown(node, error) -> None:
    lines = getattr(node, "workeroutput", {}).get(_WORKER_SUMMARY)
    if lines:
        node.config.stash.setdefault(_WORKER_LINES, []).append((node.gateway.id, lines))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    written = config.stash.get(_SUMMARY, None)
    sections = [("", written)] if written is not None else []
    sections += sorted(config.stash.get(_WORKER_LINES, []))  # one per xdist worker, gw0 first
    if not sections:
        return
    terminalreporter.section("nvrx-qual scenarios")
    for worker, lines in sections:
        if worker:
            terminalreporter.line(f"launched by xdist worker {worker}:")
        for text, red, green in lines:
            terminalreporter.line(text, red=red, green=green)


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def work_dir(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where run directories go: --work-dir (e.g. shared storage for multi-node), else a temp dir.
    Runs are kept after the session for inspection."""
    given = pytestconfig.getoption("--work-dir")
    if given:
        path = Path(given).expanduser().absolute()
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("nvrx-qual-work")


@pytest.fixture(scope="session")
def run_allocator(work_dir: Path):
    """Fresh run IDs under the work dir (pytest_nvrx_qual.runs.RunAllocator)."""
    return _runs().RunAllocator(work_dir)


@pytest.fixture
def fresh_run(request: pytest.FixtureRequest, run_allocator) -> tuple[Path, str]:
    """(work dir, a run ID no earlier run used) for this test."""
    return run_allocator.work_dir, run_allocator.new_run_id(request.node.name)


@pytest.fixture(scope="session")
def repeat_index() -> int:
    """0-based repeat of the test under --repeat N (parametrized then); 0 without it."""
    return 0


@pytest.fixture(scope="session")
def scenario_runner(run_allocator, pytestconfig: pytest.Config):
    """Every launch of the session, whichever repeat; summarized at the session's end."""
    scenarios = _runs().ScenarioRunner(run_allocator, repeats=pytestconfig.getoption("--repeat"))
    pytestconfig.stash[_SCENARIO_RUNNER] = scenarios
    pytestconfig.hook.pytest_nvrx_qual_runner(runner=scenarios)
    return scenarios


@pytest.fixture(scope="session")
def scenarios(scenario_runner, repeat_index: int):
    """Launches a Scenario once per session (once per repeat under --repeat N) and hands its
    Outcome (plan, launch, verdict, triage) to every test of that repeat that asks."""
    return scenario_runner.for_repeat(repeat_index)


@pytest.fixture(scope="session")
def installed_launchers(pytestconfig: pytest.Config) -> list:
    """Every NVRx launcher found (NvrxTarget), oldest first (installed_launchers_of)."""
    return installed_launchers_of(pytestconfig)


@pytest.fixture(scope="session")
def one_launcher(installed_launchers: list):
    """The newest launcher found, whatever its version: the one `nvrx-qual run` picks when told
    none (harness.machine.nvrx.newest, from the same working directory)."""
    if not installed_launchers:
        pytest.skip("no NVRx launcher installed: pip install nvidia-resiliency-ext")
    return installed_launchers[-1]


@pytest.fixture(scope="session")
def newest_launcher(installed_launchers: list):
    """The newest launcher, when it is NVRx >= 0.7.0 (its no-progress rule and exit code, which
    the fault matrix and the fault kinds judge); the test is skipped, naming the install
    command, when it is older or there is none."""
    if not installed_launchers:
        pytest.skip("no NVRx launcher installed: pip install nvidia-resiliency-ext")
    target = installed_launchers[-1]
    if not target.has_no_restart_exit_code:
        pytest.skip(f"needs NVRx >= 0.7.0 (its no-progress rule); newest found is {target.version}: "
                    "tools/install-nvrx-target.sh 0.7.0 .nvrx/0.7.0")
    return target


@pytest.fixture(scope="session")
def log_routing_launcher(installed_launchers: list):
    """The newest launcher that writes every node's logs and rendezvous node ids (NVRx >= 0.6);
    the test is skipped, naming the install command, when there is none."""
    found = [t for t in installed_launchers if t.routes_logs]
    if not found:
        pytest.skip("needs NVRx >= 0.6 (its launcher writes every node's logs and names nodes on its "
                    "rendezvous lines): tools/install-nvrx-target.sh 0.7.0 .nvrx/0.7.0")
    return found[-1]


@pytest.fixture
def qual_run(scenarios, one_launcher) -> Callable[..., Any]:
    """`qual_run(fault="kill", *, workload="reference", nvrx=None, name="", workload_args=(), **knobs)`
    launches one run as `nvrx-qual run` would (the newest launcher found, unless `nvrx` names
    one; the automatic baseline: a qualified uninterrupted run of the same configuration in the
    work dir, else its twin launched first) and returns its judged Outcome (`.verdict`,
    `.run_dir`, `.launch`, `.triage`). `knobs` are `nvrx-qual run`'s flags by their RunSpec
    field names (train_iters=40, fault_at="in-save", baseline="none", ...), `workload_args` what
    follows `--`. The same arguments in one session launch once and share the Outcome."""
    runs = _runs()

    def launch(fault: str = "kill", *, workload: str = "reference", nvrx=None, name: str = "",
               workload_args: tuple[str, ...] | list[str] = (), **knobs: Any):
        scenario = runs.scenario_of(fault, nvrx or one_launcher, workload=workload, name=name,
                                    workload_args=workload_args, knobs=knobs)
        return scenarios.outcome(scenario)

    return launch
