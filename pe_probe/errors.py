"""Exceptions that separate bad user input (exit code 2) from internal errors (exit code 1)."""

import argparse
import contextlib
import errno
import os
import re
import sys
import unicodedata
from typing import Any, Callable, Iterator, NoReturn


class InputError(ValueError):
    """Bad input from the user: the message is one line that names the problem and the fix.

    The CLI prints it without a traceback and exits with code 2, as ``PROG: error: MESSAGE``: ``prog`` names
    the command whose usage was wrong (argparse errors: ``pe-probe train``), else ``pe-probe``.
    """

    def __init__(self, message: str = "", prog: str | None = None):
        super().__init__(message)
        self.prog = prog


class NoPETableError(InputError):
    """The checkpoint records that its positional encoding is not a table of positions (``pe_params``
    is ``[]``: relative, RoPE or no PE), or a model's config or tensor names show it has none: there is nothing
    to analyse unless a tensor is named. `pe_probe.compare.compare` skips such sources, saying ``reason``
    (a short phrase: "its pe_params is empty", "rotary position embeddings, from model_type llama")."""

    def __init__(self, message: str = "", prog: str | None = None, reason: str = "no PE table"):
        super().__init__(message, prog)
        self.reason = reason


def first_line(e: BaseException) -> str:
    """An exception's first message line (its type name when it has none): for one-line errors."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# OSErrors that mean a path the user gave cannot be used as given, and what to do about each
_PATH_FIXES = {
    errno.EACCES: "check its permissions, or run as a user who may read (or write) it",
    errno.EPERM: "check its permissions, or run as a user who may read (or write) it",
    errno.ENAMETOOLONG: "a name in the path is longer than the file system allows (255 bytes); use a shorter one",
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "a part of the path is a file, not a folder; check the path",
    errno.EISDIR: "it is a folder; pass a file",
    errno.ELOOP: "the path loops through symbolic links; check them",
    errno.EROFS: "the file system is read-only; choose a folder on a writable one",
}


def os_error_message(exc: OSError) -> str | None:
    """One line for an OSError caused by a path the user gave (no permission, a name too long, ...), naming
    the path and the fix; None for other OS errors (a full disk, an I/O error), which are not bad input."""
    fix = _PATH_FIXES.get(exc.errno)
    if fix is None:
        return None
    shown = show_path(exc.filename) if exc.filename is not None else "a path"
    return f"{shown}: {exc.strerror or 'cannot be used'}; {fix}"


def to_devnull(stream: str) -> None:
    """Point ``sys.stdout`` or ``sys.stderr`` (``stream``) at the null device: after the pipe behind it closed
    (``| head``), nothing more can be shown there, and Python's exit must not fail flushing it."""
    try:
        setattr(sys, stream, open(os.devnull, "w"))
    except OSError:
        pass


def show_path(path: str | os.PathLike) -> str:
    """A path as it should appear in a one-line message: as is, or repr()-quoted when it holds a newline
    or another control character (C0, DEL, C1 such as the 8-bit escape \x9b, or a Unicode line or paragraph
    separator), which would cut, garble or colour the message; or a byte that is not UTF-8 (a surrogate),
    which a UTF-8 terminal or file could not take."""
    text = os.fspath(path)
    return repr(text) if any(unicodedata.category(c) in ("Cc", "Zl", "Zp", "Cs") for c in text) else text


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in "..." when cut: a value quoted in a one-line message
    (a malformed CSV cell, a weight's odd key) stays readable however long the input was."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def utf8_name(path: str | os.PathLike) -> bool:
    """Whether a path's name is UTF-8: bytes that are not are kept by Python as surrogates, which torch's C++
    file reader and the reports' UTF-8 files cannot take."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_utf8_out(out: str | os.PathLike, flag: str = "--out") -> None:
    """Refuse an output folder (given as ``flag``) whose name is not UTF-8 (`utf8_name`), before any work:
    what is written there could not be read back by pe-probe or named in its reports."""
    if not utf8_name(out):
        raise InputError(f"{flag} {show_path(out)} is not a UTF-8 name; choose a name in UTF-8")


def torch_load_reason(e: BaseException) -> str:
    """torch's reason for refusing a file, as one plain line: no terminal colour codes, and never its
    advice to retry with weights_only=False (which would run whatever code an untrusted file holds)."""
    text = _ANSI.sub("", first_line(e))
    if "weights only load failed" in text.lower() or "weights_only" in text:
        return "torch's weights-only reader refused it"
    if "%ld" in text:  # torch's legacy reader prints its format string with the numbers run together
        return text.split(":")[0].strip() + " (the file is truncated or edited)"
    return text


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr (exit code 2), not a usage dump: the
    project's rule for bad input, shared by ``pe-probe`` and the ``python -m analyses...`` scripts."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        line = f"{message.splitlines()[0] if message else 'bad input'}"
        line = line.encode("utf-8", "backslashreplace").decode("utf-8")  # a raw non-UTF-8 path: \udcff, no crash
        sys.stderr.write(f"{self.prog}: error: {line} (see {self.prog} --help)\n")
        raise SystemExit(2)


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C: a KeyboardInterrupt, or the SystemError numba-compiled loops (SMACOF,
    UMAP) wrap one in."""
    return isinstance(exc, KeyboardInterrupt) or (
        isinstance(exc, SystemError) and isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt))


def script_exit(main: Callable[[], int], prog: str) -> NoReturn:
    """Run a ``python -m analyses...`` command's ``main`` and exit with its code; a Ctrl-C prints one line,
    ``PROG: interrupted``, and exits 130 (as ``pe-probe`` does) instead of a traceback of whatever ran."""
    try:
        code = main()
    except BaseException as exc:
        if not interrupted(exc):
            raise
        sys.stderr.write(f"{prog}: interrupted\n")
        code = 130
        ignore_ctrl_c_while_exiting()
    raise SystemExit(code)


def ignore_ctrl_c_while_exiting() -> None:
    """After ``interrupted`` was said: further Ctrl-Cs (a held key, several presses) are ignored while the process
    exits, so they do not interrupt its exit handlers (matplotlib's, multiprocessing's), each of which would print
    an ignored-exception traceback under the one-line message. Only for processes about to exit."""
    import signal

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass


_PENDING_INTERRUPT: list[int] = []  # Ctrl-Cs received under `ctrl_c_kept` and not yet acted on


@contextlib.contextmanager
def ctrl_c_kept() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt as usual and is remembered: raised inside a callback (numba's compiler
    through ctypes, a weakref callback, a pybind11 conversion) Python swallows it and the run went on to write its
    report with exit 0. `stop_if_interrupted` (called before a report is committed) and the end of this block then
    stop all the same; the swallowed exception is not printed as "Exception ignored". Main thread only."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:  # ignored (cmd &, nohup) or handled
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        _PENDING_INTERRUPT.append(signum)
        raise KeyboardInterrupt

    def quiet(unraisable: Any) -> None:
        if not (_PENDING_INTERRUPT and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            hook(unraisable)

    previous = signal.signal(signal.SIGINT, handler)
    hook, sys.unraisablehook = sys.unraisablehook, quiet
    try:
        yield
    except Exception as exc:  # a Ctrl-C that a C++ binding turned into another error (pybind11: a TypeError)
        if _PENDING_INTERRUPT:
            _PENDING_INTERRUPT.clear()
            raise KeyboardInterrupt from exc
        raise
    except BaseException:
        _PENDING_INTERRUPT.clear()
        raise
    finally:
        sys.unraisablehook = hook
        signal.signal(signal.SIGINT, previous)
    stop_if_interrupted()


def stop_if_interrupted() -> None:
    """Raise KeyboardInterrupt for a Ctrl-C that a callback swallowed (see `ctrl_c_kept`)."""
    if _PENDING_INTERRUPT:
        _PENDING_INTERRUPT.clear()
        raise KeyboardInterrupt
