"""apply's progress: a live per-host view on a terminal (rich), timestamped lines elsewhere, nothing
with -q. The view is fed the same lines a log gets; here it is drawn on a real pseudo-terminal."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

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
