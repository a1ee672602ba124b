"""The base of every error that is the user's to fix or know: printed plainly, no traceback."""


class UnetError(Exception):
    pass
