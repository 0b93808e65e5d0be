"""Hostfiles, fuzzed: lines built from host names that are ssh options, hold shell metacharacters, whitespace or
control characters, ``slots=`` with thousands of digits, trailing text and comments. Parsing gives hosts and
problems, the linter findings, a launch either clean (host, slots) pairs whose names pass the host-name rule or a
DswizError naming the line."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from wizard.config.hostfile import MAX_SLOTS, hostname_problem, launch_hosts, parse_hostfile
from wizard.config.lint.hostfile import lint_hostfile_for_topology, lint_hostfile_text

from . import fuzz_support as fz

HOSTS = [
    "worker-0",
    "node1",
    "10.0.0.1",
    "gpu-01.cluster.local",
    "[fe80::1]",
    "-oProxyCommand=touch${IFS}/tmp/x",
    "-p",
    "a;b",
    "a|b",
    "$(id)",
    "`id`",
    "a&b",
    "host'q",
    'host"q',
    "h\\x",
    "h>x",
    "h*",
    "user@host",
    "é-node",
    "h\x1bx",
    "h\x7fx",
]
host = st.sampled_from(HOSTS) | st.text(min_size=1, max_size=12)
slots = st.sampled_from(["0", "1", "8", "08", fz.HUGE_DIGITS, "9" * 30, "-1", "x", ""]) | st.integers(
    0, 10**6
).map(str)
lines = st.one_of(
    st.builds(lambda h, s: f"{h} slots={s}", host, slots),
    st.builds(lambda h, s, t: f"{h} slots={s} {t}", host, slots, st.sampled_from(["# gpu", "extra", "x=1"])),
    st.sampled_from(["", "# comment", "   ", "slots=8", "worker-0", "worker-0 slots", "\t"]),
    st.text(max_size=20),
)
hostfiles = st.lists(lines, max_size=6).map("\n".join)


@fz.fuzz_settings(1250)
@given(
    texts=fz.batch(hostfiles),
    world=st.none() | st.integers(1, 16),
    launcher=st.sampled_from([None, "pdsh", "mpich"]),
)
def test_hostfile_gives_hosts_and_findings_never_an_exception(
    texts: list[str], world: int | None, launcher: str | None
) -> None:
    for text in fz.cases(texts):
        check_hostfile(text, world, launcher)


def check_hostfile(text: str, world: int | None, launcher: str | None) -> None:
    parsed = parse_hostfile(text)
    for _, n in parsed.hosts:
        fz.holds(type(n) is int and 0 <= n <= MAX_SLOTS, f"slots {n!r} bounded")
    for f in lint_hostfile_text(text, world_size=world, launcher=launcher):
        fz.holds(bool(f.code and f.what and f.fix), f"finding {f!r} names problem and fix")
    lint_hostfile_for_topology(text, nodes=2, gpus_per_node=8)
    hosts = fz.total(launch_hosts, text)
    for name, n in hosts or []:
        fz.holds(hostname_problem(name) is None, f"launch accepted host {name!r}")
        fz.holds(n >= 1, "every launched host has a slot")


def test_an_ssh_option_as_host_is_an_error_naming_the_line() -> None:
    text = "worker-0 slots=8\n-oProxyCommand=touch${IFS}/tmp/pwned slots=1\n"
    errors = [f for f in lint_hostfile_text(text) if f.severity.value == "error"]
    assert [f.code for f in errors] == ["hostfile-host"]
    assert errors[0].location == "hostfile:2" and "-oProxyCommand" in errors[0].what
    try:
        launch_hosts(text)
    except Exception as e:
        assert type(e).__name__ == "DswizError" and "hostfile:2" in e.problem and e.fix
    else:
        raise AssertionError("an ssh option reached the launch")


def test_five_thousand_digit_slots_is_a_finding() -> None:
    text = f"worker-0 slots={fz.HUGE_DIGITS}\n"
    codes = [f.code for f in lint_hostfile_text(text)]
    assert codes == ["hostfile-slots-range"]


INJECTION = "worker-0 slots=1\n-oProxyCommand=touch${IFS}/tmp/pwned slots=1\n"


def test_check_config_and_launch_refuse_an_ssh_option_as_host(tmp_path: Path) -> None:
    from .test_fuzz_cli import run_cli

    hostfile = tmp_path / "hostfile"
    hostfile.write_text(INJECTION, encoding="utf-8")
    code, out = run_cli("check", str(hostfile), "--no-consumer-check")
    assert code == 1 and "[hostfile-host] (hostfile:2)" in out and "fix:" in out
    script = Path(__file__).resolve().parents[2] / "runner" / "examples" / "train_tiny.py"
    code, out = run_cli("launch", "--dry-run", "--hostfile", str(hostfile), str(script))
    assert code == 2 and f"{hostfile}:2: host '-oProxyCommand" in out and "fix:" in out
    code, out = run_cli(
        "config",
        "--yes",
        "--nodes",
        "2",
        "--hostfile-hosts",
        "-oProxyCommand=x,b",
        "--out",
        str(tmp_path / "c"),
    )
    assert code == 2 and "--hostfile-hosts: host '-oProxyCommand=x'" in out and "fix:" in out
    assert not (tmp_path / "c").exists()
