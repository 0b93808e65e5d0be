"""The rendezvous port reserved for the whole launch: a second dswiz on this machine (another process) never gets
the port the first one holds, even before anything listens on it; the reservation ends with the process, however
it ends."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from runner import preflight as pf

ROOT = Path(__file__).resolve().parents[2]

# Another dswiz: reserves PORT in FOLDER, says which port it got, and holds it until killed.
HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from runner.preflight import reserve_port
    r = reserve_port(int(sys.argv[2]), folder=Path(sys.argv[3]))
    print(r.port, r.held, flush=True)
    time.sleep(3600)
    """
)


def hold(port: int, folder: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(ROOT), str(port), str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    got, held = proc.stdout.readline().split()
    assert held == "True"
    return proc, int(got)


def test_a_port_held_by_another_launch_is_not_handed_out_again(tmp_path: Path) -> None:
    preferred = pf.free_port()
    first, got = hold(preferred, tmp_path)
    try:
        assert got == preferred
        assert pf.port_is_free(preferred)  # nothing listens yet: a bind check alone would hand it out again
        second = pf.reserve_port(preferred, folder=tmp_path)
        assert second.port != preferred and second.held and pf.port_is_free(second.port)
        second.release()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    again = pf.reserve_port(preferred, folder=tmp_path)  # the kernel dropped the dead holder's lock
    assert again.port == preferred and again.held
    again.release()


def test_a_busy_port_is_skipped_even_when_not_reserved(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        busy = s.getsockname()[1]
        r = pf.reserve_port(busy, folder=tmp_path)
        assert r.port != busy and r.held
        r.release()
