"""A run whose actor dies in its constructor ends with that actor's exception instead of hanging."""

import signal
import time

import pytest

ray = pytest.importorskip("ray")


@pytest.fixture()
def local_ray():
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_a_failed_constructor_interrupts_the_driver_with_its_exception(local_ray):
    from asearcher_plugin.actor_watch import ActorWatch, failed_creations

    @ray.remote(num_cpus=0)
    class Fine:
        def ping(self):
            return 1

    @ray.remote(num_cpus=0)
    class BrokenAgentFile:
        def __init__(self):
            raise ValueError("agent file broken: no AgentExecutor")

    fine = Fine.remote()
    ray.get(fine.ping.remote())
    ray.kill(fine)  # an intended kill is not a failure
    assert failed_creations() == []
    broken = BrokenAgentFile.remote()  # held, as OpenRLHF holds its engines
    deadline = time.time() + 240  # a worker process has to start and fail first
    while not failed_creations() and time.time() < deadline:
        time.sleep(0.5)
    assert failed_creations() == [("BrokenAgentFile", "ValueError: agent file broken: no AgentExecutor")]
    watch = ActorWatch(interval=0.2)
    watch.start()
    try:
        with pytest.raises(KeyboardInterrupt):  # what the launcher turns into one error line
            deadline = time.time() + 60
            while time.time() < deadline:
                time.sleep(0.1)
    finally:
        watch.stop()
    assert watch.failure == "BrokenAgentFile failed to start: ValueError: agent file broken: no AgentExecutor"
    del broken


def test_the_watch_stays_quiet_while_actors_are_healthy(local_ray):
    from asearcher_plugin.actor_watch import ActorWatch

    interrupted = []
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    try:
        watch = ActorWatch(interval=0.1)
        watch.start()
        time.sleep(1.0)
        watch.stop()
        watch.join(timeout=5)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not interrupted and watch.failure is None and not watch.is_alive()


def test_a_run_started_in_the_background_can_still_be_interrupted(local_ray):
    """`nohup asearcher train ... &`: the shell starts the process with SIGINT ignored."""
    from asearcher_plugin.actor_watch import ActorWatch

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        watch = ActorWatch(interval=60)
        watch.start()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # what the watch sends when an actor failed to start
            time.sleep(1.0)
        watch.stop()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # put back as it was
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_placement_group_that_cannot_be_placed_ends_the_run_with_what_it_asked(local_ray):
    """OpenRLHF waits in `ray.get(pg.ready())` for a placement group the cluster cannot hold; the watch ends it after
    the deadline and names what it asked for and what is free. A group that is placed is never reported."""
    from ray.util.placement_group import placement_group, remove_placement_group

    from asearcher_plugin.actor_watch import ActorWatch

    placed = placement_group([{"CPU": 1}])  # the local cluster has 1 CPU and no GPU
    ray.get(placed.ready(), timeout=60)
    watch = ActorWatch(interval=0.2, placement_timeout=1.5)
    watch.start()
    started = time.monotonic()
    try:
        too_big = placement_group([{"GPU": 1, "CPU": 1}] * 4, strategy="PACK")
        with pytest.raises(KeyboardInterrupt):
            ray.get(too_big.ready(), timeout=60)  # where OpenRLHF waits
    finally:
        watch.stop()
    waited = time.monotonic() - started
    assert waited >= 1.5, waited  # not before the deadline
    assert watch.failure.startswith("a placement group of 4 bundles (4 GPUs, PACK) has waited "), watch.failure
    assert "0 GPUs free of 0" in watch.failure and "ASEARCHER_PLACEMENT_TIMEOUT=1.5" in watch.failure
    remove_placement_group(too_big)
    remove_placement_group(placed)
