"""The base of every error that is the user's to fix or know: printed plainly, no traceback;
and the exit codes every unet command shares."""

from __future__ import annotations

#: 0: done, nothing to report; 1: an error (or a refusal); 2: changes present (only with
#: --detailed-exitcode, as Terraform does).
EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2


class UnetError(Exception):
    pass


class UsageError(UnetError):
    """Arguments that do not go together (or name nothing): said as argparse says its own,
    `unet: error: ...`, exit 1, before anything starts."""


class Stopped(UnetError):
    """What stopped a command part way (`cause`, raised from it): the command line reports
    the cause as if it had been raised itself. engine.RunFailed adds how far the run got."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause
