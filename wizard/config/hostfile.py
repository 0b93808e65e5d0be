"""The hostfile, parsed once: the hosts, their slots, and every problem in it, by DeepSpeed's rule.

DeepSpeed 0.19.8 ``deepspeed/launcher/runner.py`` ``_parse_hostfile``: each stripped line is searched with
``^(\\S+)\\s+slots=(\\d+)``; blank lines and ``#`` comments are skipped; another line is "a bad entry", a host
listed twice stops the launch, and no host at all is "empty or not formatted correctly".

Every surface reads this one parse and shows its problems its own way: ``dswiz check`` and the wizard report
them as findings (``wizard.config.lint.hostfile``); a launch refuses the first one (``launch_hosts``).

Two rules are dswiz's own, stricter than DeepSpeed's pattern (docs/input-bounds.md):
- a host name is letters, digits and ``. - _ : @ [ ]`` (an IPv6 address in brackets, ``user@host``), at most
  ``MAX_HOSTNAME`` characters, not starting with ``-``: the launcher hands each name to ssh/pdsh as an argument,
  where ``-oProxyCommand=...`` is an option and whitespace, control or shell characters are not a host
  (``hostname_problem``, also applied to ``dswiz config --hostfile-hosts``);
- ``slots`` is at most ``MAX_SLOTS`` (a 5,000-digit count is not a count; Python's ``int`` refuses it too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from wizard.errors import DswizError

# DeepSpeed's own pattern, applied with re.search to the stripped line: nothing is required after the digits.
HOSTFILE_LINE = re.compile(r"^(\S+)\s+slots=(\d+)")

# What a host name may hold (see the module docstring): the characters of DNS names, IPv4/IPv6 addresses (IPv6 in
# brackets, with a zone after %), and ssh's user@host.
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9_.:\[\]@%-]+")
MAX_HOSTNAME = 253  # DNS's limit for a full name
MAX_SLOTS = 1_000_000  # ranks on one host; far above any machine, far below a count that is a typo
_MAX_SLOT_DIGITS = len(str(MAX_SLOTS))


def hostname_problem(host: str) -> str | None:
    """Why ``host`` is not a host name dswiz passes to ssh/pdsh (None when it is one)."""
    if not host:
        return "is empty"
    if host.startswith("-"):
        return "starts with '-': ssh and pdsh would read it as an option"
    if len(host) > MAX_HOSTNAME:
        return f"is longer than {MAX_HOSTNAME} characters"
    if not _HOSTNAME_RE.fullmatch(host):
        bad = next(c for c in host if not _HOSTNAME_RE.fullmatch(c))
        return f"holds {bad!r}: a host name is letters, digits and . - _ : @ [ ]"
    return None


SLOTS_FIX = "set slots to the number of GPUs on that node, e.g. 'worker-1 slots=8'"
HOSTNAME_FIX = "write the node's name or address (letters, digits, '.', '-'; not starting with '-')"


def checked_hostname(host: str, *, source: str) -> str:
    """``host`` when it passes ``hostname_problem``; else a DswizError naming it and where it came from."""
    problem = hostname_problem(host)
    if problem is not None:
        raise DswizError(f"{source}: host {host!r} {problem}", HOSTNAME_FIX)
    return host


# Host names dswiz writes when the user has not named the nodes yet; the written hostfile says to replace them.
PLACEHOLDER_PREFIX = "worker-"


PLACEHOLDER_NOTE = f"# {PLACEHOLDER_PREFIX}N are placeholders: replace them with your nodes' ssh host names"


def placeholder_hosts(nodes: int) -> tuple[str, ...]:
    return tuple(f"{PLACEHOLDER_PREFIX}{i}" for i in range(nodes))


def has_placeholders(hosts: tuple[str, ...]) -> bool:
    return any(h.startswith(PLACEHOLDER_PREFIX) for h in hosts)


def hostfile_lines(hosts: tuple[str, ...], slots: int) -> list[str]:
    """``HOST slots=N``, one line per host, as DeepSpeed's launcher reads them."""
    return [f"{host} slots={slots}" for host in hosts]


# syntax: not "HOST slots=N"; trailing-text: more than a comment after the slots (DeepSpeed ignores it, mpirun or
# pdsh reading the same file may not); duplicate: a host listed again; zero-slots: a host with no rank; bad-host:
# a name that is not a host (hostname_problem; ``reason`` says why); slots-range: slots above MAX_SLOTS.
ProblemKind = Literal["syntax", "trailing-text", "duplicate", "zero-slots", "bad-host", "slots-range"]


@dataclass(frozen=True)
class HostfileProblem:
    kind: ProblemKind
    line_number: int  # counted from 1
    line: str  # stripped
    host: str | None = None
    slots: int | None = None
    trailing: str = ""  # the text after slots= (trailing-text)
    reason: str = ""  # why the host is not a host name (bad-host)


@dataclass(frozen=True)
class Hostfile:
    """``hosts``: every host once, in file order (a repeated host keeps its first line); ``problems``: in line
    order, a duplicate's later lines among them."""

    hosts: tuple[tuple[str, int], ...]
    problems: tuple[HostfileProblem, ...]

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(host for host, _ in self.hosts)

    @property
    def slots(self) -> dict[str, int]:
        return dict(self.hosts)

    @property
    def total_slots(self) -> int:
        return sum(slots for _, slots in self.hosts)


def parse_hostfile(text: str) -> Hostfile:
    hosts: dict[str, int] = {}
    problems: list[HostfileProblem] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = HOSTFILE_LINE.search(line)
        if not m:
            problems.append(HostfileProblem("syntax", number, _shown(line)))
            continue
        host, digits = m.group(1), m.group(2).lstrip("0") or "0"
        if len(digits) > _MAX_SLOT_DIGITS or int(digits) > MAX_SLOTS:
            problems.append(HostfileProblem("slots-range", number, _shown(line), host))
            continue
        slots = int(digits)
        reason = hostname_problem(host)
        if reason is not None:
            problems.append(HostfileProblem("bad-host", number, _shown(line), host, slots, reason=reason))
            continue
        trailing = line[m.end() :].strip()
        if trailing and not trailing.startswith("#"):
            problems.append(HostfileProblem("trailing-text", number, line, host, slots, trailing))
        if host in hosts:
            problems.append(HostfileProblem("duplicate", number, line, host, slots))
            continue
        if slots == 0:
            problems.append(HostfileProblem("zero-slots", number, line, host, slots))
        hosts[host] = slots
    return Hostfile(tuple(hosts.items()), tuple(problems))


def _shown(line: str) -> str:
    """A line as findings quote it: at most 80 characters (a 5,000-digit line stays readable)."""
    return line if len(line) <= 80 else line[:77] + "..."


def launch_hosts(text: str, *, source: str = "hostfile") -> list[tuple[str, int]]:
    """``[(host, slots), …]`` for a launch, which accepts only a clean hostfile: raises DswizError naming the first
    bad line (text after the slots counts as bad: the launch hands the file to ssh/MPI tools too)."""
    parsed = parse_hostfile(text)
    for p in parsed.problems:
        where = f"{source}:{p.line_number}"
        if p.kind in ("syntax", "trailing-text"):
            raise DswizError(
                f"{where}: {p.line!r} is not a hostfile line",
                "write one '<host> slots=<gpus>' per line, e.g. 'worker-1 slots=8'",
            )
        if p.kind == "duplicate":
            raise DswizError(f"{where}: host {p.host!r} is listed twice", "keep one line per host")
        if p.kind == "bad-host":
            raise DswizError(f"{where}: host {p.host!r} {p.reason}", HOSTNAME_FIX)
        if p.kind == "slots-range":
            raise DswizError(f"{where}: slots in {p.line!r} is above {MAX_SLOTS:,}", SLOTS_FIX)
        raise DswizError(f"{where}: host {p.host!r} has slots=0", "give every host at least one slot")
    if not parsed.hosts:
        raise DswizError(f"{source} lists no hosts", "write one '<host> slots=<gpus>' per line")
    return list(parsed.hosts)
