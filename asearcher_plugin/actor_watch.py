"""Stops a run whose actor failed to start, instead of leaving OpenRLHF waiting for it forever.

OpenRLHF's `train()` creates its rollout engines and trainer actors and then waits on them together: when a
rollout engine dies in its constructor (an agent file that fails to import, an agent config that refuses to
start, a KB unreachable from that node), the policy actor waits in the weight-sync rendezvous for an engine
that never comes, and the run hangs with no error on the driver. `ActorWatch` polls Ray's actor table from the
driver; the first actor that died in its constructor ends the run with that actor's own exception.
"""

from __future__ import annotations

import os
import signal
import threading


def failed_creations() -> list[tuple[str, str]]:
    """(class name, last line of the exception) of every actor of the running Ray job that died in its
    constructor (a shared cluster's other jobs are not looked at)."""
    import ray
    from ray._private import state  # the GCS actor table; the public state API needs the dashboard

    job = ray.get_runtime_context().get_job_id()
    found = []
    for actor in state.actors().values():
        if actor.get("JobID") != job:
            continue
        cause = actor.get("DeathCause")
        if cause is not None and cause.HasField("creation_task_failure_context"):
            text = cause.creation_task_failure_context.formatted_exception_string.strip().splitlines()
            name = (actor.get("ActorClassName") or "an actor").rsplit(".", 1)[-1]  # no `f.<locals>.` prefix
            found.append((name, text[-1] if text else "no exception text"))
    return found


class ActorWatch(threading.Thread):
    """While `train()` runs: on the first actor that failed to start, record why and interrupt the main thread.

    Start and stop it from the main thread. A process started in the background by a shell (`nohup ... &`) inherits
    SIGINT ignored, and Python then never raises KeyboardInterrupt: while the watch runs, SIGINT gets Python's own
    handler, and the ignoring is put back when it stops."""

    def __init__(self, interval: float = 5.0):
        super().__init__(name="asearcher-actor-watch", daemon=True)
        self.interval, self.failure = interval, None
        self._halt = threading.Event()
        self._ignored = False

    def start(self) -> None:
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self._ignored = True
        super().start()

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            try:
                found = failed_creations()
            except Exception:  # noqa: BLE001 - a watch that cannot read the table must not end the run
                continue
            if found:
                name, error = found[0]
                self.failure = f"{name} failed to start: {error}"
                os.kill(os.getpid(), signal.SIGINT)  # ray.get in the main thread returns on a signal
                return

    def stop(self) -> None:
        self._halt.set()
        if self._ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            self._ignored = False
