"""Exceptions that separate bad user input (exit code 2) from internal errors (exit code 1)."""


class InputError(ValueError):
    """Bad input from the user: the message is one line that names the problem and the fix.

    The CLI prints it without a traceback and exits with code 2.
    """
