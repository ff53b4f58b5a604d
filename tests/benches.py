"""Running a benchmark's ``main()`` in the test process, as ``python -m`` would."""

from __future__ import annotations

import contextlib
import importlib
import io
import sys


def printed_by(module: str, *args: str) -> str:
    """What ``python -m <module> <args>`` prints, run in this process: the
    benchmark's ``main()`` with those arguments, as its ``__main__`` block calls
    it. An exception (argparse's exit too) fails the test with its traceback."""
    argv, printed = sys.argv, io.StringIO()
    sys.argv = [module, *args]
    try:
        with contextlib.redirect_stdout(printed):
            importlib.import_module(module).main()
    finally:
        sys.argv = argv
    return printed.getvalue()
