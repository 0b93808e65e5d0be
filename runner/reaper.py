"""The reaper: a separate, tiny process that stops the job when `dswiz launch` is gone without saying goodbye.

`dswiz launch` can die in ways it cannot handle (SIGKILL from the OOM killer or a scheduler, a crash in the
interpreter). Its job must not outlive it, so before the first launcher starts, dswiz starts this file as its own
process, in its own session (a Ctrl-C or a SIGHUP at the terminal does not reach it), with nothing of dswiz in
it: the standard library only, run as a script (``python -I -S reaper.py``), so no import of dswiz, psutil or
torch can fail in it, and it costs a few MB.

The lifeline is a pipe: dswiz holds its write end and nothing else does (pipes from ``os.pipe`` are not
inherited; subprocess closes other descriptors). dswiz writes, one line each::

    sid <N>     a launcher it started (each leads its own session; every process of the job carries that id)
    port <N>    the job's master port (its ranks' shared-memory files carry it: ``remove_shm_buffers``)
    done        the job is over and its verdict written: exit without doing anything

When the pipe ends without ``done``, dswiz is gone (the kernel closes the write end of a dead process, however it
died; no PID to reuse). The reaper then stops every process of the job: SIGTERM to the sessions and to every
process whose environment carries the job's token (``DSWIZ_JOB_TOKEN``: found however a process re-parented or
left the session), SIGKILL after the grace, again until none is left; it removes the shared-memory files the ranks
left (``remove_shm_buffers``, and any that no process holds: ``remove_orphaned_shm_buffers``); and, given a run
directory, it writes the verdict into run.json ("supervisor lost") unless dswiz had written its own.

Both ends of the lifeline are here: ``start_reaper`` starts this file and returns dswiz's end (``ReaperLink``). The
bench scripts use them too (bench/_common.py ``run_in_group``, no run directory): a bench that is SIGKILLed leaves
nothing running either.

``job_processes`` is also what dswiz itself (runner.job.session) and ``dswiz monitor --stop-leftovers`` use to find
a job's processes, so the rule is in one place.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable

TOKEN_ENV = "DSWIZ_JOB_TOKEN"
STATUS_SUPERVISOR_LOST = "supervisor_lost"  # run.json status written here (runner.rundir takes it from here)
_POLL_S = 0.1
_KILL_AGAIN_S = 0.5
_GIVE_UP_S = (
    60.0  # after the grace: SIGKILL again and again this long at most (an unkillable D-state process)
)


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses): state is [0], session [3],
    a zombie's exit status [49] (proc(5): field 52, since Linux 3.5). None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _has_token(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return marker in fh.read().split(b"\0")
    except OSError:  # gone, or another user's
        return False


def job_processes(sids: Iterable[int], token: str | None) -> list[int]:
    """The live (not zombie) processes of the job: in one of ``sids``, or carrying ``token`` in their environment.
    This process is never one of them."""
    sid_set = set(sids)
    marker = f"{TOKEN_ENV}={token}".encode() if token else None
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        fields = stat_fields(pid)
        if fields is None or len(fields) < 4 or fields[0] == "Z":
            continue
        if (fields[3].isdigit() and int(fields[3]) in sid_set) or (marker and _has_token(pid, marker)):
            found.append(pid)
    return sorted(found)


def _signal_all(sids: Iterable[int], pids: Iterable[int], sig: int) -> None:
    for sid in sids:
        with contextlib.suppress(OSError):
            os.killpg(sid, sig)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def stop_job(sids: Iterable[int], token: str | None, grace_s: float) -> tuple[int, bool, float]:
    """SIGTERM to every process of the job, SIGKILL after ``grace_s``, again until none is left.
    Returns (processes found at first, whether SIGKILL was needed, seconds it took)."""
    sids = list(sids)
    t0 = time.monotonic()
    first = job_processes(sids, token)
    if not first:
        return 0, False, 0.0
    _signal_all(sids, first, signal.SIGTERM)
    while time.monotonic() - t0 < grace_s:
        time.sleep(_POLL_S)
        if not job_processes(sids, token):
            return len(first), False, time.monotonic() - t0
    while time.monotonic() - t0 < grace_s + _GIVE_UP_S:
        left = job_processes(sids, token)
        if not left:
            break
        _signal_all(sids, left, signal.SIGKILL)
        time.sleep(_KILL_AGAIN_S)
    return len(first), True, time.monotonic() - t0


# DeepSpeed's CPU all-reduce (deepspeed/ops/csrc/cpu/comm/shm.cpp shm_initialize, DeepSpeed 0.19.8) creates one
# shared-memory file per rank, deepspeed_allreduce_buffer_<uid>_<master addr>_<master port>_<rank> in /dev/shm
# (~66 MB each), and unlinks it only in shared_close, which nothing calls when a rank exits: every CPU job would
# leave them behind (measured: 20 GiB of them filled this 24 GiB machine's /dev/shm after a day of test runs).
SHM_DIR = "/dev/shm"
SHM_BUFFER_PREFIX = "deepspeed_allreduce_buffer"


def _own_head() -> str:
    """How this user's all-reduce file names start: ``deepspeed_allreduce_buffer_<uid>_``."""
    return f"{SHM_BUFFER_PREFIX}_{os.getuid()}_"


def own_shm_buffers(shm_dir: str = SHM_DIR) -> list[str]:
    """The names of this user's DeepSpeed all-reduce files in ``shm_dir`` (none when it cannot be read)."""
    head = _own_head()
    try:
        return sorted(n for n in os.listdir(shm_dir) if n.startswith(head))
    except OSError:
        return []


def remove_shm_buffers(ports: Iterable[int], shm_dir: str = SHM_DIR) -> int:
    """Remove this user's DeepSpeed all-reduce buffers of the job's master ``ports``; how many were removed. A rank
    still running keeps its mapping (unlinking removes the name only)."""
    wanted = {str(p) for p in ports}
    if not wanted:
        return 0
    skip = len(_own_head())
    removed = 0
    for name in own_shm_buffers(shm_dir):
        parts = name[skip:].rsplit("_", 2)  # <addr>_<port>_<rank>; an address holds no "_"
        if len(parts) == 3 and parts[1] in wanted and parts[2].isdigit():
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(shm_dir, name))
                removed += 1
    return removed


# processes_holding is a general /proc reader (runner.build_locks uses it too); it lives here because the reaper
# must stay standard-library only and cannot import it from elsewhere.
def processes_holding(
    wanted: Iterable[str], proc: str = "/proc", *, mapped: bool = False, unseen: list[int] | None = None
) -> dict[str, set[int]]:
    """Which of the files ``wanted`` each process has open, or, with ``mapped``, has mapped (/proc/PID/fd and
    /proc/PID/maps), matched by device and inode (a path through a symlinked folder is the same file). Processes this
    user may not look into are skipped, and listed in ``unseen`` when given."""
    files: dict[tuple[int, int], str] = {}
    for path in wanted:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            files[(st.st_dev, st.st_ino)] = path
    out: dict[str, set[int]] = {}
    if not files:
        return out
    try:
        pids = [int(n) for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return out
    for pid in pids:
        held: set[tuple[int, int]] = set()
        fd_dir = os.path.join(proc, str(pid), "fd")
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:  # another user's, or not dumpable
            if unseen is not None:
                unseen.append(pid)
            continue
        except OSError:  # gone
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                st = os.stat(os.path.join(fd_dir, fd))  # the open file itself
                held.add((st.st_dev, st.st_ino))
        if mapped:
            held |= _mapped_files(os.path.join(proc, str(pid), "maps"))
        for key in held & files.keys():
            out.setdefault(files[key], set()).add(pid)
    return out


def _mapped_files(maps: str) -> set[tuple[int, int]]:
    """(device, inode) of every file a process maps: /proc/PID/maps' columns ``address perms offset MM:mm inode``."""
    out: set[tuple[int, int]] = set()
    with contextlib.suppress(OSError), open(maps, "rb") as fh:
        for line in fh:
            cols = line.split(None, 5)
            if len(cols) >= 5 and cols[4] != b"0":
                with contextlib.suppress(ValueError):
                    major, minor = cols[3].split(b":")
                    out.add((os.makedev(int(major, 16), int(minor, 16)), int(cols[4])))
    return out


ORPHAN_MIN_AGE_S = (
    60.0  # a rank that reuses a leftover name writes it (shm.cpp shared_create): its mtime is fresh
)


def orphaned_shm_buffers(shm_dir: str = SHM_DIR, proc: str = "/proc") -> list[tuple[str, int]]:
    """This user's DeepSpeed all-reduce buffers that no process has open or mapped, with their sizes: what ended CPU
    jobs left (a rank keeps its buffer open and mapped until it exits, shm.cpp). Any launcher's job, not only
    dswiz's: a plain ``deepspeed`` run, a bench, a killed test. None while a process of this user cannot be looked
    into (it might hold one)."""
    paths = [os.path.join(shm_dir, n) for n in own_shm_buffers(shm_dir)]
    if not paths:
        return []
    unseen: list[int] = []
    held = processes_holding(paths, proc, mapped=True, unseen=unseen)
    if any(_owner(proc, pid) == os.getuid() for pid in unseen):
        return []
    out = []
    for path in paths:
        with contextlib.suppress(OSError):
            if path not in held:
                out.append((path, os.lstat(path).st_size))
    return out


def _owner(proc: str, pid: int) -> int | None:
    try:
        return os.stat(os.path.join(proc, str(pid))).st_uid
    except OSError:
        return None


def remove_orphaned_shm_buffers(
    shm_dir: str = SHM_DIR, proc: str = "/proc", min_age_s: float = ORPHAN_MIN_AGE_S
) -> tuple[int, int]:
    """Remove ``orphaned_shm_buffers`` not written for ``min_age_s``: (files removed, their bytes). The holders are
    looked up twice, and each file's age checked right before it goes: a new job on the same master port opens and
    writes the same name, and its other ranks wait for ever if the name is gone before they open it."""
    candidates = {path for path, _ in orphaned_shm_buffers(shm_dir, proc)}
    if not candidates:
        return 0, 0
    still = {path: size for path, size in orphaned_shm_buffers(shm_dir, proc) if path in candidates}
    removed, freed = 0, 0
    for path, size in sorted(still.items()):
        with contextlib.suppress(OSError):
            if time.time() - os.lstat(path).st_mtime < min_age_s:
                continue
            os.unlink(path)
            removed, freed = removed + 1, freed + size
    return removed, freed


def replace_text(path: str, text: str) -> None:
    """``path`` replaced by ``text`` at once (temp file in its folder, fsync, mode 0600, rename): a reader never
    sees half a file. runner.rundir writes run.json with it too."""
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def lost_verdict(
    supervisor_pid: int, found: int, sigkilled: bool, took_s: float, by: str = "its reaper"
) -> dict[str, object]:
    """run.json's verdict when dswiz died before writing its own (``by``: who stopped what was left)."""
    if found:
        how = "SIGTERM, then SIGKILL" if sigkilled else "SIGTERM"
        stopped = f"{by} stopped the job's {found} process(es) in {took_s:.1f} s ({how})"
    else:
        stopped = "no process of the job was left"
    return {
        "kind": "supervisor_lost",
        "summary": f"supervisor lost: dswiz (pid {supervisor_pid}) ended without a verdict; {stopped}",
        "rank": None,
        "exception": None,
        "advice": [
            "dswiz was killed (the out-of-memory killer, a scheduler, kill -9) or crashed: "
            "`dmesg -T | grep -i -E 'killed process|out of memory'` tells the OOM killer",
            "the job's output up to then is in logs/ of the run directory",
        ],
        "evidence": [],
    }


def mark_supervisor_lost(run_dir: str, verdict: dict[str, object]) -> bool:
    """Write the verdict into run.json unless dswiz wrote an end itself. False when there is no run dir any more."""
    if not os.path.isdir(run_dir):
        return False
    path = os.path.join(run_dir, "run.json")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        data = None
    if not isinstance(
        data, dict
    ):  # dswiz died before its first record: a minimal one, readable as a RunRecord
        data = {"run_id": os.path.basename(run_dir.rstrip("/")), "run_dir": run_dir, "status": "running"}
        data.update(started_at=time.time(), command=[], command_line="")
    if data.get("status") != "running":
        return True  # dswiz saw the end and wrote it
    data.update(status=STATUS_SUPERVISOR_LOST, ended_at=time.time(), exit_code=None, verdict=verdict)
    try:
        replace_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    except OSError:
        return False
    return True


def watch(lifeline: Iterable[bytes], run_dir: str, token: str, supervisor_pid: int, grace_s: float) -> int:
    """Read the lifeline until it ends; act when it ends without ``done``. Returns the exit code. ``run_dir`` empty:
    no run.json to write (a bench's children)."""
    sids: list[int] = []
    ports: list[int] = []
    for raw in lifeline:
        word, _, arg = raw.decode("ascii", "replace").strip().partition(" ")
        if word == "done":
            return 0
        if word == "sid" and arg.isdigit():
            sids.append(int(arg))
        if word == "port" and arg.isdigit():
            ports.append(int(arg))
    found, sigkilled, took = stop_job(sids, token, grace_s)
    if run_dir:
        mark_supervisor_lost(run_dir, lost_verdict(supervisor_pid, found, sigkilled, took))
    with contextlib.suppress(Exception):  # the verdict is written: a cleanup error only leaves files behind
        remove_shm_buffers(ports)
        remove_orphaned_shm_buffers(min_age_s=0.0)  # the job it just stopped wrote its own files moments ago
    print(f"supervisor {supervisor_pid} lost: stopped {found} process(es) in {took:.1f} s", flush=True)
    return 3


class ReaperLink:
    """dswiz's end of the reaper's lifeline. Telling fails quietly: a reaper that died only means the job is no
    longer protected against dswiz's own death (``alive`` says so)."""

    def __init__(self, proc: subprocess.Popen[bytes], lifeline_fd: int) -> None:
        self.proc = proc
        self._fd: int | None = lifeline_fd

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self._fd is not None and self.proc.poll() is None

    def _tell(self, line: str) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, (line + "\n").encode("ascii"))
        except OSError:  # the reaper is gone
            self.close()

    def add_session(self, sid: int) -> None:
        self._tell(f"sid {sid}")

    def add_port(self, port: int) -> None:
        self._tell(f"port {port}")

    def done(self) -> None:
        """The job is over and its verdict written: the reaper exits without acting."""
        self._tell("done")
        self.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2.0)

    def close(self) -> None:
        """Close the lifeline without ``done``: the reaper stops whatever is left of the job and writes the verdict
        if none is written (what happens on its own when dswiz dies)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def start_reaper(run_dir: str | None, token: str, grace_s: float) -> ReaperLink:
    """Start the reaper for this job (before its first launcher); ``run_dir`` None: no run.json to write. Raises
    OSError when it cannot start."""
    read_fd, write_fd = os.pipe()  # neither end is inherited by anything else dswiz starts
    try:
        proc = subprocess.Popen(
            # -I: no PYTHONPATH, no user site, no script folder on sys.path: only the standard library is imported
            [sys.executable, "-I", "-S", os.path.abspath(__file__), run_dir or "", token, str(os.getpid()),
             f"{grace_s:g}"],
            stdin=read_fd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C or SIGHUP at the terminal does not reach it
            env={k: v for k, v in os.environ.items() if k != TOKEN_ENV},
        )  # fmt: skip
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    return ReaperLink(proc, write_fd)


def main(argv: list[str]) -> int:
    """``reaper.py RUN_DIR TOKEN SUPERVISOR_PID GRACE_S`` (RUN_DIR may be empty); the lifeline on stdin.
    ``reaper.py --remove-orphaned-shm``: remove this user's DeepSpeed all-reduce files that no process holds, say how
    many (the fix ``dswiz launch``'s preflight gives)."""
    if argv == ["--remove-orphaned-shm"]:
        files, freed = remove_orphaned_shm_buffers()
        print(f"removed {files} DeepSpeed all-reduce file(s) from {SHM_DIR} ({freed / 2**20:.1f} MiB)")
        return 0
    run_dir, token, supervisor_pid, grace = argv
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)  # only the lifeline (or SIGKILL) ends the reaper
    return watch(iter(sys.stdin.buffer.readline, b""), run_dir, token, int(supervisor_pid), float(grace))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
