"""How the console script ends after a run of OpenRLHF's `train()` (RL or SFT): at once.

Finalising an interpreter that imported torch, vLLM, DeepSpeed and OpenRLHF took 2.5 s of every CPU run's wall time
(the test suite's runs, measured) and does nothing a run needs: Ray is shut down and the files are written by then.
Only the console script leaves this way (`asearcher_plugin.cli.main`), so a caller in the same process, a test
invoking the command in-process for one, keeps its interpreter.
"""

from __future__ import annotations

import logging
import os
import sys

_run_ended = False


def note_run_ended() -> None:
    """Called once a run's actors are stopped and its files written."""
    global _run_ended
    _run_ended = True


def leave_after_run(code: int | str | None) -> None:
    """Ends the process with `code` (SystemExit's) when a run ended in it; returns otherwise."""
    if not _run_ended:
        return
    if isinstance(code, str):  # SystemExit("message") prints its message and exits 1
        print(code, file=sys.stderr)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)
