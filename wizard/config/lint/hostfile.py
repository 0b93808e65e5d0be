"""The launcher's files as findings: the hostfile (parsed by ``wizard.config.hostfile``, DeepSpeed's rule) and
``.deepspeed_env`` (DeepSpeed 0.19.8 ``deepspeed/launcher/runner.py`` ``main`` splits every line on '=')."""

from __future__ import annotations

import re
from dataclasses import replace

from wizard.config.hostfile import (
    HOSTNAME_FIX,
    MAX_SLOTS,
    PLACEHOLDER_NOTE,
    SLOTS_FIX,
    Hostfile,
    HostfileProblem,
    has_placeholders,
    parse_hostfile,
)
from wizard.config.launchers import EQUAL_SLOTS_LAUNCHERS
from wizard.config.lint.base import ERROR, INFO, WARNING, finding
from wizard.findings import Finding

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _problem_finding(p: HostfileProblem, name: str) -> Finding:
    where = f"{name}:{p.line_number}"
    if p.kind == "syntax":
        return finding(
            ERROR,
            "hostfile-syntax",
            f"hostfile line {p.line_number} is not 'HOST slots=N': {p.line!r}",
            'DeepSpeed stops: "Hostfile contains a bad entry"',
            "write one node per line as `hostname slots=8` (slots = GPUs on that node)",
            where,
        )
    if p.kind == "trailing-text":
        return finding(
            WARNING,
            "hostfile-trailing-text",
            f"hostfile line {p.line_number} has text after slots=: {p.trailing!r}",
            "DeepSpeed ignores it; other tools reading the hostfile (mpirun, pdsh) may not",
            f"keep only `{p.host} slots={p.slots}` on that line",
            where,
        )
    if p.kind == "bad-host":
        return finding(
            ERROR,
            "hostfile-host",
            f"hostfile line {p.line_number}: host {p.host!r} {p.reason}",
            "the launcher passes each host to ssh/pdsh as an argument: an option or shell text there runs "
            "something else than the job; dswiz launch refuses it",
            HOSTNAME_FIX,
            where,
        )
    if p.kind == "slots-range":
        return finding(
            ERROR,
            "hostfile-slots-range",
            f"hostfile line {p.line_number}: slots is above {MAX_SLOTS:,}: {p.line!r}",
            "slots is the number of ranks (GPUs) on that node; a count this large is a typo",
            SLOTS_FIX,
            where,
        )
    if p.kind == "duplicate":
        return finding(
            ERROR,
            "hostfile-duplicate",
            f"host {p.host} appears twice in the hostfile",
            f'DeepSpeed stops: "Hostfile contains multiple entries for {p.host}"',
            f"keep one line for {p.host} with the total slots of that node",
            where,
        )
    return finding(
        WARNING,
        "hostfile-zero-slots",
        f"host {p.host} has slots=0",
        "no process runs there: the node is listed but unused",
        f"set slots to the number of GPUs on {p.host}, or delete the line",
        where,
    )


def lint_hostfile_text(
    text: str, *, name: str = "hostfile", world_size: int | None = None, launcher: str | None = None
) -> list[Finding]:
    parsed = parse_hostfile(text)
    out = _lint_hostfile(parsed, name=name, world_size=world_size, launcher=launcher)
    if PLACEHOLDER_NOTE in text.splitlines() and has_placeholders(tuple(parsed.slots)):
        out.append(
            finding(
                WARNING,
                "hostfile-placeholders",
                "the hostfile still names the placeholder hosts dswiz wrote (worker-0, worker-1, ...)",
                "the launcher would ssh to hosts that do not exist (and launch.sh's --master_addr names worker-0)",
                "put your nodes' ssh host names in their place and in launch.sh (or write the folder again with "
                "dswiz config --hostfile-hosts h1,h2,...); if these are your hosts' real names, delete the comment "
                "line that calls them placeholders",
                f"{name}:1",
            )
        )
    return out


def _lint_hostfile(
    parsed: Hostfile, *, name: str, world_size: int | None, launcher: str | None
) -> list[Finding]:
    out = [_problem_finding(p, name) for p in parsed.problems]
    hosts = parsed.slots
    if not hosts and not out:
        out.append(
            finding(
                ERROR,
                "hostfile-empty",
                "the hostfile lists no hosts",
                'DeepSpeed stops: "Hostfile is empty or not formatted correctly"',
                "add one `hostname slots=N` line per node, or drop --hostfile for a single node",
                f"{name}:1",
            )
        )
    if not hosts:
        return out
    total = parsed.total_slots
    if world_size is not None and total != world_size:
        out.append(
            finding(
                WARNING,
                "hostfile-world-size",
                f"the hostfile has {total} slots but the world size is {world_size}",
                "the launcher starts one rank per slot, so the batch arithmetic sees another world size",
                f"make the slots add up to {world_size}, or check the batch sizes for {total} ranks",
                f"{name}:1",
            )
        )
    counts = sorted(set(hosts.values()))
    if len(counts) > 1:
        strict = launcher in EQUAL_SLOTS_LAUNCHERS
        out.append(
            finding(
                ERROR if strict else INFO,
                "hostfile-unequal-slots",
                f"nodes have different slot counts ({', '.join(f'{h}={s}' for h, s in hosts.items())})",
                "the mpich, impi, mvapich, slurm and standard (torchrun) launchers need the same number of GPUs"
                " on every node" + (f"; {launcher} refuses this hostfile" if strict else ""),
                "give every node the same slots (or use the pdsh / openmpi launcher)",
                f"{name}:1",
            )
        )
    return out


def lint_hostfile_for_topology(
    text: str, *, nodes: int, gpus_per_node: int, launcher: str | None = None, name: str = "hostfile"
) -> list[Finding]:
    """A hostfile that *is* the plan's topology (what the wizard edits before writing): DeepSpeed's rules, plus
    one host per node and ``slots`` = GPUs per node on every line -- dswiz writes ``host slots=<GPUs per node>``,
    so anything else would not be what was typed. (``dswiz check`` only warns about the slot total: a hostfile
    may legitimately list more hosts than one job uses.)"""
    one_per_node = f"write {nodes} lines, one per node (node 0 first): `hostname slots={gpus_per_node}`"
    parsed = parse_hostfile(text)
    out = [
        replace(f, fix=one_per_node) if f.code == "hostfile-empty" else f
        for f in _lint_hostfile(parsed, name=name, world_size=None, launcher=launcher)
        if f.code != "hostfile-unequal-slots"
    ]
    hosts = parsed.slots
    if not hosts:
        return out
    if len(hosts) != nodes:
        out.append(
            finding(
                ERROR,
                "hostfile-node-count",
                f"the hostfile names {len(hosts)} host{'s' if len(hosts) != 1 else ''} for {nodes} nodes",
                "each node of the plan is one hostfile line: the launcher starts ranks on exactly those hosts",
                f"write {nodes} lines, one per node (node 0 first), or set the number of nodes to {len(hosts)}",
                f"{name}:1",
            )
        )
    other = {h: n for h, n in hosts.items() if n != gpus_per_node}
    if other:
        listed = ", ".join(f"{h} slots={n}" for h, n in other.items())
        out.append(
            finding(
                ERROR,
                "hostfile-slots",
                f"the plan has {gpus_per_node} GPUs per node, but the hostfile says {listed}",
                "every node runs one rank per GPU of the plan; the hostfile is written with that slot count",
                f"write slots={gpus_per_node} on every line, or change the GPUs per node",
                f"{name}:1",
            )
        )
    return out


def lint_deepspeed_env_text(text: str, *, name: str = ".deepspeed_env") -> list[Finding]:
    out: list[Finding] = []
    for number, raw in enumerate(text.splitlines(keepends=True), start=1):
        line = raw.rstrip("\n")
        where = f"{name}:{number}"
        if "=" not in line:
            out.append(
                finding(
                    ERROR,
                    "env-syntax",
                    f"line {number} of .deepspeed_env has no '=': {line!r}",
                    "DeepSpeed splits every line on '=' and crashes on this one (a blank line too)",
                    "keep only KEY=VALUE lines: no blank lines, no comments",
                    where,
                )
            )
            continue
        key = line.split("=", 1)[0].strip()
        if not _ENV_NAME.match(key):
            out.append(
                finding(
                    ERROR,
                    "env-syntax",
                    f"line {number} of .deepspeed_env exports {key!r}, which is not a variable name",
                    "DeepSpeed exports whatever is left of '=' (a '#' comment becomes a broken export)",
                    "keep only KEY=VALUE lines with plain variable names",
                    where,
                )
            )
    return out
