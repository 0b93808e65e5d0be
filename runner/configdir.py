"""What ``dswiz launch --config DIR|FILE`` finds: the DeepSpeed JSON, the accelerate YAML, the hostfile, the
``.deepspeed_env`` and the hints ``dswiz config``'s launch.sh gives (launcher, config argument, multi-node mode).

File names follow ``dswiz config`` (wizard/config/schema.py): ds_config.json, accelerate.yaml, hostfile,
.deepspeed_env, launch.sh. A folder written by hand works too: one *.json and/or one *.yaml is enough.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wizard.config.parse import parse_json
from wizard.errors import DswizError, read_user_text
from wizard.fsio import settle_file_set
from wizard.launch_command import accelerate_ds_config_file

DS_CONFIG_NAME = "ds_config.json"
ACCELERATE_YAML_NAMES = ("accelerate.yaml", "accelerate.yml", "accelerate_config.yaml")
HOSTFILE_NAME = "hostfile"
DEEPSPEED_ENV_NAME = ".deepspeed_env"
LAUNCH_SH_NAME = "launch.sh"
PLAN_SIDECAR_NAME = "dswiz-plan.json"  # wizard.config.sidecar.SIDECAR_NAME


@dataclass(frozen=True)
class ConfigChoice:
    ds_config: Path | None = None
    accelerate_yaml: Path | None = None
    hostfile: Path | None = None
    deepspeed_env: Path | None = None
    launcher: str | None = None  # from launch.sh: "deepspeed" | "accelerate" | "torchrun"
    config_arg: str | None = None  # from launch.sh: "deepspeed" (HF Trainer) | "deepspeed_config"
    multinode_launcher: str | None = None  # from launch.sh
    master_port: int | None = None  # from launch.sh
    master_addr: str | None = None  # from launch.sh (multi-node: the first host, as planned)
    nproc: int | None = None  # from launch.sh: --num_gpus (the GPUs per node the plan was made for)
    # from launch.sh: False when it passes --no_local_rank (dswiz config --no-local-rank)
    local_rank_arg: bool = True
    plan_sidecar: Path | None = None  # dswiz-plan.json: the plan behind the configs (wizard.config.sidecar)
    folder: Path | None = None  # the config folder (as given; a file's parent)


def find_configs(path: str | Path) -> ConfigChoice:
    """Resolve ``--config``. Raises DswizError when nothing usable is there. A `dswiz config` write that was killed
    half-way in that folder is finished or undone first (wizard.fsio.settle_file_set): one whole set is read."""
    p = Path(path)
    if p.is_file():
        settle_file_set(p.parent)
        return _from_file(p)
    if not p.is_dir():
        raise DswizError(
            f"--config {path}: no such file or folder", "pass the folder `dswiz config` wrote, or a file"
        )
    settle_file_set(p)
    ds = p / DS_CONFIG_NAME if (p / DS_CONFIG_NAME).is_file() else _single(p, "*.json")
    yml = next((p / n for n in ACCELERATE_YAML_NAMES if (p / n).is_file()), None) or _single(p, "*.yaml")
    if ds is None and yml is None:
        raise DswizError(
            f"{path} holds no DeepSpeed JSON and no accelerate YAML",
            "write one with `dswiz config --out DIR`, or pass the config file itself",
        )
    if ds is None and yml is not None:
        named = _yaml_ds_file(yml)
        ds = named
    hostfile = p / HOSTFILE_NAME if (p / HOSTFILE_NAME).is_file() else None
    env = p / DEEPSPEED_ENV_NAME if (p / DEEPSPEED_ENV_NAME).is_file() else None
    hints = _launch_sh_hints(p / LAUNCH_SH_NAME)
    return ConfigChoice(
        ds_config=ds,
        accelerate_yaml=yml,
        hostfile=hostfile,
        deepspeed_env=env,
        plan_sidecar=_sidecar(p),
        folder=p,
        **hints,
    )


def _sidecar(directory: Path) -> Path | None:
    path = directory / PLAN_SIDECAR_NAME
    return path if path.is_file() else None


def _from_file(p: Path) -> ConfigChoice:
    sidecar, folder = _sidecar(p.parent), p.parent
    if p.suffix in (".yaml", ".yml"):
        return ConfigChoice(
            ds_config=_yaml_ds_file(p),
            accelerate_yaml=p,
            launcher="accelerate",
            plan_sidecar=sidecar,
            folder=folder,
        )
    return ConfigChoice(ds_config=p, plan_sidecar=sidecar, folder=folder)


def _single(directory: Path, pattern: str) -> Path | None:
    found = sorted(x for x in directory.glob(pattern) if x.is_file())
    if len(found) > 1:
        names = ", ".join(x.name for x in found)
        raise DswizError(
            f"{directory} holds several {pattern} files ({names}); which one is the config?",
            "pass the file itself: --config DIR/NAME",
        )
    return found[0] if found else None


def _yaml_ds_file(yml: Path) -> Path | None:
    """The JSON an accelerate YAML names: as written (relative to the working directory, as accelerate opens it),
    else next to the YAML."""
    named = accelerate_ds_config_file(
        read_user_text(
            yml, "an accelerate YAML", "pass the folder `dswiz config` wrote, or the config file itself"
        )
    )
    if named is None:
        return None
    for candidate in (Path(named), yml.parent / named):
        if candidate.is_file():
            return candidate
    raise DswizError(
        f"{yml} names deepspeed_config_file {named}, which does not exist",
        "fix the path in the YAML (absolute is safest), or regenerate the folder with `dswiz config`",
    )


def launch_sh_local_rank_arg(folder: Path) -> bool:
    """Whether the launch.sh `dswiz config` wrote in ``folder`` puts --local_rank=N on the script's command line
    (False: it passes --no_local_rank); True where there is none."""
    return bool(_launch_sh_hints(folder / LAUNCH_SH_NAME).get("local_rank_arg", True))


def _launch_sh_hints(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # hints only: launch.sh is the user's to edit
        return {}
    # a command split over lines with a trailing backslash is one line to the shell, and one here
    text = re.sub(r"\\\r?\n", " ", text)
    exec_line = next((ln.strip() for ln in text.splitlines() if ln.lstrip().startswith("exec ")), "")
    hints: dict[str, Any] = {}
    # Written by wizard.launch_command.build_command ("$PYTHON" -m accelerate.commands.launch / deepspeed.launcher.runner);
    # older dswiz versions wrote `accelerate launch` / `deepspeed`.
    words = exec_line.split()
    if (
        "accelerate.commands.launch" in words
        or "accelerate" in words[1:2]
        or "accelerate launch" in exec_line
    ):
        hints["launcher"] = "accelerate"
    elif re.search(r"\s(torchrun|torch\.distributed\.run)\s", exec_line):
        # the "standard" multi-node launcher: torchrun on every node (wizard/config/launchers.py)
        hints["launcher"] = "torchrun"
        hints["config_arg"] = "deepspeed" if re.search(r"\s--deepspeed\s", exec_line) else "deepspeed_config"
        m = re.search(r"--nproc_per_node\s+(\d{1,6})\b", exec_line)
        if m:
            hints["nproc"] = int(m.group(1))
    elif exec_line:
        hints["launcher"] = "deepspeed"
        hints["config_arg"] = "deepspeed" if re.search(r"\s--deepspeed\s", exec_line) else "deepspeed_config"
    if re.search(r"\s--no_local_rank(\s|$)", exec_line):
        hints["local_rank_arg"] = False
    if "--no_ssh" in exec_line:
        hints["multinode_launcher"] = "nossh"
    m = re.search(r"--launcher\s+(\w+)", exec_line)
    if m:
        hints["multinode_launcher"] = m.group(1)
    m = re.search(r"--master_port\s+(\d{1,6})\b", exec_line)
    if m:
        hints["master_port"] = int(m.group(1))
    m = re.search(r"--master_addr\s+(\S+)", exec_line)
    if m:
        hints["master_addr"] = m.group(1).strip("'\"")
    m = re.search(r"--num_gpus\s+(\d{1,6})\b", exec_line)
    if m:
        hints["nproc"] = int(m.group(1))
    return hints


def load_ds_config(path: Path) -> dict[str, Any]:
    """The DeepSpeed JSON as a dict; DswizError naming the line and column when it is not valid JSON."""
    text = read_user_text(
        path, "a DeepSpeed JSON", "pass a DeepSpeed JSON (ds_config.json) or a folder `dswiz config` wrote"
    )
    data, problem = parse_json(text)
    if problem is not None:
        raise DswizError(
            f"{path}:{problem.line or 1}:{problem.column or 1}: {problem.what}",
            f"{problem.fix} (check it with `dswiz check {path}`), or regenerate it with `dswiz config`",
        )
    if not isinstance(data, dict):
        raise DswizError(f"{path} is not a JSON object", "a DeepSpeed config is a JSON object: {...}")
    return data


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a .deepspeed_env (what DeepSpeed exports to every node)."""
    out: dict[str, str] = {}
    for line in read_user_text(
        path, "a .deepspeed_env file", "write KEY=VALUE lines, or remove the file"
    ).splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out
