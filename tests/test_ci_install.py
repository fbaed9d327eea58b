"""Every program the tests and kubesmith run on this machine comes from what `.ci/install.sh`
installs, or from Debian's base system: the suite must pass on a fresh machine, not only on one
where a package was once installed by hand (keepalived was: `systemd-analyze verify` then failed
on a fresh one).

The programs are found as the code names them: each string literal that is a command on PATH (or
an absolute path under /bin, /sbin, /usr/bin, /usr/sbin), mapped to its Debian package with
`dpkg -S`. A word that happens to be a command (`file`, `view`) maps to its package as well; such
words are listed below with the reason they are not programs the suite runs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

from kubesmith.lab import rootfs

SOURCES = ("src", "tests", "bench", "tools")
LITERAL = re.compile(r"""["']((?:/usr)?/s?bin/)?([a-z][a-z0-9_.+-]{1,40})["'\s]""")
BASE_PRIORITIES = ("required", "important")
# programs that come with pip (pyproject.toml) or from ../shared/k8s/install.sh (Kubernetes, CoreDNS)
PROVIDED_OTHERWISE = ("site-packages", "/.pyenv/", "/venv", "/.cache/kubesmith-k8s/")  # in every Debian installation, a minimal one included

# Words in the code that are commands of a package CI does not install, but are not run here.
NOT_RUN_HERE = {
    "as": "a Python keyword in text, not the assembler",
    "size": "a word (image sizes), not binutils' size",
    "column": "a word (error columns), not bsdextrautils' column",
    "write": "a word (file writes), not bsdextrautils' write",
    "file": "a word (a spec file), not file(1)",
    "node": "the `node` role, not Node.js",
    "patch": "a word (kubectl patch, an API verb), not patch(1)",
    "view": "the `view` role of a kubeconfig, not vim's view",
    "expiry": "a word (certificate expiry), not passwd's expiry",
    "curl": "run on lab hosts only (the lab image has it: kubesmith.lab.rootfs.PACKAGES)",
    "/bin/tool": "a file inside a test image, not a program here",
    "issues": "a word (the issues of a certificate request), not a program",
    "red": "a word (a colour), not ed's restricted editor",
    "strings": "a word (a type of values), not binutils' strings",
    "cc": "the pause image is compiled with gcc, which .ci/install.sh installs (gcc-12 provides cc)",
}


def installed_by_ci() -> set[str]:
    """The Debian packages `.ci/install.sh` names on its `apt-get install` line."""
    script = (ROOT / ".ci" / "install.sh").read_text()
    command = script.split("apt-get install", 1)[1].split(">/dev/null", 1)[0]
    return {word for word in command.replace("\\\n", " ").split() if not word.startswith("-")}


def programs_named() -> dict[str, set[str]]:
    """Each literal that may name a program here -> the files that name it."""
    named: dict[str, set[str]] = {}
    for source in SOURCES:
        for path in (ROOT / source).rglob("*.py"):
            for match in LITERAL.finditer(path.read_text()):
                named.setdefault((match.group(1) or "") + match.group(2), set()).add(str(path.relative_to(ROOT)))
    return named


def twins(path: str) -> set[str]:
    """`path` as given, resolved, and its merged-/usr twins: dpkg knows each file by one of them."""
    names = {path, str(Path(path).resolve())}
    return names | {n.removeprefix("/usr") for n in names} | {"/usr" + n for n in names if not n.startswith("/usr")}


def packages_of(paths: set[str]) -> dict[str, str]:
    """Each path's Debian package, from one `dpkg -S` over all of them (one call per path costs minutes)."""
    asked: dict[str, set[str]] = {}
    for path in paths:
        for twin in twins(path):
            asked.setdefault(twin, set()).add(path)
    found = subprocess.run(["dpkg", "-S", *sorted(asked)], capture_output=True, text=True).stdout
    owners: dict[str, str] = {}
    for line in found.splitlines():
        package, _, file = line.partition(": ")
        for path in asked.get(file, set()) if not package.startswith("diversion") else set():
            owners.setdefault(path, package.split(",")[0].split(":")[0].strip())
    return owners


def base_packages(packages: set[str]) -> set[str]:
    """Those of `packages` that every Debian installation has (priority required or important)."""
    listed = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Priority}\n", *sorted(packages)],
                            capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.split()[1:] and
            line.split()[1] in BASE_PRIORITIES}


def test_every_program_the_suite_runs_comes_from_the_install_script_or_the_base_system() -> None:
    if shutil.which("dpkg") is None:
        pytest.skip("needs Debian's dpkg")
    ci, lab_image = installed_by_ci(), set(rootfs.PACKAGES)
    assert {"keepalived", "haproxy", "openssh-server", "containerd"} <= ci  # the parser reads the real list
    assert "curl" in lab_image
    unaccounted: list[str] = []
    programs: dict[str, tuple[str, str]] = {}  # path here -> (word, a file naming it)
    for word, files in sorted(programs_named().items()):
        if word in NOT_RUN_HERE:
            continue
        found = word if word.startswith("/") and Path(word).exists() else shutil.which(word)
        if found is None:
            if word.startswith("/"):  # an absolute path the code runs: it must exist here
                unaccounted.append(f"{word} (named in {sorted(files)[0]}) is not on this machine")
        elif not any(part in str(Path(found).resolve()) for part in PROVIDED_OTHERWISE):
            programs[found] = (word, sorted(files)[0])
    owners = packages_of(set(programs))
    base = base_packages(set(owners.values()))
    for path, (word, file) in sorted(programs.items()):
        package = owners.get(path)
        if package is None:
            unaccounted.append(f"{word} (named in {file}) is {path}, of no Debian package or pip")
        elif package not in ci and package not in base:
            unaccounted.append(f"{word} (named in {file}) comes from {package}, which .ci/install.sh does not "
                               "install")
    assert unaccounted == [], "\n".join(unaccounted)
