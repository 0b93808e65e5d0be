"""Writers: the text of every file ``dswiz config`` produces. Pure and deterministic (stable key order, no
timestamps, no absolute paths unless passed in), so each one is golden-tested.

- ``render_ds_json``: the DeepSpeed JSON (managed keys in the schema's order, then kept unknown keys).
- ``render_accelerate_yaml``: accelerate's config, either pointing at the JSON (``deepspeed_config_file``, never
  with the keys accelerate then refuses: accelerate 1.15.0 ``accelerate/utils/dataclasses.py``
  ``DeepSpeedPlugin._deepspeed_config_checks``) or carrying the plugin settings itself.
- ``render_hostfile`` / ``render_deepspeed_env``: the launcher's hostfile and the variables other nodes need.
- ``render_launch_sh``: the exact command, as a script: built by ``wizard.launch_command.build_command`` (what ``dswiz
  launch`` runs), so the two cannot disagree.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from typing import Any

import yaml

from wizard.config.hostfile import PLACEHOLDER_NOTE, has_placeholders, hostfile_lines
from wizard.config.job_env import env_lines
from wizard.config.launchers import PER_NODE_LAUNCHERS
from wizard.config.sbatch import render_sbatch, wants_sbatch
from wizard.config.schema import (
    ACCELERATE_YAML_NAME,
    DEEPSPEED_ENV_NAME,
    DS_CONFIG_NAME,
    HOSTFILE_NAME,
    LAUNCH_SH_NAME,
    SBATCH_NAME,
    ConfigSet,
    DeepSpeedSettings,
    _Section,
)
from wizard.fsio import COMMIT_PREFIX
from wizard.launch_command import LaunchCommand, LaunchSpec, build_command, passes_local_rank


def section_to_dict(section: _Section) -> dict[str, Any]:
    """A section as a plain dict: managed keys in field order (unset ones left out), then the kept keys."""
    out: dict[str, Any] = {}
    for name in type(section).model_fields:
        if name == "unmanaged":
            continue
        value = getattr(section, name)
        if value is None:
            continue
        out[name] = section_to_dict(value) if isinstance(value, _Section) else _plain(value)
    for key, value in section.unmanaged.items():
        out[key] = value
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def ds_config_dict(settings: DeepSpeedSettings) -> dict[str, Any]:
    return section_to_dict(settings)


def render_ds_json(settings: DeepSpeedSettings) -> str:
    return json.dumps(ds_config_dict(settings), indent=2, ensure_ascii=False) + "\n"


class SpelledFloat(float):
    """A JSON number as the file spelled it (1e9, 5e-5), so that writing the file back keeps the spelling
    (json.dumps would write 1000000000.0)."""

    text: str

    def __new__(cls, text: str) -> SpelledFloat:
        value = super().__new__(cls, text)
        value.text = text
        return value


def read_json_spelled(text: str) -> Any:
    """Parse JSON keeping how each float is spelled (``SpelledFloat``); json.JSONDecodeError on bad JSON."""
    return json.loads(text, parse_float=SpelledFloat)


def dumps_spelled(data: Any, indent: int | str = 2) -> str:
    """json.dumps(data, indent=indent, ensure_ascii=False), but a ``SpelledFloat`` is written as it was spelled."""
    pad = indent if isinstance(indent, str) else " " * indent

    def write(value: Any, depth: int) -> str:
        if isinstance(value, SpelledFloat):
            return value.text
        if isinstance(value, dict) and value:
            inner = pad * (depth + 1)
            items = [
                f"{inner}{json.dumps(str(k), ensure_ascii=False)}: {write(v, depth + 1)}"
                for k, v in value.items()
            ]
            return "{\n" + ",\n".join(items) + "\n" + pad * depth + "}"
        if isinstance(value, list) and value:
            inner = pad * (depth + 1)
            return "[\n" + ",\n".join(inner + write(v, depth + 1) for v in value) + "\n" + pad * depth + "]"
        return json.dumps(value, ensure_ascii=False)

    return write(data, 0)


def accelerate_yaml_dict(config: ConfigSet) -> dict[str, Any]:
    """accelerate's ClusterConfig fields for a DeepSpeed job (``accelerate launch --config_file``): the kept
    fields, plus what ``config.deepspeed`` decides in plugin mode, plus zero3_init_flag."""
    ds: dict[str, Any] = dict(config.accelerate_ds_fields)
    if config.accelerate_mode == "config_file":
        ds.setdefault("deepspeed_config_file", DS_CONFIG_NAME)
    else:
        ds.update(plugin_fields(config.deepspeed))
    if config.zero3_init is not None:
        ds["zero3_init_flag"] = config.zero3_init
    out: dict[str, Any] = dict(config.accelerate_fields)
    out["deepspeed_config"] = dict(sorted(ds.items()))
    if config.accelerate_mode == "plugin":
        # Refused in config-file mode (even "no": DeepSpeedPlugin._deepspeed_config_checks); in plugin mode it sets DeepSpeed's precision.
        precision = config.deepspeed.precision
        if precision in ("bf16", "fp16"):
            out["mixed_precision"] = precision
    return dict(sorted(out.items()))


def plugin_fields(settings: DeepSpeedSettings) -> dict[str, Any]:
    """The accelerate plugin-mode fields that say what ``settings`` says (only those ``settings`` sets)."""
    zero = settings.zero_optimization
    ds: dict[str, Any] = {}
    if settings.gradient_accumulation_steps is not None:
        ds["gradient_accumulation_steps"] = settings.gradient_accumulation_steps
    if settings.gradient_clipping is not None:
        ds["gradient_clipping"] = settings.gradient_clipping
    if zero is not None:
        if zero.stage is not None:
            ds["zero_stage"] = zero.stage
        for name in ("offload_optimizer", "offload_param"):
            offload = getattr(zero, name)
            if offload is not None:
                ds[f"{name}_device"] = offload.device
                if offload.nvme_path is not None:
                    ds[f"{name}_nvme_path"] = offload.nvme_path
        if zero.stage3_gather_16bit_weights_on_model_save is not None:
            ds["zero3_save_16bit_model"] = zero.stage3_gather_16bit_weights_on_model_save
    return ds


def plugin_mode_drops(settings: DeepSpeedSettings) -> list[str]:
    """What the accelerate plugin mode cannot carry from ``settings`` (it builds its own DeepSpeed dict)."""
    full = ds_config_dict(settings)
    carried = {"gradient_accumulation_steps", "gradient_clipping", "bf16", "fp16"}
    dropped = [k for k in full if k not in carried and k != "zero_optimization"]
    zero = full.get("zero_optimization", {})
    carried_zero = {
        "stage",
        "offload_optimizer",
        "offload_param",
        "stage3_gather_16bit_weights_on_model_save",
    }
    dropped += [f"zero_optimization.{k}" for k in zero if k not in carried_zero]
    if "fp16" in full and set(full["fp16"]) - {"enabled"}:
        dropped.append("fp16 loss-scaling settings")
    return dropped


def render_accelerate_yaml(config: ConfigSet) -> str:
    """accelerate's YAML. Paths in it are written as built: accelerate opens them relative to the directory
    ``accelerate launch`` runs in, so ``dswiz config`` builds them absolute (WriteOptions.config_dir)."""
    header = ["# accelerate config written by dswiz: accelerate launch --config_file THIS_FILE script.py"]
    if config.accelerate_mode == "config_file":
        header.append("# DeepSpeed settings live in deepspeed_config_file; accelerate refuses them here too.")
    else:
        header.append(
            "# plugin mode: accelerate builds the DeepSpeed config from these fields; it cannot carry:"
        )
        drops = plugin_mode_drops(config.deepspeed)
        header.append("#   " + (", ".join(drops) if drops else "(nothing dswiz set is lost)"))
    body = yaml.safe_dump(accelerate_yaml_dict(config), sort_keys=False)
    return "\n".join(header) + "\n" + body


def render_hostfile(config: ConfigSet) -> str:
    """``host slots=N`` per node (DeepSpeed's launcher/runner.py format); '#' lines are comments to it."""
    topo = config.topology
    lines = [f"# DeepSpeed hostfile written by dswiz: {topo.nodes} nodes x {topo.gpus_per_node} GPUs"]
    if has_placeholders(topo.hosts):
        lines.append(PLACEHOLDER_NOTE)
    lines += hostfile_lines(topo.hosts, topo.gpus_per_node)
    return "\n".join(lines) + "\n"


def render_deepspeed_env(config: ConfigSet) -> str:
    """``KEY=VALUE`` lines, nothing else: DeepSpeed splits every line on '=' and would crash on a blank line or
    export a comment as a variable (launcher/runner.py)."""
    return "".join(f"{key}={value}\n" for key, value in sorted(config.node_env.items()))


def launch_spec(config: ConfigSet, *, config_dir: str = "$DIR", script: str = "$SCRIPT") -> LaunchSpec:
    """The launch of these configs as ``dswiz launch`` describes it (``wizard.launch_command.LaunchSpec``), reading
    the files where they are (no run directory). ``$DIR``/``$SCRIPT``/``$PYTHON``/``$NODE_RANK`` stay shell
    variables."""
    topo = config.topology
    every_node = runs_on_every_node(config)
    # What every launch.sh shares: the script with the user's arguments, the training python, the configs read in
    # place, each node's environment, and the rank logs left to the launcher's own output.
    common = LaunchSpec(
        script=script,
        run_dir="",
        script_args=("$@",),
        python="$PYTHON",
        each_rank_log=False,
        env=tuple(sorted(config.node_env.items())),
        copy_configs=False,
        local_rank_arg=config.local_rank_arg,
    )
    if config.consumer == "accelerate":
        return replace(
            common,
            launcher="accelerate",
            accelerate_config=f"{config_dir}/{ACCELERATE_YAML_NAME}",
            config_arg="",  # accelerate hands the DeepSpeed config over through its YAML
            node_rank_var="NODE_RANK" if every_node else None,
        )
    # DeepSpeed's own scripts take --deepspeed_config FILE; the HF Trainer takes --deepspeed FILE.
    ds = replace(
        common,
        ds_config=f"{config_dir}/{DS_CONFIG_NAME}",
        config_arg="deepspeed" if config.consumer == "trainer" else "deepspeed_config",
        master_port=topo.master_port,
    )
    if topo.multi_node and topo.launcher == "standard":
        # torchrun on every node, no DeepSpeed runner (wizard/config/launchers.py)
        return replace(
            ds,
            launcher="torchrun",
            nproc=topo.gpus_per_node,
            hostfile=f"{config_dir}/{HOSTFILE_NAME}",
            num_nodes=topo.nodes,
            node_rank_var="NODE_RANK",
            master_addr=topo.master_addr,
        )
    return replace(
        ds,
        launcher="deepspeed",
        nproc=None if topo.multi_node else topo.gpus_per_node,  # several nodes: the hostfile's slots
        hostfile=f"{config_dir}/{HOSTFILE_NAME}" if topo.multi_node else None,
        multinode_launcher=topo.launcher if topo.multi_node else "pdsh",
        node_rank_var="NODE_RANK" if every_node else None,
        master_addr=topo.master_addr if topo.multi_node else None,
        deepspeed_env_file=f"{config_dir}/{DEEPSPEED_ENV_NAME}",
    )


def launch_passes_local_rank(config: ConfigSet) -> bool:
    """Whether the launch these configs write would put --local_rank=N on the script's command line at all
    (``wizard.launch_command.passes_local_rank``): only then does --no_local_rank mean something."""
    return passes_local_rank(launch_spec(config))


def launch_command(config: ConfigSet) -> LaunchCommand:
    """What ``launch.sh`` runs: ``wizard.launch_command.build_command``, the builder ``dswiz launch`` uses."""
    return build_command(launch_spec(config))


def runs_on_every_node(config: ConfigSet) -> bool:
    """Multi-node jobs without an ssh-driven launcher are started once per node, each with its rank."""
    topo = config.topology
    if not topo.multi_node:
        return False
    # ssh / MPI / slurm reach the other nodes from the first; nossh and standard (torchrun) run on every node
    # (accelerate: `accelerate launch --machine_rank K` there).
    return topo.launcher in PER_NODE_LAUNCHERS


def _shell_word(word: str) -> str:
    if word.startswith("$"):
        return f'"{word}"'
    if "$DIR" in word:
        return '"' + word.replace('"', '\\"') + '"'
    return shlex.quote(word)


def render_launch_sh(config: ConfigSet) -> str:
    topo = config.topology
    command = launch_command(config)
    lines = [
        "#!/usr/bin/env bash",
        "# Written by dswiz: the exact launch command for the configs in this directory (the one `dswiz launch`",
        "# builds, without its run directory). Run it from your project directory:",
        "#   bash THIS_DIR/launch.sh train.py [script args...]     (PYTHON=/path/to/python to choose the interpreter)",
    ]
    for note in config.script_notes:
        lines.append(f"# note: {note}")
    every_node = runs_on_every_node(config)
    if topo.multi_node:
        if every_node:
            lines.append("# multi-node: run this on every node with NODE_RANK=0..N-1 set (node 0 first)")
        else:
            lines.append(
                f"# multi-node: run this on the first host; the {topo.launcher} launcher starts the others"
            )
    lines += [
        "set -euo pipefail",
        'DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        # A write of this set that was killed half-way (wizard.fsio) leaves a commit folder: some files may be old,
        # some new. Any dswiz command that reads the folder finishes the write; the script must not run on it.
        f'for d in "$DIR"/{COMMIT_PREFIX}*; do [ -e "$d" ] || continue; echo "$DIR holds an interrupted config '
        r'write: run \`dswiz check $DIR\` to finish it, then run this again" >&2; exit 2; done',
        'if [ "$#" -lt 1 ]; then echo "usage: bash $0 train.py [script args...]" >&2; exit 2; fi',
        'SCRIPT="$1"; shift',
        'PYTHON="${PYTHON:-python3}"',
    ]
    if every_node:
        lines.append(': "${NODE_RANK:?set NODE_RANK to the rank of this node, 0 on the first host}"')
    # The environment dswiz launch gives the job (with .deepspeed_env: what DeepSpeed exports to other nodes).
    lines += env_lines(command.env, _shell_word)
    lines.append("exec " + " ".join(_shell_word(w) for w in command.argv))
    return "\n".join(lines) + "\n"


def render_all(config: ConfigSet) -> dict[str, str]:
    """File name -> text for the whole set (hostfile and .deepspeed_env only for a multi-node job)."""
    files = {
        DS_CONFIG_NAME: render_ds_json(config.deepspeed),
        ACCELERATE_YAML_NAME: render_accelerate_yaml(config),
    }
    if config.topology.multi_node:
        files[HOSTFILE_NAME] = render_hostfile(config)
        if config.node_env:
            files[DEEPSPEED_ENV_NAME] = render_deepspeed_env(config)
    files[LAUNCH_SH_NAME] = render_launch_sh(config)
    if wants_sbatch(config):
        spec = launch_spec(config, config_dir=config.topology.slurm.config_dir)
        files[SBATCH_NAME] = render_sbatch(config, spec)
    return files
