"""Apply's phases without hosts: what the inspection asks to redo, how a failure is told, and that
every host ends its phase before a failure is raised (the lab suite, test_faults_lab, does it for real)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kubesmith.backends.apply import HostChanges, redo
from kubesmith.backends.phases import ApplyFailed, PausePoint, Phases, StepError, settled
from kubesmith.hostfile import HostFile
from kubesmith.transport.ssh import HostLost

FILES = [HostFile("/etc/a", 0o644, "root", "root", b"a"), HostFile("/etc/b", 0o644, "root", "root", b"b")]
MANIFEST = {f.path: f.sha256 for f in FILES}
NOTHING = HostChanges("h1", (), (), (), (), (), ())


def test_nothing_to_redo_when_the_last_apply_finished_with_this_runtime() -> None:
    assert redo(FILES, MANIFEST, MANIFEST, NOTHING, True, ()) == ()


def test_a_missing_runtime_and_leftovers_are_redone_though_every_file_matches() -> None:
    assert redo(FILES, MANIFEST, MANIFEST, NOTHING, False, ["/usr/local/lib/kubesmith/x.tmp"]) == ("runtime", "leftovers")


def test_an_apply_that_stopped_before_its_manifest_is_finished_again() -> None:
    """Files in place, manifest of an older apply (or none): enable and start were maybe never run."""
    assert redo(FILES, MANIFEST, {"/etc/a": FILES[0].sha256}, NOTHING, True, ()) == ("unfinished",)
    assert redo(FILES, MANIFEST, {}, NOTHING, True, ()) == ("unfinished",)
    changing = HostChanges("h1", ("/etc/a",), (), (), (), (), ())
    assert redo(FILES, {}, {}, changing, True, ()) == ()  # files change anyway: the whole change runs


def test_a_certificate_the_agent_renewed_since_is_not_an_unfinished_apply() -> None:
    """The host's agent renewed /etc/b after the last apply recorded it: apply keeps the host's copy,
    and the recorded hash differs by design. Another file off the record still is unfinished."""
    renewed = [FILES[0], HostFile("/etc/b", 0o644, "root", "root", b"b renewed")]
    on_host = {f.path: f.sha256 for f in renewed}
    assert redo(renewed, on_host, MANIFEST, NOTHING, True, (), frozenset({"/etc/b"})) == ()
    assert redo(renewed, on_host, MANIFEST, NOTHING, True, ()) == ("unfinished",)
    assert redo(renewed, on_host, {"/etc/b": MANIFEST["/etc/b"]}, NOTHING, True, (), frozenset({"/etc/b"})) == \
        ("unfinished",)


def test_a_failure_names_host_phase_and_cause_after_every_host_ended_its_phase() -> None:
    phases = Phases(("h1", "h2", "h3"))
    finished: list[str] = []

    # Why a stand-in: a connection lost on h2 exactly while h1 and h3 are mid-phase cannot be timed on
    # demand with real hosts (test_faults_lab loses real connections, at one point each).
    async def step(host: str) -> None:
        if host == "h2":
            raise HostLost("10.0.0.2: connection lost while running 'tar'")
        await asyncio.sleep(0.2)  # h1 and h3 are still busy when h2 fails
        finished.append(host)

    async def scenario() -> None:
        await settled(phases, ["h1", "h2"], lambda h: phases.run(h, "unpack", step(h)))

    with pytest.raises(ApplyFailed) as failed:
        asyncio.run(scenario())
    assert finished == ["h1"]
    lines = str(failed.value).splitlines()
    assert lines[0].startswith("h2: connection lost while unpacking the runtime; the host may have rebooted")
    assert lines[1:] == ["hosts:", "  h1: stopped after unpacking the runtime (consistent; apply again)",
                         "  h2: failed while unpacking the runtime", "  h3: untouched"]


def test_a_command_failure_is_told_as_such() -> None:
    phases = Phases(("h1",))

    async def fail() -> None:
        raise StepError("h1: `tar -xzf ...` failed (2): No space left on device")

    with pytest.raises(ApplyFailed, match=r"^h1: unpacking the runtime failed: `tar -xzf \.\.\.` failed \(2\)"):
        asyncio.run(settled(phases, ["h1"], lambda h: phases.run(h, "unpack", fail())))


def test_the_pause_point_waits_for_its_marker_on_its_host_only(tmp_path: Path) -> None:
    marker = tmp_path / "pause"
    pause = PausePoint.from_env({"KUBESMITH_TEST_PAUSE_AT": "wait-etcd-online:h2",
                                 "KUBESMITH_TEST_PAUSE_FILE": str(marker)})
    assert pause is not None and PausePoint.from_env({}) is None
    seen: list[str] = []

    async def scenario() -> None:
        await pause.reached("wait-etcd-online", "h1")  # another host: no pause
        task = asyncio.create_task(pause.reached("wait-etcd-online", "h2"))
        while not marker.exists():
            await asyncio.sleep(0.01)
        seen.append(marker.read_text().strip())
        await asyncio.sleep(0.1)
        assert not task.done()  # waits while the marker is there
        marker.unlink()
        await asyncio.wait_for(task, 5)
        await asyncio.wait_for(pause.reached("wait-etcd-online", "h2"), 1)  # once only

    asyncio.run(scenario())
    assert seen == ["wait-etcd-online h2"]
