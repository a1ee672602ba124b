"""The base of every error that is the user's to fix or know: printed plainly, no traceback;
and the exit codes every unet command shares."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Outcome

#: 0: done, nothing to report; 1: an error (or a refusal); 2: changes present (only with
#: --detailed-exitcode, as Terraform does).
EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2


class UnetError(Exception):
    pass


class RunFailed(UnetError):
    """A run against the backends (engine.run) that stopped before its end: `cause` says
    why, `outcome` how far it got (its locks' times, the plan it made, what it applied)."""

    def __init__(self, cause: BaseException, outcome: Outcome) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.outcome = outcome
