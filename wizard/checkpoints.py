"""DeepSpeed checkpoints on disk: find them, tell a complete ZeRO checkpoint from everything else, and say how to
turn one into full fp32 weights. Pure: file names and sizes only (reading the shards needs torch; that happens
in the training environment's python, see runner/consolidate_worker.py).

Layout written by ``engine.save_checkpoint(save_dir, tag)`` (deepspeed/runtime/engine.py, DeepSpeed 0.19)::

    save_dir/latest                                   the last tag, e.g. "global_step100"
    save_dir/<tag>/mp_rank_00_model_states.pt         ZeRO-1/2 (and stage 0): module weights, one file
    save_dir/<tag>/zero_pp_rank_<r>_mp_rank_00_model_states.pt        ZeRO-3: one per data-parallel rank
    save_dir/<tag>/[bf16_]zero_pp_rank_<r>_mp_rank_00_optim_states.pt ZeRO-1/2/3: fp32 master shards, one per rank
    save_dir/zero_to_fp32.py                           DeepSpeed's converter, copied there at each save

The HF Trainer saves into ``output_dir/checkpoint-<step>/`` (a save_dir of its own); accelerate's ``save_state``
uses the tag ``pytorch_model``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from wizard.errors import DswizError
from wizard.units import fmt_bytes

LATEST = "latest"
_OPTIM_RE = re.compile(r"^(?:(?:bf16|fp16)_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
_ZERO3_MODEL_RE = re.compile(r"^zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt$")
_MODEL_RE = re.compile(r"^mp_rank_(\d+)_model_states\.pt$")
_MOE_RE = re.compile(
    r"^(?:expp_rank_\d+_mp_rank_\d+_optim_states|(?:layer_\d+_)?expert_\d+_mp_rank_\d+_model_states)\.pt$"
)
_STATES_SUFFIX = "_model_states.pt"

# What a ZeRO checkpoint costs to consolidate: DeepSpeed's zero_to_fp32 holds the fp32 shards and builds each full
# tensor from them; "about twice the checkpoint size" of free RAM is the margin the issue asks for.
MEMORY_FACTOR = 2.0

_WHERE_CHECKPOINTS_COME_FROM = (
    "pass the directory your script gave to engine.save_checkpoint() / accelerator.save_state(), "
    "or the Trainer's output_dir/checkpoint-<step> folder (the one holding the `latest` file)"
)


@dataclass(frozen=True)
class ZeroCheckpoint:
    """One complete, tagged ZeRO checkpoint: what `dswiz consolidate` converts."""

    root: Path  # the directory save_checkpoint() was given (holds `latest` and the tag folders)
    tag: str
    zero_stage: int | None  # 3, or None for "1 or 2" (the file names do not tell them apart)
    world_size: int  # data-parallel ranks that saved an optimizer shard
    files: tuple[Path, ...]  # the shard files zero_to_fp32 reads, sorted
    size_bytes: int  # their total size
    optimizer_bytes: int = 0  # the optimizer shards' part of it

    @property
    def tag_dir(self) -> Path:
        return self.root / self.tag

    @property
    def stage_text(self) -> str:
        return "ZeRO-3" if self.zero_stage == 3 else "ZeRO-1/2"

    @property
    def memory_needed_bytes(self) -> int:
        return int(self.size_bytes * MEMORY_FACTOR)

    @property
    def weights_estimate_bytes(self) -> int:
        """Size of the fp32 weights: the optimizer shards hold them plus, with Adam, two states of the same size."""
        return self.optimizer_bytes // 3


def natural_key(text: str) -> list[int | str]:
    """``global_step10`` after ``global_step9`` (DeepSpeed sorts its shard files the same way)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _names(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def is_tag_dir(path: Path) -> bool:
    """A folder one save_checkpoint() call wrote: it holds ``*_model_states.pt`` files."""
    return path.is_dir() and any(n.endswith(_STATES_SUFFIX) for n in _names(path))


def list_tags(root: Path) -> list[str]:
    """The tag folders directly inside ``root``, in natural order."""
    return sorted((n for n in _names(root) if is_tag_dir(root / n)), key=natural_key)


def read_latest(root: Path) -> str | None:
    """The tag in ``root/latest`` (None when there is no such file or it is empty)."""
    try:
        text = (root / LATEST).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return text or None


def is_checkpoint_root(path: Path) -> bool:
    return path.is_dir() and ((path / LATEST).is_file() or bool(list_tags(path)))


def find_checkpoint_roots(
    sources: Iterable[str | Path], *, max_depth: int = 3, max_dirs: int = 5000
) -> list[Path]:
    """Checkpoint directories at or below ``sources`` (a tag folder given directly counts for its parent).

    Bounded (depth and number of folders visited) so that pointing it at a home directory stays quick; hidden
    folders are skipped. Sorted, no duplicates.
    """
    found: set[Path] = set()
    visited = 0
    for source in sources:
        start = Path(source)
        if is_tag_dir(start):
            found.add(start.parent.resolve())
            continue
        stack = [(start, 0)]
        while stack and visited < max_dirs:
            path, depth = stack.pop()
            visited += 1
            if not path.is_dir():
                continue
            if is_checkpoint_root(path):
                found.add(path.resolve())
                continue  # its tag folders are not roots of their own
            if depth >= max_depth:
                continue
            for name in reversed(_names(path)):
                child = path / name
                if not name.startswith(".") and child.is_dir() and not child.is_symlink():
                    stack.append((child, depth + 1))
    return sorted(found, key=lambda p: natural_key(str(p)))


# -- inspecting one checkpoint ------------------------------------------------------------------------------


def _resolve_root_and_tag(path: Path, tag: str | None) -> tuple[Path, str]:
    if not path.exists():
        raise DswizError(f"{path} does not exist", _WHERE_CHECKPOINTS_COME_FROM)
    if not path.is_dir():
        hint = f"pass the directory instead: {path.parent}" if path.parent != path else None
        raise DswizError(
            f"{path} is a file, not a checkpoint directory", hint or _WHERE_CHECKPOINTS_COME_FROM
        )
    if is_tag_dir(path):  # the user pointed at save_dir/<tag> itself
        if tag is not None and tag != path.name:
            raise DswizError(
                f"{path} is already the checkpoint of tag {path.name!r}, but --tag {tag} was given",
                f"drop --tag, or pass the parent directory {path.parent} with --tag {tag}",
            )
        return path.parent, path.name
    tags = list_tags(path)
    if tag is None:
        tag = read_latest(path)
        if tag is None:
            if tags:
                what = "an empty `latest` file" if (path / LATEST).exists() else "no `latest` file"
                raise DswizError(
                    f"{path} has {what}, so it is not clear which checkpoint to convert",
                    f"pass --tag with one of: {', '.join(tags)}",
                )
            nested = [p for p in find_checkpoint_roots([path], max_depth=2) if p != path.resolve()]
            if nested:
                shown = ", ".join(str(p) for p in nested[:5]) + (" ..." if len(nested) > 5 else "")
                raise DswizError(
                    f"{path} holds no checkpoint itself, but directories below it do: {shown}",
                    f"pass one of them, e.g. dswiz consolidate {shlex.quote(str(nested[-1]))} OUT",
                )
            raise DswizError(
                f"{path} is not a DeepSpeed checkpoint directory (no `latest` file, no tag folder with "
                "*_model_states.pt files)",
                _WHERE_CHECKPOINTS_COME_FROM,
            )
        if not (path / tag).is_dir():
            available = f"available: {', '.join(tags)}" if tags else "the directory holds no tag folder"
            raise DswizError(
                f"{path}/latest names tag {tag!r}, but {path / tag} does not exist ({available})",
                "the save was interrupted or the folder was moved; pass --tag with an existing tag",
            )
        return path, tag
    if not (path / tag).is_dir():
        available = f"available tags: {', '.join(tags)}" if tags else "no tag folder found there"
        raise DswizError(
            f"tag {tag!r} not found in {path} ({available})", "pass --tag with one of the available tags"
        )
    return path, tag


def _refuse_model_parallel(name: str, mp_rank: str) -> None:
    if int(mp_rank) != 0:
        raise DswizError(
            f"{name}: this checkpoint is model-parallel (tensor/pipeline ranks mp_rank_01 and up); "
            "DeepSpeed's zero_to_fp32 only handles data-parallel ZeRO checkpoints",
            "convert it with DeepSpeed's universal checkpoint tool "
            "(python -m deepspeed.checkpoint.ds_to_universal) instead",
        )


def _ranks(names: Iterable[str], pattern: re.Pattern[str]) -> dict[int, list[str]]:
    """rank -> file names, for files matching ``pattern`` (groups: data-parallel rank, then mp rank if any)."""
    by_rank: dict[int, list[str]] = {}
    for name in names:
        m = pattern.match(name)
        if m:
            _refuse_model_parallel(name, m.group(m.re.groups))
            by_rank.setdefault(int(m.group(1)), []).append(name)
    return by_rank


def _check_ranks(tag_dir: Path, by_rank: dict[int, list[str]], what: str) -> None:
    for rank, names in sorted(by_rank.items()):
        if len(names) > 1:
            raise DswizError(
                f"{tag_dir} holds two {what} for rank {rank} ({', '.join(sorted(names))}): two saves were mixed",
                "save again into an empty directory, or remove the stale file",
            )
    missing = sorted(set(range(max(by_rank) + 1)) - set(by_rank))
    if missing:
        raise DswizError(
            f"{tag_dir} is incomplete: the {what} of rank(s) {', '.join(map(str, missing))} are missing "
            f"(found ranks {', '.join(map(str, sorted(by_rank)))})",
            "every rank must finish engine.save_checkpoint(); use another tag or save again",
        )


def inspect_checkpoint(path: str | Path, tag: str | None = None) -> ZeroCheckpoint:
    """Resolve ``path`` (+ ``tag``, else the ``latest`` file) to a complete ZeRO checkpoint, or raise DswizError
    naming what is wrong (not a checkpoint, no tag, stage 0, missing shards, model parallel, MoE)."""
    root, tag = _resolve_root_and_tag(Path(path), tag)
    tag_dir = root / tag
    names = _names(tag_dir)
    moe = [n for n in names if _MOE_RE.match(n)]
    if moe:
        raise DswizError(
            f"{tag_dir} is a mixture-of-experts checkpoint ({moe[0]}, ...); DeepSpeed's zero_to_fp32 "
            "cannot rebuild expert weights",
            "convert it with python -m deepspeed.checkpoint.ds_to_universal, or save 16-bit weights from the "
            "training script (stage3_gather_16bit_weights_on_model_save)",
        )
    model_files = [n for n in names if n.endswith(_STATES_SUFFIX)]
    optim = _ranks(names, _OPTIM_RE)
    zero3_models = _ranks(names, _ZERO3_MODEL_RE)
    plain_models = _ranks(names, _MODEL_RE)
    if not model_files:
        raise DswizError(
            f"{tag_dir} holds no *_model_states.pt file: not a DeepSpeed checkpoint, or an interrupted save",
            _WHERE_CHECKPOINTS_COME_FROM,
        )
    if not optim:
        if zero3_models:
            raise DswizError(
                f"{tag_dir} has ZeRO-3 model files but no optimizer shards (*_optim_states.pt), and the fp32 "
                "weights live only there (saved by an engine without an optimizer, or the save was cut short)",
                "save the checkpoint from the training engine (with its optimizer) and convert that one",
            )
        model = tag_dir / (model_files[0])
        raise DswizError(
            f"{tag_dir} has no optimizer shards (*_optim_states.pt): it was saved without ZeRO partitioning "
            "(stage 0), so there are no shards to consolidate",
            f"the full weights are already in {model}: "
            f"torch.load({str(model)!r}, weights_only=False)['module']",
        )
    _check_ranks(tag_dir, optim, "optimizer shards")
    if zero3_models:
        _check_ranks(tag_dir, zero3_models, "ZeRO-3 model files")
        if set(zero3_models) != set(optim):
            raise DswizError(
                f"{tag_dir} is incomplete: {len(zero3_models)} ZeRO-3 model file(s) but {len(optim)} "
                "optimizer shard(s)",
                "every rank must finish engine.save_checkpoint(); use another tag or save again",
            )
        used = [n for ns in zero3_models.values() for n in ns]
    elif 0 in plain_models:
        used = plain_models[0]
    else:
        raise DswizError(
            f"{tag_dir} has optimizer shards but no mp_rank_00_model_states.pt (ZeRO-1/2) or "
            "zero_pp_rank_*_model_states.pt (ZeRO-3) file",
            "the save was cut short; use another tag or save again",
        )
    used += [n for ns in optim.values() for n in ns]
    files = tuple(sorted((tag_dir / n for n in used), key=lambda p: natural_key(p.name)))
    sizes: dict[Path, int] = {}
    for f in files:
        try:
            sizes[f] = f.stat().st_size
        except OSError as e:
            raise DswizError(f"cannot read {f}: {e.strerror}", "check the file's permissions") from e
    return ZeroCheckpoint(
        root=root,
        tag=tag,
        zero_stage=3 if zero3_models else None,
        world_size=len(optim),
        files=files,
        size_bytes=sum(sizes.values()),
        optimizer_bytes=sum(n for f, n in sizes.items() if f.name.endswith("_optim_states.pt")),
    )


def check_memory(ckpt: ZeroCheckpoint, available_bytes: int | None) -> str | None:
    """Raise DswizError when free RAM is below about twice the checkpoint size; return a warning when the free
    RAM is unknown, else None."""
    need = ckpt.memory_needed_bytes
    if available_bytes is None:
        return f"could not read the free RAM; consolidating needs about {fmt_bytes(need)}"
    if available_bytes < need:
        raise DswizError(
            f"consolidating {ckpt.tag_dir} needs about {fmt_bytes(need)} of free RAM "
            f"({MEMORY_FACTOR:g} x {fmt_bytes(ckpt.size_bytes)} of shards); {fmt_bytes(available_bytes)} is available",
            "free memory (stop other jobs), run it on a machine with more RAM, or pass --skip-memory-check "
            "to try anyway (the kernel may kill it)",
        )
    return None


# -- after a run: where are the checkpoints and how to consolidate them --------------------------------------

# engine.py logs "Saving model checkpoint: <save_dir>/<tag>/..._model_states.pt" (log_level info); the HF
# Trainer logs "Saving model checkpoint to <output_dir>/checkpoint-<step>"; train_tiny.py prints "checkpoint saved to".
_LOG_PATTERNS = (
    re.compile(r"Saving model checkpoint: (\S+_model_states\.pt)"),
    re.compile(r"Saving model checkpoint to (\S+)"),
    re.compile(r"checkpoint saved to (\S+)"),
)


def checkpoint_paths_from_log(text: str, cwd: str | Path | None = None) -> list[Path]:
    """Directories a job's output says it saved checkpoints to (relative paths resolved against ``cwd``)."""
    base = Path(cwd) if cwd is not None else Path.cwd()
    paths: list[Path] = []
    for pattern in _LOG_PATTERNS:
        for m in pattern.finditer(text):
            p = Path(m.group(1).rstrip(".,;:'\""))
            p = p if p.is_absolute() else base / p
            if p.name.endswith(_STATES_SUFFIX):
                p = p.parent
            if p not in paths:
                paths.append(p)
    return paths


# Script arguments that name where a training script saves (DeepSpeed examples, the HF Trainer, train_tiny.py).
OUTPUT_DIR_FLAGS = (
    "--save-dir",
    "--save_dir",
    "--save",
    "--output_dir",
    "--output-dir",
    "--checkpoint_dir",
    "--checkpoint-dir",
    "--ckpt_dir",
    "--ckpt-dir",
)


def output_dirs_from_args(argv: Iterable[str], cwd: str | Path | None = None) -> list[Path]:
    """The directories a training script's arguments name as its output (``--output_dir DIR``, ``--save-dir=DIR``
    …), relative ones resolved against ``cwd``: where to look for checkpoints after the run."""
    base = Path(cwd) if cwd is not None else Path.cwd()
    args = list(argv)
    found: list[Path] = []
    for i, arg in enumerate(args):
        value = None
        for flag in OUTPUT_DIR_FLAGS:
            if arg == flag and i + 1 < len(args) and not args[i + 1].startswith("-"):
                value = args[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
        if value:
            p = Path(value).expanduser()
            p = p if p.is_absolute() else base / p
            if p not in found:
                found.append(p)
    return found


def consolidate_command(root: Path, tag: str | None = None, out: Path | None = None) -> str:
    """The exact `dswiz consolidate` command line for a checkpoint root."""
    out = out or root.with_name(f"{root.name}-fp32")
    parts = ["dswiz", "consolidate", str(root), str(out)]
    if tag is not None:
        parts += ["--tag", tag]
    return " ".join(shlex.quote(p) for p in parts)


def checkpoint_hint(
    sources: Iterable[str | Path] = (), *, log_text: str = "", cwd: str | Path | None = None
) -> str:
    """What the verdict says after a run: where the checkpoints are and the command that turns the newest one
    into full fp32 weights. ``sources`` are folders to look in (the job's cwd, its --output_dir, ...), ``log_text``
    the job's output. Returns "" when no checkpoint is found."""
    candidates = [*checkpoint_paths_from_log(log_text, cwd), *(Path(s) for s in sources)]
    roots = find_checkpoint_roots([c for c in candidates if c.exists()])
    lines: list[str] = []
    for root in roots[:5]:
        tags = list_tags(root)
        latest = read_latest(root)
        tag = latest if latest in tags else (tags[-1] if tags else None)
        if tag is None:
            continue
        try:
            ckpt = inspect_checkpoint(root, tag)
        except DswizError as e:
            lines.append(f"checkpoint {root / tag}: {e.problem}")
            if e.fix:
                lines.append(f"  {e.fix}")
            continue
        others = f"; also {', '.join(t for t in tags if t != tag)}" if len(tags) > 1 else ""
        lines.append(
            f"checkpoint {ckpt.tag_dir} ({ckpt.stage_text}, {ckpt.world_size} shard(s), "
            f"{fmt_bytes(ckpt.size_bytes)}{others})"
        )
        lines.append("  full fp32 weights: " + consolidate_command(root, None if tag == latest else tag))
    if len(roots) > 5:
        lines.append(f"... and {len(roots) - 5} more checkpoint directories")
    return "\n".join(lines)
