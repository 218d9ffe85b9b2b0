"""Stops a run whose actor failed to start, instead of leaving OpenRLHF waiting for it forever.

OpenRLHF's `train()` creates its rollout engines and trainer actors and then waits on them together: when a
rollout engine dies in its constructor (an agent file that fails to import, an agent config that refuses to
start, a KB unreachable from that node), the policy actor waits in the weight-sync rendezvous for an engine
that never comes, and the run hangs with no error on the driver. `ActorWatch` polls Ray's actor table from the
driver; the first actor that died in its constructor ends the run with that actor's own exception.

The same wait happens when a placement group asks for more than the cluster can give (GPUs held by another job, a
node gone, a tensor-parallel engine that no node can hold whole): `ray.get(pg.ready())` never returns. A placement
group of this job still pending after `ASEARCHER_PLACEMENT_TIMEOUT` seconds ends the run, with what it asked for and
what the cluster has free.
"""

from __future__ import annotations

import os
import signal
import threading
import time

PLACEMENT_TIMEOUT_ENV = "ASEARCHER_PLACEMENT_TIMEOUT"  # seconds a placement group may stay pending (default 600)


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


def pending_placements() -> dict[str, str]:
    """{placement group id: what it asks for} of every placement group of the cluster not yet placed (Ray's table
    names no job: the watch looks only at the ones that appear while it runs)."""
    import ray

    out = {}
    for pg_id, pg in ray.util.placement_group_table().items():
        if pg.get("state") != "PENDING":
            continue
        bundles = list((pg.get("bundles") or {}).values())
        gpus = sum(b.get("GPU", 0) for b in bundles)
        out[pg_id] = f"{len(bundles)} bundles ({gpus:g} GPUs, {pg.get('strategy', '?')})"
    return out


def free_gpus() -> str:
    import ray

    return f"{ray.available_resources().get('GPU', 0):g} GPUs free of {ray.cluster_resources().get('GPU', 0):g}"


class ActorWatch(threading.Thread):
    """While `train()` runs: on the first actor that failed to start, record why and interrupt the main thread.

    Start and stop it from the main thread. A process started in the background by a shell (`nohup ... &`) inherits
    SIGINT ignored, and Python then never raises KeyboardInterrupt: while the watch runs, SIGINT gets Python's own
    handler, and the ignoring is put back when it stops."""

    def __init__(self, interval: float = 5.0, placement_timeout: float | None = None):
        super().__init__(name="asearcher-actor-watch", daemon=True)
        self.interval, self.failure = interval, None
        if placement_timeout is None:
            placement_timeout = float(os.environ.get(PLACEMENT_TIMEOUT_ENV, "600"))
        self.placement_timeout = placement_timeout
        self._before: set[str] = set()  # placement groups pending before the run: not its own
        self._since: dict[str, float] = {}
        self._halt = threading.Event()
        self._ignored = False

    def start(self) -> None:
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self._ignored = True
        try:
            self._before = set(pending_placements())
        except Exception:  # noqa: BLE001 - no table to read: every pending group counts as the run's
            self._before = set()
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
            else:
                self.failure = self._placement_overdue()
            if self.failure:
                os.kill(os.getpid(), signal.SIGINT)  # ray.get in the main thread returns on a signal
                return

    def _placement_overdue(self) -> str | None:
        try:
            pending = pending_placements()
        except Exception:  # noqa: BLE001 - as above
            return None
        now = time.monotonic()
        self._since = {pg: self._since.get(pg, now) for pg in pending if pg not in self._before}
        for pg, since in self._since.items():
            if now - since >= self.placement_timeout:
                return (
                    f"a placement group of {pending[pg]} has waited {now - since:.0f} s ({PLACEMENT_TIMEOUT_ENV}="
                    f"{self.placement_timeout:g}): the cluster has {free_gpus()}; the flags ask for more than it can "
                    "place (asearcher train RECIPE --dry-run counts them)"
                )
        return None

    def stop(self) -> None:
        self._halt.set()
        if self._ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            self._ignored = False
