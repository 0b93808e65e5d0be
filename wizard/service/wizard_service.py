"""The one service the wizard's front doors call: the full-screen wizard's screens and the line prompts.

It decides nothing itself: hardware comes from ``wizard.hardware``, model specs from ``wizard.model``, candidates and
predictions from ``wizard.planner`` (the real ``Plan`` / ``Candidate`` / ``MaxBatchRow``), files and findings from
``wizard.config`` through ``wizard.service.files``. It imports no terminal library.

One seam: what "this machine" is (``hardware_source``), so a test does not depend on the machine that runs it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wizard import alloc_conf, planner
from wizard.config.hostfile import hostfile_lines, placeholder_hosts
from wizard.config.launchers import LAUNCHER_NOTES, launcher_problems
from wizard.errors import DswizError
from wizard.findings import Finding
from wizard.fsio import WriteResult
from wizard.hardware import get_hardware
from wizard.hardware.report import HardwareReport
from wizard.model import ModelSpec, load_model_spec, preset_names
from wizard.planner import Candidate, Capacities, MaxBatchRow, Plan, PlanRequest
from wizard.service import files as written
from wizard.service.choices import DEFAULT_OUT_DIR, Choices, gpu_memory_for
from wizard.service.history import with_history
from wizard.service.key_diff import KeyChange, key_diff
from wizard.strategy import PRECISIONS, Mode, Precision, Strategy
from wizard.tuning import FULL, FineTune
from wizard.units import fmt_bytes

# The config writers, loader and linter (wizard.config's schema, build, load, reimport, render, nvme, lint/) build
# pydantic models when imported (~0.5 s): each is imported where it is first used, so the wizard's first frame and
# `dswiz --plain`'s first question are not kept waiting.
if TYPE_CHECKING:
    from wizard.config.build import WriteOptions
    from wizard.config.load import LoadedConfig
    from wizard.config.reimport import BatchOnTopology
    from wizard.config.schema import ConfigSet

HardwareSource = Callable[[str | None], HardwareReport]


class WizardService:
    """What the wizard asks of dswiz, for one session. ``hardware_source(spec)`` reads a described machine or, for
    ``None``, detects this one (``wizard.hardware.get_hardware`` unless a test fixes it)."""

    LAUNCHER_NOTES: Mapping[str, str] = LAUNCHER_NOTES

    def __init__(
        self,
        hardware_source: HardwareSource = get_hardware,
        *,
        use_history: bool = True,
        expandable_segments: bool | None = None,
    ) -> None:
        self._hardware_source = hardware_source
        self._use_history = use_history  # False: --no-history, the physics alone
        # The job will run PyTorch's allocator with expandable segments (None: as this environment's allocator
        # settings say): planned for, and written into the configs' environment.
        self.expandable_segments = alloc_conf.planned_expandable_segments(expandable_segments, os.environ)
        # the calibrated base request for the hardware it was read for (the history is read once per hardware)
        self._history: tuple[HardwareReport, PlanRequest] | None = None

    # ------------------------------------------------------------ hardware and model

    def get_hardware(self, spec: str | None) -> HardwareReport:
        """Detect this machine (``None``) or describe one ("8xA100-80GB", "2x8xH100", a YAML profile)."""
        return self._hardware_source(spec)

    def model_presets(self) -> list[str]:
        return sorted(preset_names())

    def load_model(self, text: str, finetune: FineTune = FULL) -> ModelSpec:
        """The model as typed (preset, hub id, folder, config.json, numbers), trained as ``finetune`` says."""
        if not text.strip():
            raise DswizError(
                "no model given", "type a preset name, a hub id, a path to a config.json, or numbers"
            )
        return planner.with_finetune(load_model_spec(text.strip()), finetune)

    def describe_model(self, model: ModelSpec) -> str:
        """One line about the ModelSpec the planner will use, then its notes."""
        total = model.total_params
        size = f"{total / 1e9:.2f} B" if total >= 1e8 else f"{total / 1e6:.1f} M"
        parts = [
            f"{model.name}: {size} parameters",
            f"{model.layers} layers, hidden {model.hidden}, {model.heads} heads, vocab {model.vocab}",
        ]
        if model.num_experts:
            parts.append(f"{model.num_experts} experts ({model.experts_per_token} per token)")
        if not model.exact:
            parts.append("shape guessed from the parameter count")
        if model.finetune.uses_lora:
            parts.append(
                f"{model.finetune.label()}, {planner.trainable_params(model):,} trainable parameters"
            )
        return "; ".join(parts) + "".join(f"\n  {n}" for n in model.notes)

    @staticmethod
    def save_16bit_cost(model: ModelSpec | None) -> str:
        """What gathering the 16-bit weights on save costs, in words and bytes from the model spec (DeepSpeed 0.19.8
        engine._zero3_consolidated_16bit_state_dict: one module at a time is gathered on the GPU and copied to rank
        0's host RAM, which ends up holding the whole 16-bit model; save_16bit_model then writes it as one file)."""
        if model is None:
            return "rank 0 collects the whole 16-bit model in host RAM and writes it to disk as one file"
        gpu = f"; the GPU holds one module at a time ({fmt_bytes(2 * model.largest_layer_params)})"
        return (
            f"at each save rank 0 collects all {fmt_bytes(2 * model.total_params)} of 16-bit weights in host RAM "
            f"and writes them to disk as one file{gpu}; without it, dswiz consolidate rebuilds the weights from "
            "the ZeRO shards"
        )

    # ------------------------------------------------------------ planning

    def request(self, choices: Choices) -> PlanRequest:
        """The planner's question for the choices so far, calibrated by the hardware's run history."""
        hw = choices.hardware
        base = PlanRequest(expandable_segments=self.expandable_segments)
        if hw is not None:
            if self._history is None or self._history[0] is not hw:
                self._history = (hw, with_history(base, hw, use=self._use_history))
            base = self._history[1]
        from wizard.service.prediction import config_builds_fused_adam

        # an imported file's optimizer section stays in what is written (stage 0's step: wizard.config.optimizer_op)
        fused = choices.imported is not None and config_builds_fused_adam(choices.imported.config)
        # more than the card: the Hardware step refuses it; planned for the card until then
        try:
            gpu_memory = gpu_memory_for(choices.gpu_memory_bytes, hw)
        except DswizError:
            gpu_memory = None
        return replace(
            base,
            seq_len=choices.seq_len,
            global_batch=choices.global_batch,
            mode=choices.mode,
            buffers=replace(base.buffers, fused_optimizer=fused),
            gpu_memory_bytes=gpu_memory,
            safety_margin=choices.safety_margin,
        )

    def plan(self, choices: Choices, model: ModelSpec) -> Plan:
        return planner.plan(_hardware(choices), model, self.request(choices))

    def start_plan(self, choices: Choices, model: ModelSpec) -> Plan:
        """Plan for ``model`` and start the strategy from the plan: the recommendation (or, when nothing fits, the
        closest candidate, so the Strategy step shows why); an imported config keeps its own choices, on this
        hardware's topology. The user's target global batch is left as they typed it."""
        plan = self.plan(choices, model)
        if not plan.candidates:
            raise DswizError("the planner found no candidate", "check the model numbers and the hardware")
        planned = (plan.best or plan.candidates[0]).strategy
        if choices.strategy is None or choices.imported_from is None:
            choices.strategy = planned
        else:
            choices.strategy = self.on_topology(choices, planned.nodes, planned.gpus_per_node)
        return plan

    def start_unplanned(self, choices: Choices) -> None:
        """No model: nothing can be predicted, the strategy is chosen by hand from ``unplanned_strategy`` (or the
        imported file's)."""
        hw = choices.hardware
        if choices.strategy is None or choices.imported_from is None:
            choices.strategy = unplanned_strategy(hw, choices.mode)
        elif hw is not None:
            choices.strategy = self.on_topology(choices, hw.nodes, max(1, hw.gpus_per_node))

    def seq_len_for(self, choices: Choices, model: ModelSpec | None) -> int | None:
        """The sequence length the planner uses: the one typed, else the model's context (at most 2048)."""
        if model is None:
            return choices.seq_len
        return self.request(choices).resolved_seq_len(model)

    def evaluate(self, choices: Choices, model: ModelSpec, strategy: Strategy) -> Candidate:
        """The planner's prediction for a strategy the user edited by hand (``wizard.planner.evaluate``): any stage,
        offloads, micro-batch, accumulation or checkpointing, judged like a planned candidate."""
        return planner.evaluate(_hardware(choices), model, strategy, self.request(choices))

    def max_batch_table(self, choices: Choices, model: ModelSpec | None) -> tuple[MaxBatchRow, ...]:
        """For each stage / offload / checkpointing choice, the largest micro-batch that fits and its tokens/s."""
        if choices.hardware is None or model is None:
            return ()
        return tuple(planner.max_batch_table(choices.hardware, model, self.request(choices)))

    def chosen_candidate(self, choices: Choices, model: ModelSpec, plan: Plan | None) -> Candidate:
        """The candidate for the chosen strategy: the plan's own when it ranked exactly this one, else the
        planner's evaluation of it (a hand-made choice)."""
        strategy = choices.strategy
        if strategy is None:
            raise DswizError("no strategy chosen yet", "go back to the Strategy step")
        if plan is None:
            return self.evaluate(choices, model, strategy)
        return planner.candidate_for(plan, strategy)

    @staticmethod
    def best_candidate_like(plan: Plan | None, strategy: Strategy) -> Candidate | None:
        """The planner's highest-ranked candidate with the same stage, offloads and precision as ``strategy`` (its
        micro-batch and accumulation are the planner's for that combination); None when the plan has none."""

        def key(s: Strategy) -> tuple[object, ...]:
            return (s.zero_stage, s.offload_optimizer, s.offload_param, s.precision)

        return next((c for c in (plan.candidates if plan else ()) if key(c.strategy) == key(strategy)), None)

    def capacity(self, choices: Choices) -> Capacities:
        """What each memory tier holds, as the planner judges "fits" against it (None: unknown)."""
        if choices.hardware is None:
            return Capacities(None, None, None, self.request(choices).safety_margin)
        return planner.capacities(choices.hardware, self.request(choices))

    @staticmethod
    def precisions_supported(hardware: HardwareReport | None) -> dict[str, str | None]:
        """precision -> None when the GPUs compute in it, else the planner's reason (wizard.planner)."""
        return {p: planner.precision_problem(hardware, p) if hardware else None for p in PRECISIONS}

    def option_problems(self, strategy: Strategy, choices: Choices, model: ModelSpec | None) -> list[str]:
        """Why ``strategy`` cannot be offered: the combination rules (``Strategy.problems``) plus the machine's
        (``wizard.planner.hardware_problems``: NVMe offload without a disk or libaio, a precision the GPUs lack,
        more nodes than described, and with a model, host RAM too small for the offload)."""
        out = list(strategy.problems())
        if choices.hardware is not None:
            out += planner.hardware_problems(choices.hardware, strategy, self.request(choices), model=model)
        return out

    # ------------------------------------------------------------ files

    def write_options(self, choices: Choices, model: ModelSpec | None) -> WriteOptions:
        """The config writers' options for the choices (wizard.service.files.write_options, as `dswiz config`)."""
        from wizard.config.hostfile import parse_hostfile

        s = choices.strategy
        hosts: tuple[str, ...] = ()
        if s is not None and s.nodes > 1 and choices.hostfile_text.strip():
            hosts = parse_hostfile(choices.hostfile_text).host_names
        return written.write_options(
            out_dir=choices.out_dir,
            model=model,
            hardware=choices.hardware,
            imported=choices.imported,
            hosts=hosts,
            master_addr=choices.master_addr or None,
            master_port=choices.master_port,
            gradient_clipping=choices.gradient_clipping,
            launcher=choices.launcher,
            nvme_path=choices.nvme_path.strip() or None,
            consumer=choices.consumer,
            save_16bit_model=choices.save_16bit,
            expandable_segments=self.expandable_segments,
            local_rank_arg=choices.no_local_rank is None,
        )

    def config_set(self, choices: Choices, model: ModelSpec | None) -> ConfigSet:
        """The config writers' model of the files for the choices; DswizError when the writers refuse them (hosts
        that do not match the nodes, a host named twice, ...). Nothing is rendered or planned."""
        from wizard.config.build import config_set_from_strategy
        from wizard.config.reimport import config_set_from_import
        from wizard.config.render import launch_passes_local_rank

        if choices.strategy is None:
            raise DswizError("no strategy chosen yet", "go back to the Strategy step")
        options = self.write_options(choices, model)
        if choices.imported is None:
            config = config_set_from_strategy(choices.strategy, options)
        else:
            config = config_set_from_import(choices.imported.config, choices.strategy, options)
        if choices.no_local_rank == "folder" and not launch_passes_local_rank(config):
            # the imported folder's --no_local_rank means nothing to the launcher these choices write for
            config = config.model_copy(update={"local_rank_arg": True})
        return config

    def render_files(
        self, choices: Choices, model: ModelSpec | None, plan: Plan | None = None
    ) -> dict[str, str]:
        """file name -> content, in the order the review screen shows them (the config writers' order), then the
        plan sidecar (dswiz-plan.json) when a model was planned: ``dswiz launch`` compares the run with it.

        An imported file (``--from``) is written back changed only where the choices changed it: its unknown
        sections, unmanaged keys, key order and indentation stay (wizard.config.reimport)."""
        from wizard.config.reimport import ds_json_like
        from wizard.config.render import render_all
        from wizard.config.schema import DS_CONFIG_NAME

        config = self.config_set(choices, model)
        files: dict[str, str] = render_all(config)
        if choices.imported is not None and choices.imported_ds_text is not None:
            files[DS_CONFIG_NAME] = ds_json_like(config.deepspeed, choices.imported_ds_text)
        if model is not None and choices.hardware is not None and choices.model_text.strip():
            name, text = written.sidecar_text(
                model_arg=choices.model_text.strip(),
                model=model,
                hardware_arg=choices.hardware_spec,
                hardware=choices.hardware,
                request=self.request(choices),
                candidate=self.chosen_candidate(choices, model, plan),
            )
            files[name] = text
        return files

    @staticmethod
    def import_key_diffs(
        choices: Choices, files: Mapping[str, str]
    ) -> dict[str, tuple[str, list[KeyChange]]]:
        """For `--from FILE`: file name -> (the imported file it is compared with, the key-level diff), for the
        DeepSpeed JSON and, when a YAML was imported, the accelerate YAML. Empty without an import."""
        import json

        import yaml

        from wizard.config.schema import ACCELERATE_YAML_NAME, DS_CONFIG_NAME

        imported = choices.imported
        if imported is None:
            return {}
        pairs: list[tuple[str, Path | None, str | None, Callable[[str], Any]]] = [
            (DS_CONFIG_NAME, imported.ds_config_path, choices.imported_ds_text, json.loads)
        ]
        if imported.kind == "accelerate":
            pairs.append((ACCELERATE_YAML_NAME, imported.path, _read_text(imported.path), yaml.safe_load))
        out: dict[str, tuple[str, list[KeyChange]]] = {}
        for name, path, old_text, parse in pairs:
            if path is None or old_text is None or name not in files:
                continue
            try:
                old, new = parse(old_text), parse(files[name])
            except ValueError:
                continue
            if isinstance(old, dict) and isinstance(new, dict):
                out[name] = (str(path), key_diff(old, new))
        return out

    @staticmethod
    def code_hint_lines(choices: Choices, files: Mapping[str, str]) -> list[str]:
        """What the user's script must change for the chosen consumer and these files (wizard.service.files)."""
        ds_config = written.ds_config_of(files)
        if ds_config is None and (choices.strategy is None or choices.strategy.mode == "train"):
            return []
        return written.code_hint_lines(choices.consumer, ds_config or {}, choices.out_dir, choices.strategy)

    lint_files = staticmethod(written.lint_files)

    def plan_findings(self, choices: Choices, plan: Plan | None) -> list[Finding]:
        """The planner's verdict on the strategy chosen, as `dswiz config` gives it: an error when it does not fit,
        with what would (the Review then asks before it writes, as for the linter's errors)."""
        from wizard.service.prediction import does_not_fit

        if plan is None or choices.strategy is None:
            return []
        finding = does_not_fit(plan, choices.strategy)
        return [] if finding is None else [finding]

    existing_files = staticmethod(written.existing_files)

    @staticmethod
    def write_files(out_dir: Path, files: Mapping[str, str], *, force: bool) -> list[WriteResult]:
        return written.write_files(out_dir, files, force=force)

    @staticmethod
    def launch_command(choices: Choices, script: str = "train.py") -> str:
        return written.launch_command(
            choices.out_dir, script, strategy=choices.strategy, launcher=choices.launcher
        )

    # ------------------------------------------------------------ an imported file (dswiz --from FILE)

    @staticmethod
    def import_config(path: Path) -> LoadedConfig:
        """Read an existing DeepSpeed JSON / accelerate YAML."""
        from wizard.config.load import load_path

        if not path.is_file():
            raise DswizError(
                f"{path} does not exist", "give the path of a DeepSpeed JSON or accelerate YAML file"
            )
        return load_path(path)

    @staticmethod
    def apply_import(choices: Choices, imported: LoadedConfig) -> None:
        """Put an imported config's decisions into the choices, and keep the import so that writing changes only
        what the user changes (render_files)."""
        from wizard.config.reimport import options_from_config, strategy_from_config

        config = imported.config
        options = options_from_config(config)
        choices.imported = imported
        choices.imported_ds_text = _read_text(imported.ds_config_path)
        choices.gradient_clipping = options.gradient_clipping
        choices.nvme_path = options.nvme_path or ""
        choices.launcher = options.launcher
        choices.consumer = options.consumer
        if imported.kind == "deepspeed":
            # A bare JSON does not say who reads it: "auto" values only the HF Trainer fills say the Trainer
            # (wizard.config.check.guess_consumer, as `dswiz check` guesses it).
            from wizard.config.check import guess_consumer

            choices.consumer = guess_consumer(imported.path).consumer or options.consumer
        choices.save_16bit = options.save_16bit_model
        topo = config.topology
        if topo.nodes > 1:
            hostfile = config.accelerate_ds_fields.get("deepspeed_hostfile")
            text = _read_text(Path(hostfile)) if isinstance(hostfile, str) else None
            choices.hostfile_text = text or _hostfile_text(topo.hosts, topo.gpus_per_node)
            choices.master_addr = topo.master_addr or ""
            choices.master_port = topo.master_port
        # The file's stage, offloads, precision, micro-batch and accumulation are kept; its world size may be
        # another machine's, so the target global batch is left to the planner and the topology to the hardware
        # step.
        choices.strategy = strategy_from_config(config, mode=choices.mode)

    @staticmethod
    def accelerate_keys_refused(choices: Choices) -> list[str]:
        """The imported accelerate YAML's keys that accelerate refuses next to deepspeed_config_file (the linter's
        list, wizard.config.lint.accelerate, and any top-level mixed_precision); [] when there are none."""
        from wizard.config.lint.accelerate import ACCELERATE_KEYS_REFUSED_WITH_CONFIG_FILE

        imported = choices.imported
        if imported is None or imported.config.accelerate_mode != "config_file":
            return []
        config = imported.config
        refused = [
            f"deepspeed_config.{k}"
            for k in ACCELERATE_KEYS_REFUSED_WITH_CONFIG_FILE
            if k in config.accelerate_ds_fields
        ]
        return refused + (["mixed_precision"] if "mixed_precision" in config.accelerate_fields else [])

    @staticmethod
    def drop_accelerate_keys_refused(choices: Choices) -> None:
        """Write the imported YAML back without the keys accelerate refuses (their values are in the DeepSpeed
        JSON, which is what accelerate reads in config-file mode)."""
        import dataclasses

        from wizard.config.lint.accelerate import ACCELERATE_KEYS_REFUSED_WITH_CONFIG_FILE

        imported = choices.imported
        if imported is None:
            return
        config = imported.config
        ds_fields = {
            k: v
            for k, v in config.accelerate_ds_fields.items()
            if k not in ACCELERATE_KEYS_REFUSED_WITH_CONFIG_FILE
        }
        fields = {k: v for k, v in config.accelerate_fields.items() if k != "mixed_precision"}
        kept = config.model_copy(update={"accelerate_ds_fields": ds_fields, "accelerate_fields": fields})
        choices.imported = dataclasses.replace(imported, config=kept)

    def on_topology(self, choices: Choices, nodes: int, gpus_per_node: int) -> Strategy:
        """The chosen strategy moved to a topology: an imported file's train_batch_size kept where it can be."""
        assert choices.strategy is not None
        if choices.imported is None:
            return choices.strategy.with_(nodes=nodes, gpus_per_node=gpus_per_node)
        return self.imported_on_topology(choices, nodes, gpus_per_node)[0]

    @staticmethod
    def imported_on_topology(
        choices: Choices, nodes: int, gpus_per_node: int
    ) -> tuple[Strategy, BatchOnTopology | None]:
        """The imported strategy on the planned topology with the file's train_batch_size kept (the accumulation
        derived for the new world size), or the change said when it cannot be kept (wizard.config.reimport)."""
        from wizard.config.reimport import on_topology

        if choices.strategy is None:
            raise DswizError("no strategy to place", "choose or import a strategy first")
        if choices.imported is None:  # a strategy given by flags: nothing of a file's to keep
            return choices.strategy.with_(nodes=nodes, gpus_per_node=gpus_per_node), None
        return on_topology(
            choices.imported.config, choices.strategy, nodes=nodes, gpus_per_node=gpus_per_node
        )

    # ------------------------------------------------------------ multi-node and NVMe offload

    @staticmethod
    def launcher_problems(launcher: str, hardware: HardwareReport | None) -> list[str]:
        """Why ``launcher`` cannot start this job's nodes (the DeepSpeed version the hardware report found)."""
        return launcher_problems(
            launcher, deepspeed_version=hardware.software.deepspeed if hardware else None
        )

    @staticmethod
    def check_hostfile(text: str, *, nodes: int, gpus_per_node: int, launcher: str) -> list[Finding]:
        """Findings for the hostfile being edited: the linter's hostfile rules (docs/deepspeed-rules.md) and, since
        this hostfile is the plan's topology, one line per node with slots = GPUs per node."""
        from wizard.config.lint.hostfile import lint_hostfile_for_topology

        return lint_hostfile_for_topology(text, nodes=nodes, gpus_per_node=gpus_per_node, launcher=launcher)

    @staticmethod
    def default_hostfile(nodes: int, gpus_per_node: int) -> str:
        """A starting point the user edits: placeholder host names, one line per node (the config writers' own
        placeholders, which the written hostfile then marks as such)."""
        return _hostfile_text(placeholder_hosts(nodes), gpus_per_node)

    @staticmethod
    def suggest_nvme_path(hardware: HardwareReport | None) -> str | None:
        from wizard.config.nvme import suggest_nvme_path

        return suggest_nvme_path(hardware)

    @staticmethod
    def check_nvme_path(choices: Choices, need_bytes: int | None) -> list[Finding]:
        """Findings for the NVMe offload directory: absolute, local, on NVMe, room for ``need_bytes`` (the
        planner's prediction per node), and writable when the hardware is this machine."""
        from wizard.config.nvme import nvme_path_findings

        return nvme_path_findings(choices.nvme_path, choices.hardware, need_bytes=need_bytes)


def best_precision(hardware: HardwareReport | None) -> Precision:
    """bf16 where every GPU computes in it, else fp16, else fp32 (no GPU: bf16, which DeepSpeed's CPU accelerator
    runs)."""
    if hardware is None or not hardware.gpus:
        return "bf16"
    if all(g.supports_bf16 for g in hardware.gpus):
        return "bf16"
    return "fp16" if all(g.supports_fp16 for g in hardware.gpus) else "fp32"


def unplanned_strategy(hardware: HardwareReport | None, mode: Mode) -> Strategy:
    """The strategy without a model to plan for (`dswiz config --yes` without --model, the wizard with the model
    left empty): stage 2 (3 for inference, ZeRO inference is stage 3 only) on the hardware's topology, its best
    precision, micro-batch 1 and no accumulation."""
    return Strategy(
        zero_stage=3 if mode == "inference" else 2,
        mode=mode,
        precision=best_precision(hardware),
        nodes=hardware.nodes if hardware is not None else 1,
        gpus_per_node=max(1, hardware.gpus_per_node) if hardware is not None else 1,
    )


def _hardware(choices: Choices) -> HardwareReport:
    if choices.hardware is None:
        raise DswizError("no hardware yet", "go back to the Hardware step")
    return choices.hardware


def _read_text(path: Path | None) -> str | None:
    try:
        return path.read_text(encoding="utf-8") if path is not None else None
    except (OSError, UnicodeDecodeError):
        return None


def initial_choices(
    service: WizardService,
    *,
    hardware: HardwareReport | None = None,
    hardware_spec: str | None = None,
    from_file: Path | None = None,
    out_dir: Path | None = None,
    model_text: str = "",
) -> Choices:
    """The answers a session starts from: the hardware and model asked for, and an imported file's decisions
    (``--from``), whose folder is then the default output folder."""
    choices = Choices(
        hardware_spec=hardware_spec,
        hardware=hardware,
        out_dir=out_dir or DEFAULT_OUT_DIR,
        model_text=model_text,
    )
    if from_file is not None:
        service.apply_import(choices, service.import_config(from_file))
        choices.imported_from = from_file
        if out_dir is None:
            choices.out_dir = from_file.parent
        from runner.configdir import launch_sh_local_rank_arg

        if not launch_sh_local_rank_arg(from_file.parent):
            choices.no_local_rank = "folder"
        _as_planned(
            choices, from_file.parent, hardware_given=hardware is not None or hardware_spec is not None
        )
    return choices


def _as_planned(choices: Choices, folder: Path, *, hardware_given: bool) -> None:
    """An imported file's folder was planned (its dswiz-plan.json): the wizard plans again for the same model, the
    same described hardware (unless the command line names other) and the same part of each card (--gpu-memory /
    --margin), and writes them back. A damaged plan file is the linter's to report, not the import's."""
    from wizard.config.sidecar import read_sidecar

    try:
        sidecar = read_sidecar(folder)
    except DswizError:
        return
    if sidecar is None:
        return
    if not choices.model_text:
        choices.model_text, choices.finetune = sidecar.model_arg, sidecar.model.finetune
        choices.seq_len = choices.seq_len or sidecar.seq_len
    if not hardware_given and sidecar.hardware_arg:
        choices.hardware_spec = sidecar.hardware_arg
    choices.gpu_memory_bytes = sidecar.gpu_memory_bytes
    if sidecar.safety_margin is not None:
        choices.safety_margin = sidecar.safety_margin


def _hostfile_text(hosts: tuple[str, ...], slots: int) -> str:
    return "".join(line + "\n" for line in hostfile_lines(hosts, slots))
