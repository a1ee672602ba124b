"""Where the time goes: one stage run once more under pyinstrument.

`profile_stage(stage, fx, work)` prepares the stage as a measurement would, runs its unet
command under pyinstrument (the session saved in `work`, and its call tree as text beside
it), and gives a `Profile`: the functions of unet's own code (reconciler/, managers/) by
inclusive time, a function counted once per stack when it recurses, and the functions of
any code by self time, the first 20 of each as shares of the run. Without pyinstrument, or
when the run leaves no session, there is no profile (None), and standard error says why.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from .fixture import Fixture, run_child, warm_page_cache
from .results import Profile
from .stages import SOURCES, STAGES
from .system import SOURCE, tool


def profile_stage(stage: str, fx: Fixture, work: Path) -> Profile | None:
    """Run one stage once more under pyinstrument; its call tree and its top costs."""
    with fx.backend(STAGES[stage].backend):
        session = _profiled_run(stage, fx, work)
    if session is None:
        return None
    text = _call_tree(session)
    return _profile(stage, fx.tenants, session, text)


def _profiled_run(stage: str, fx: Fixture, work: Path) -> Path | None:
    """The stage's command run under pyinstrument: the session it saved, None if none."""
    spec = STAGES[stage]
    if tool("pyinstrument") is None:
        print("pyinstrument is not installed (pip install -e '.[bench]'): no profile",
              file=sys.stderr)
        return None
    source = spec.sources[0]
    if spec.prepare is not None:
        spec.prepare(fx, SOURCES[source])
    warm_page_cache(spec.reads(fx))
    session = work / f"profile-{stage}-{fx.tenants}.pyisession"
    print(f"  profiling {stage} at {fx.tenants} tenants ...", end="", file=sys.stderr,
          flush=True)
    run = run_child([sys.executable, "-m", "pyinstrument", "-r", "session", "-o", str(session),
                     "-m", "unet.reconciler.cli", *spec.argv(fx, SOURCES[source])], fx, "profile")
    print(f" {run.wall_s:.1f}s", file=sys.stderr)
    if not session.is_file():
        print(f"the profile failed: {run.tail()}", file=sys.stderr)
        return None
    return session


def _call_tree(session: Path) -> Path:
    """The session's call tree as text, beside it (every frame shown, when pyinstrument
    can)."""
    text = session.with_suffix(".txt")
    subprocess.run([sys.executable, "-m", "pyinstrument", "--load", str(session), "-r", "text",
                    "--show-all", "-o", str(text)], check=False, capture_output=True)
    if not text.is_file():
        subprocess.run([sys.executable, "-m", "pyinstrument", "--load", str(session), "-r",
                        "text", "-o", str(text)], check=False, capture_output=True)
    return text


def _profile(stage: str, tenants: int, session: Path, text: Path) -> Profile | None:
    """The top costs of a saved session."""
    # pyinstrument is the [bench] extra's: imported only once a session was made with it
    from pyinstrument.session import Session

    root = Session.load(str(session)).root_frame()
    if root is None:
        return None
    total = root.time or 1.0
    inclusive: dict[str, float] = {}
    own: dict[str, float] = {}
    _add_times(root, frozenset(), inclusive, own)
    top_inclusive = sorted(((n, t / total) for n, t in inclusive.items() if _ours(n)),
                           key=lambda item: -item[1])[:20]
    top_self = sorted(((n, t / total) for n, t in own.items()), key=lambda item: -item[1])[:20]
    return Profile(stage, tenants, total, text, top_inclusive, top_self)


def _add_times(frame: Any, active: frozenset[str], inclusive: dict[str, float],
               own: dict[str, float]) -> None:
    """Add a frame's and its children's times to each function's inclusive and self time."""
    name = f"{frame.function} ({frame.file_path_short}:{frame.line_no})" \
        if frame.function else str(frame.identifier)
    if frame.function and not str(frame.function).startswith("["):
        if name not in active:  # recursion: count a function once per stack
            inclusive[name] = inclusive.get(name, 0.0) + frame.time
        own[name] = own.get(name, 0.0) + frame.total_self_time
    for child in frame.children:
        _add_times(child, active | {name}, inclusive, own)


def _ours(name: str) -> bool:
    """Whether a function of the profile is unet's own code."""
    return ("reconciler/" in name or "managers/" in name) and "bench.py" not in name \
        and "site-packages" not in name and str(SOURCE).split("/")[-1] != name
