"""etcdDefrag: each etcd member defragments its own database on a schedule (a systemd timer).

etcd's compaction frees pages inside its database file but never gives them back: the file only grows,
until the backend quota (spec.components.etcd.quotaBackendBytes) refuses every write with "database space
exceeded". `etcdctl defrag` rewrites the file to its live size; kubeadm leaves it to the operator's cron.
A member blocks reads and writes while it defragments, so the members take turns: member i of the etcd
hosts (in the spec's order) waits i times `memberSpacing` after the schedule fires.

The timer is pulled in by a drop-in of kubernetes.target, which every apply and every boot starts; it
lives under /usr/lib/systemd/system so that turning the component off (the files go) stops the timer
and its service by their /etc/systemd/system unit files, as apply and reset stop removed units. It runs
where systemd runs the cluster, not under `kubesmith run`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from kubesmith import layout
from kubesmith.modules.base import Module, OptionProblem
from kubesmith.modules.etcd import local_etcdctl
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File
from kubesmith.vocabulary.types import StrictModel

UNIT = "kubesmith-etcd-defrag"  # not etcd-*: apply would take a change of it for one of etcd's, and restart etcd
SERVICE_FILE = f"{layout.UNIT_DIR}/{UNIT}.service"
TIMER_FILE = f"{layout.UNIT_DIR}/{UNIT}.timer"
WANTS_FILE = f"/usr/lib/systemd/system/kubernetes.target.d/{UNIT}.conf"
COMMAND_TIMEOUT = "10m"  # a large database takes minutes to rewrite; the member answers nothing meanwhile

# systemd.time(7), CALENDAR EVENTS: the shorthands, and `[weekdays] [[year-]month-day] [hour:minute[:second]]
# [UTC]` whose fields are `*` or lists of values, ranges (a..b) and repetitions (/n)
SHORTHANDS = frozenset({"minutely", "hourly", "daily", "weekly", "monthly", "yearly", "annually", "quarterly",
                        "semiannually"})
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
FULL_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
DATE_FIELDS = (("year", 1970, 2199), ("month", 1, 12), ("day", 1, 31))
TIME_FIELDS = (("hour", 0, 23), ("minute", 0, 59), ("second", 0, 59))
_ITEM = re.compile(r"(?:\*|(?P<first>[0-9]+)(?:\.\.(?P<last>[0-9]+))?)(?:/(?P<step>[0-9]+))?")
_SECOND = re.compile(r"(?P<whole>[0-9]+)(?:\.[0-9]{1,6})?")


def _field_problem(text: str, name: str, low: int, high: int) -> str | None:
    """One field of a date or time: `*` or a comma list of values, a..b ranges and /n repetitions."""
    for item in text.split(","):
        match = _ITEM.fullmatch(item) or (_SECOND.fullmatch(item) if name == "second" else None)
        if match is None:
            return f"{name} {item!r} is no value, range (a..b) or repetition (/n)"
        numbers = [int(value) for key in ("first", "whole", "last") if (value := match.groupdict().get(key))]
        if (bad := next((number for number in numbers if not low <= number <= high), None)) is not None:
            return f"{name} {bad} is not in {low}..{high}"
        if len(numbers) == 2 and numbers[0] > numbers[1]:
            return f"{name} range {item} runs backwards"
        if match.groupdict().get("step") is not None and int(match["step"]) == 0:
            return f"{name} repetition {item} repeats every 0"
    return None


def _weekdays_problem(text: str) -> str | None:
    for item in text.lower().split(","):
        names = item.split("..")
        if len(names) > 2 or not all(name in DAYS or name in FULL_DAYS for name in names):
            return f"{item!r} is no weekday (Mon..Sun, Monday..Sunday) or range of them (Mon..Fri)"
    return None


def _date_problem(text: str) -> str | None:
    parts = re.split(r"-|~(?=[^-~]*$)", text)  # the day may count from the month's end: *-02~03
    if len(parts) not in (2, 3) or text.count("~") > 1:
        return f"date {text!r} is not [year-]month-day"
    fields = DATE_FIELDS[3 - len(parts):]
    return next((problem for part, field in zip(parts, fields) if (problem := _field_problem(part, *field))), None)


def _time_problem(text: str) -> str | None:
    parts = text.split(":")
    if len(parts) not in (2, 3):
        return f"the time of day {text!r} is not hour:minute[:second]"
    return next((problem for part, field in zip(parts, TIME_FIELDS) if (problem := _field_problem(part, *field))),
                None)


def calendar_problem(value: str) -> str | None:
    """Why systemd would not read `value` as OnCalendar=, or kubesmith does not take it (a time zone other
    than UTC: the hosts' zone databases may differ); None when it is a calendar event."""
    tokens = value.split()
    if len(tokens) == 1 and tokens[0].lower() in SHORTHANDS:
        return None
    if tokens and tokens[-1] == "UTC":
        tokens.pop()
    checks = []
    if tokens and tokens[0][:1].isalpha():
        checks.append(_weekdays_problem(tokens.pop(0)))
    if tokens and ":" not in tokens[0]:
        checks.append(_date_problem(tokens.pop(0)))
    if tokens and ":" in tokens[0]:
        checks.append(_time_problem(tokens.pop(0)))
    if not checks or tokens:
        leftover = f" ({tokens[0]!r} is not understood)" if tokens and checks else ""
        return (f"{value!r} is not a calendar event{leftover}: give a shorthand ({', '.join(sorted(SHORTHANDS))}) "
                "or `[weekdays] [[year-]month-day] [hour:minute[:second]] [UTC]`, such as `Sun *-*-* 03:00` "
                "(systemd.time(7))")
    return next((problem for problem in checks if problem), None)


def _calendar(value: str) -> str:
    if problem := calendar_problem(value):
        raise ValueError(f"systemd's OnCalendar= would not take it: {problem}")
    return value


Calendar = Annotated[str, AfterValidator(_calendar)]


class EtcdDefragOptions(StrictModel):
    enable: bool = Field(default=False, description="Defragment each etcd member's database on `schedule` "
                         "(etcdctl defrag against the member's own loopback listener), one member at a time.")
    schedule: Calendar = Field(default="weekly", description="When, as a systemd calendar event (OnCalendar=, "
                               "systemd.time(7)): weekly is Mondays at 00:00 host time; e.g. `Sun *-*-* 03:00`.")
    member_spacing: int = Field(default=600, ge=0, le=86400,
                                description="Seconds between the members' turns: the i-th etcd host of "
                                            "spec.hosts starts i times this long after the schedule fires (a "
                                            "member answers nothing while it defragments).")


class EtcdDefragModule(Module):
    key = "etcd_defrag"
    position = 15  # after etcd, whose database it keeps small
    title = "scheduled etcd defragmentation (systemd timer)"
    options = EtcdDefragOptions
    roles = frozenset({"etcd"})

    def check(self, spec: Any, options: EtcdDefragOptions, registry: Any) -> list[OptionProblem]:
        # spacing 0 fires every member at once: a member answers nothing while it defragments, so with all of
        # them at it etcd has no quorum, and the API server no storage, until the slowest is done
        members = [host.name for host in spec.spec.hosts if "etcd" in host.roles]
        if options.enable and options.member_spacing == 0 and len(members) > 1:
            return [OptionProblem(("memberSpacing",), f"0 seconds between the turns of {len(members)} etcd members: "
                                  "all would defragment at once, and etcd would have no quorum (the API server no "
                                  "storage) until the slowest is done; give each its turn (the default is 600)")]
        return []

    def contribute(self, ctx: HostContext, options: EtcdDefragOptions) -> Contribution:
        if not options.enable:
            return Contribution()
        turn = [member.name for member in ctx.cluster.etcd_members].index(ctx.host.name)
        wait = turn * options.member_spacing
        return Contribution(files=[
            File(SERVICE_FILE, 0o600, content=service_unit(defrag_argv(ctx.cluster.etcd_client_port), wait)),
            File(TIMER_FILE, 0o600, content=timer_unit(options.schedule)),
            File(WANTS_FILE, 0o644, content=f"# kubesmith: etcdDefrag\n[Unit]\nWants={UNIT}.timer\n"),
        ])


def defrag_argv(client_port: int) -> list[str]:
    """etcdctl defrag of this member only (its loopback listener, no --cluster), as the health-check client."""
    return [*local_etcdctl(layout.BIN, client_port), "--dial-timeout=10s", f"--command-timeout={COMMAND_TIMEOUT}",
            "defrag"]


def service_unit(argv: list[str], wait: int) -> str:
    """A oneshot that needs etcd running (a member that is down has nothing to defragment: it fails at
    once, visibly) and waits for its turn first."""
    lines = ["# kubesmith: etcdDefrag", "[Unit]", "Description=kubesmith: defragment this etcd member's database",
             "Requisite=etcd.service", "After=etcd.service", "", "[Service]", "Type=oneshot", "User=root",
             "Group=root", f"TimeoutStartSec={wait + 900}"]
    if wait:
        lines.append(f"ExecStartPre=/bin/sleep {wait}")
    lines += [f"ExecStart={' '.join(argv)}", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
              "PrivateTmp=yes", "PrivateDevices=yes", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
              "UMask=0077"]
    return "\n".join(lines) + "\n"


def timer_unit(schedule: str) -> str:
    """Not Persistent=: after a boot, a missed run waits for the next one rather than hitting a member that
    is still catching up with its peers."""
    return "\n".join(["# kubesmith: etcdDefrag", "[Unit]",
                      "Description=kubesmith: defragment this etcd member's database on schedule", "", "[Timer]",
                      f"OnCalendar={schedule}", "AccuracySec=1min", ""])


MODULE = EtcdDefragModule()
