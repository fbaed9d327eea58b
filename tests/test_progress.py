"""apply's progress: a live per-host view on a terminal (rich), timestamped lines elsewhere, nothing
with -q. The view is fed the same lines a log gets; here it is drawn on a real pseudo-terminal."""

from __future__ import annotations

import asyncio
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from kubesmith.backends.tally import FLEET_HOSTS, Tally
from kubesmith.cli import cli
from kubesmith.cli.progress import CLUSTER, Board, chosen_mode


def plain(text: str) -> str:
    """The view as words: terminal escapes and the table's rules gone."""
    return re.sub(r"[│┃]", " ", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text))


def test_lines_go_to_their_host_and_the_rest_to_the_cluster_row() -> None:
    board = Board(started=100.0)
    board.feed("h1: uploading 128 files", 101.0)
    board.feed("starting etcd-online.target on h1, h2", 102.0)
    board.feed("h2: etcd member back; all 3 members healthy", 103.0)
    board.feed("h1: etcd 91cfc58bf5b4 passed its trial", 110.0)
    assert {name: (row.step, row.since, row.lines) for name, row in board.rows.items()} == {
        "h1": ("etcd 91cfc58bf5b4 passed its trial", 110.0, 3),
        CLUSTER: ("starting etcd-online.target on h1, h2", 102.0, 1),
        "h2": ("etcd member back; all 3 members healthy", 103.0, 2)}
    board.feed("starting kubernetes.target on h1, h2", 115.0)  # the hosts a cluster line names move on too
    assert board.rows["h2"].step == board.rows["h1"].step == "starting kubernetes.target"
    from rich.console import Console

    console = Console(record=True, width=100)
    console.print(board.table(120.0))
    text = plain(console.export_text())
    assert "kubesmith: 20s" in text
    rows = [line for line in text.splitlines() if re.match(r"\s*(h\d|cluster)\b", line)]
    assert [row.split()[0] for row in rows] == ["h1", "h2", "cluster"]  # hosts in order, the cluster last
    assert re.search(r"h1\s+5s\s+starting kubernetes.target", text), text


async def run_phase(tally: Tally, hosts: int, early: int, fail: int = 0, pause: float = 0.0) -> None:
    """`hosts` hosts begin at once; `early` of them end at once, the rest (`fail` of them by raising)
    after `pause` seconds."""
    gate = asyncio.Event()

    async def host(index: int) -> None:
        with tally.working():
            if index >= early:
                await gate.wait()
                if index < early + fail:
                    raise RuntimeError("refused")

    tasks = [asyncio.ensure_future(host(index)) for index in range(hosts)]
    await asyncio.sleep(pause)
    gate.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    tally.close()


def test_a_phase_on_many_hosts_says_one_summary_line_at_most_every_interval_and_one_at_its_end() -> None:
    """20 hosts, 5 done at once: that waits for the pace (1 s here), then says 5/20 with 15 at work;
    the end comes at once, whatever the pace. Nothing per host."""
    said: list[str] = []
    asyncio.run(run_phase(Tally("upload", 20, said.append, every=1.0), hosts=20, early=5, fail=2, pause=1.5))
    assert said == ["upload 5/20 hosts, 15 at work", "upload 18/20 hosts, 2 failed"]
    said.clear()
    asyncio.run(run_phase(Tally("inspect", 20, said.append, every=1.0), hosts=20, early=20))
    assert said == ["inspect 20/20 hosts"]  # a quick phase: its end only
    said.clear()
    asyncio.run(run_phase(Tally("wait kubernetes.target", 20, said.append, final=False), hosts=20, early=20))
    assert said == []  # the caller says the end in its own words ("kubernetes.target active on 20 hosts")


def test_a_phase_on_few_hosts_says_nothing_of_its_own() -> None:
    """Up to FLEET_HOSTS hosts, apply's per-host lines are as they were: no summary beside them."""
    said: list[str] = []
    asyncio.run(run_phase(Tally("upload", FLEET_HOSTS, said.append, every=0.0), hosts=FLEET_HOSTS, early=3,
                          pause=0.1))
    assert said == []


def test_summary_lines_go_to_the_cluster_row_not_to_a_host_row() -> None:
    """The live view takes `word: ...` for a host's row: no fleet line begins that way."""
    board = Board(started=0.0)
    for line in ("inspect 37/100 hosts, 8 at work", "upload 100/100 hosts", "uploading 4400 files to 100 hosts",
                 "starting kubernetes.target on 100 hosts", "wait kubernetes.target 37/100 hosts, 63 at work",
                 "kubernetes.target active on 100 hosts"):
        board.feed(line, 1.0)
        assert list(board.rows) == [CLUSTER] and board.rows[CLUSTER].step == line


def test_auto_is_lines_when_stderr_is_not_a_terminal() -> None:
    assert chosen_mode("auto") == "lines"  # pytest captures stderr
    assert chosen_mode("quiet") == "quiet"


def test_the_live_view_is_drawn_on_a_terminal_and_lines_elsewhere(tmp_path: Path) -> None:
    """The reporter driven as apply drives it, once on a pseudo-terminal (rich's live view: cursor
    movements, one row per host) and once into a pipe (every line, timestamped)."""
    # behind the escaping filter every command writes through (cli.common.run_guarded), as in apply
    script = ("import sys, time\nfrom kubesmith.cli.common import PrintableStream\n"
              "from kubesmith.cli.progress import reporter\nsys.stderr = PrintableStream(sys.stderr)\n"
              "with reporter('auto') as say:\n"
              "    for line in ('h1: uploading 3 files', 'h2: uploading 3 files', 'starting kubernetes.target on h1, h2',\n"
              "                 'h1: etcd member back'):\n"
              "        say(line); time.sleep(0.3)\n")
    piped = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0, piped.stderr
    assert re.findall(r"^\[\d\d:\d\d:\d\d\] (.*)$", piped.stderr, re.M) == [
        "h1: uploading 3 files", "h2: uploading 3 files", "starting kubernetes.target on h1, h2", "h1: etcd member back"]

    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-c", script], stdin=follower, stdout=follower, stderr=follower,
                               env={**os.environ, "COLUMNS": "100", "LINES": "30", "TERM": "xterm"})
    os.close(follower)
    drawn = b""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    assert process.wait(timeout=60) == 0
    os.close(leader)
    raw = drawn.decode(errors="replace")
    assert "\x1b[" in raw  # drawn in place: cursor movement and erasing, not appended lines
    text = plain(raw)
    assert not re.search(r"\[\d\d:\d\d:\d\d\] h1:", text)  # no timestamped lines on a terminal
    last = text[text.rfind("kubesmith:"):]  # the last frame stays on the screen
    assert re.search(r"h1\s+\d+s\s+etcd member back", last), last
    assert re.search(r"h2\s+\d+s\s+starting kubernetes.target", last), last
    assert "starting kubernetes.target on h1, h2" in last


def test_quiet_and_progress_are_offered_by_apply() -> None:
    text = CliRunner().invoke(cli, ["apply", "--help"]).output
    assert "--progress [auto|live|lines|quiet]" in text and "-q, --quiet" in text
