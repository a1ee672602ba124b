"""The base of every error that is the user's to fix or know: printed plainly, no traceback;
and the exit codes every unet command shares."""

#: 0: done, nothing to report; 1: an error (or a refusal); 2: changes present (only with
#: --detailed-exitcode, as Terraform does).
EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2


class UnetError(Exception):
    pass
