"""The one hostfile parse: hosts and slots by DeepSpeed's rule, every problem reported (none dropped), and the two
ways the surfaces show them: the linter as findings, a launch as a refusal."""

from __future__ import annotations

import pytest

from wizard.config.hostfile import launch_hosts, parse_hostfile
from wizard.config.lint.hostfile import lint_hostfile_text
from wizard.errors import DswizError


def test_hosts_in_file_order_with_comments_and_blank_lines_skipped() -> None:
    parsed = parse_hostfile("# cluster\nnodeA slots=1\n\nnodeB   slots=8  # big\n")
    assert parsed.hosts == (("nodeA", 1), ("nodeB", 8)) and parsed.problems == ()
    assert parsed.host_names == ("nodeA", "nodeB") and parsed.total_slots == 9


def test_a_duplicate_is_a_problem_and_the_first_line_counts() -> None:
    parsed = parse_hostfile("a slots=4\nb slots=4\na slots=2\n")
    assert parsed.slots == {"a": 4, "b": 4}
    [dup] = parsed.problems
    assert (dup.kind, dup.line_number, dup.host) == ("duplicate", 3, "a")


def test_every_problem_in_line_order() -> None:
    parsed = parse_hostfile("bad line\na slots=0\nb slots=2 extra\nb slots=1\n")
    assert [(p.kind, p.line_number) for p in parsed.problems] == [
        ("syntax", 1),
        ("zero-slots", 2),
        ("trailing-text", 3),
        ("duplicate", 4),
    ]
    assert parsed.slots == {"a": 0, "b": 2}  # DeepSpeed reads both lines 2 and 3


def test_the_linter_and_the_launch_read_the_same_parse() -> None:
    text = "a slots=4\na slots=4\n"
    assert [f.code for f in lint_hostfile_text(text)] == ["hostfile-duplicate"]
    with pytest.raises(DswizError, match="listed twice"):
        launch_hosts(text)
    with pytest.raises(DswizError, match="is not a hostfile line"):
        launch_hosts("a slots=4 extra\n")  # only a warning for the linter
    assert [f.code for f in lint_hostfile_text("a slots=4 extra\n")] == ["hostfile-trailing-text"]


def test_the_placeholder_hosts_dswiz_wrote_are_a_warning_until_replaced() -> None:
    """The hostfile `dswiz config` writes for nodes it was not told the names of says worker-N are placeholders;
    `dswiz check` says so while they are there (it found "no problems"), and not once they are replaced -- nor for
    real hosts that happen to be called worker-N, without the note."""
    from wizard.config.build import config_set_from_strategy
    from wizard.config.render import render_hostfile
    from wizard.strategy import Strategy

    written = render_hostfile(config_set_from_strategy(Strategy(nodes=2, gpus_per_node=8)))
    (f,) = [f for f in lint_hostfile_text(written) if f.code == "hostfile-placeholders"]
    assert f.severity.value == "warning" and "--hostfile-hosts" in f.fix
    replaced = written.replace("worker-0", "gpu-a").replace("worker-1", "gpu-b")
    assert [f.code for f in lint_hostfile_text(replaced)] == []
    real = "\n".join(line for line in written.splitlines() if "placeholders" not in line)
    assert [f.code for f in lint_hostfile_text(real)] == []
