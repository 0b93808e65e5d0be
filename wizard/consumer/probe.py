"""Run DeepSpeed's and accelerate's own config validation, in whatever Python has them installed.

A standalone script (it imports nothing from dswiz): ``wizard.consumer.check`` runs it as
``PYTHON probe.py`` with a JSON request on stdin and reads one ``DSWIZ_PROBE_RESULT {json}`` line from stdout
(DeepSpeed prints its own logs on stdout too). Request::

    {"kind": "deepspeed" | "accelerate", "path": FILE, "world_size": N | null, "consumer": ... | null}
    or {"requests": [request, ...]} (then the result line holds {"results": [result, ...]})

Result: {"versions": {...}, "missing": [module, ...], "errors": [{"source", "message"}], "warnings": [...]}.
DeepSpeed's checks: DeepSpeedConfig (its pydantic ZeRO/offload/precision/monitor models, batch completion and
assertion, sanity checks) with the world size given. accelerate's: `accelerate launch`'s own argument validation
(its YAML loader), the environment it prepares for the ranks, and DeepSpeedPlugin built in that environment --
what each rank does before training -- then DeepSpeedConfig on the config accelerate produced.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import os
import sys
import warnings
from typing import Any

MARKER = "DSWIZ_PROBE_RESULT "


class _Collect(logging.Handler):
    def __init__(self, sink: list[dict[str, str]], source: str) -> None:
        super().__init__(level=logging.WARNING)
        self.sink, self.source = sink, source

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append({"source": self.source, "message": record.getMessage()})


def _fill_like_consumer(cfg: dict[str, Any], consumer: str | None) -> dict[str, Any]:
    """What the Trainer / accelerate do to "auto" before DeepSpeed sees the config (so DeepSpeed validates the
    rest): batch values as accelerate's set_deepspeed_weakref, clipping as accelerate's default 1.0, precision off.
    Plain DeepSpeed gets the config as written."""
    if consumer not in ("trainer", "accelerate"):
        return cfg
    cfg = copy.deepcopy(cfg)
    for key in ("gradient_accumulation_steps", "train_micro_batch_size_per_gpu"):
        if cfg.get(key) == "auto":
            cfg[key] = 1
    if cfg.get("train_batch_size") == "auto":
        del cfg["train_batch_size"]
    if cfg.get("gradient_clipping") == "auto":
        cfg["gradient_clipping"] = 1.0
    for name in ("fp16", "bf16"):
        if isinstance(cfg.get(name), dict) and cfg[name].get("enabled") == "auto":
            cfg[name]["enabled"] = False
    return cfg


def _world_size(cfg: dict[str, Any], given: int | None) -> int:
    if given:
        return given
    train, micro = cfg.get("train_batch_size"), cfg.get("train_micro_batch_size_per_gpu")
    gas = cfg.get("gradient_accumulation_steps", 1)
    sp = cfg.get("sequence_parallel_size", 1)
    sp = sp if isinstance(sp, int) and not isinstance(sp, bool) and sp > 0 else 1
    numbers = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (train, micro, gas))
    if numbers and train % (micro * gas) == 0:
        # The ranks the config was written for: DeepSpeedConfig divides them by sequence_parallel_size.
        return train // (micro * gas) * sp
    return sp


def check_deepspeed(
    cfg: dict[str, Any], world_size: int | None, consumer: str | None, out: dict[str, Any]
) -> None:
    try:
        import deepspeed
        import deepspeed.comm as dist
        from deepspeed.runtime import config as ds_config
        from deepspeed.utils import logger as ds_logger
    except ImportError:
        out["missing"].append("deepspeed")
        return
    out["versions"]["deepspeed"] = deepspeed.__version__
    cfg = _fill_like_consumer(cfg, consumer)
    ws = _world_size(cfg, world_size)
    out["world_size"] = ws
    # A probe has no process group: answer DeepSpeedConfig's rank / world-size questions ourselves.
    dist.get_rank = lambda *a, **k: 0
    dist.get_world_size = lambda *a, **k: ws
    handler = _Collect(out["warnings"], "deepspeed")
    ds_logger.addHandler(handler)
    try:
        ds_config.DeepSpeedConfig(cfg)
    except Exception as e:  # any failure of theirs is the finding
        out["errors"].append({"source": "deepspeed", "message": f"{type(e).__name__}: {e}"})
    finally:
        ds_logger.removeHandler(handler)


def check_accelerate(path: str, world_size: int | None, consumer: str | None, out: dict[str, Any]) -> None:
    try:
        import accelerate
        from accelerate.commands.launch import _validate_launch_command, launch_command_parser
        from accelerate.utils import DeepSpeedPlugin
        from accelerate.utils.launch import prepare_deepspeed_cmd_env
    except ImportError as e:
        out["missing"].append(getattr(e, "name", None) or "accelerate")
        return
    out["versions"]["accelerate"] = accelerate.__version__
    args = launch_command_parser().parse_args(["--config_file", path, "train.py"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            args, defaults, mp_from_config = _validate_launch_command(args)
            if not args.use_deepspeed:
                # DDP, FSDP...: accelerate accepted it (above); there is no DeepSpeed config to check.
                out["not_deepspeed"] = True
                return
            # What launch_command does before the DeepSpeed launcher (commands/launch.py).
            fields = list(defaults.deepspeed_config.keys()) if defaults else []
            if mp_from_config:
                fields.append("mixed_precision")
            args.deepspeed_fields_from_accelerate_config = ",".join(fields)
            args.main_process_port = args.main_process_port or 29500
            _cmd, env = prepare_deepspeed_cmd_env(args)
            saved = dict(os.environ)
            os.environ.clear()
            os.environ.update(env)
            try:
                plugin = DeepSpeedPlugin()  # what each rank builds: raises on the config-file conflicts
                cfg = plugin.deepspeed_config
            finally:
                os.environ.clear()
                os.environ.update(saved)
        except (Exception, SystemExit) as e:  # accelerate exits on some bad configs
            out["errors"].append({"source": "accelerate", "message": f"{type(e).__name__}: {e}"})
            return
        finally:
            for w in caught:
                if "is already in use" not in str(w.message):  # a port busy now says nothing about the config
                    out["warnings"].append({"source": "accelerate", "message": str(w.message)})
    processes = getattr(args, "num_processes", None)
    ws = world_size or (processes if isinstance(processes, int) and processes > 0 else None)
    check_deepspeed(dict(cfg), ws, consumer or "accelerate", out)


def run_request(request: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "versions": {"python": sys.version.split()[0]},
        "missing": [],
        "errors": [],
        "warnings": [],
    }
    consumer = request.get("consumer")
    if request["kind"] == "accelerate":
        check_accelerate(request["path"], request.get("world_size"), consumer, out)
        return out
    try:
        cfg = read_config(request["path"], consumer)
    except Exception as e:  # the consumer cannot read it: that is the finding, not a crash of the probe
        out["errors"].append(
            {"source": _reader(consumer), "message": f"cannot read the file: {type(e).__name__}: {e}"}
        )
        return out
    if consumer in ("trainer", "accelerate") and not check_plugin(cfg, out):
        return out
    check_deepspeed(cfg, request.get("world_size"), consumer, out)
    return out


def _reader(consumer: str | None) -> str:
    return "accelerate" if consumer in ("trainer", "accelerate") else "deepspeed"


def read_config(path: str, consumer: str | None) -> Any:
    """The file as its consumer reads it: DeepSpeed opens a path with hjson (runtime/config.py DeepSpeedConfig),
    the HF Trainer and accelerate with json.load (accelerate/utils/deepspeed.py HfDeepSpeedConfig)."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if consumer in ("trainer", "accelerate"):
        return json.loads(text)
    try:
        import hjson
    except ImportError:
        return json.loads(text)
    return hjson.loads(text)


def check_plugin(cfg: Any, out: dict[str, Any]) -> bool:
    """accelerate's DeepSpeedPlugin on the config (what the HF Trainer and accelerate build from a DeepSpeed JSON;
    it refuses one without zero_optimization). False when it refused."""
    try:
        import accelerate
        from accelerate.utils import DeepSpeedPlugin
    except ImportError:
        out["missing"].append("accelerate")
        return True
    out["versions"]["accelerate"] = accelerate.__version__
    try:
        DeepSpeedPlugin(hf_ds_config=copy.deepcopy(cfg))
    except Exception as e:
        out["errors"].append({"source": "accelerate", "message": f"{type(e).__name__}: {e}"})
        return False
    return True


def main() -> None:
    """One request, or {"requests": [...]} for several in one process (imports are the slow part)."""
    request = json.loads(sys.stdin.read())
    noise = io.StringIO()
    results: list[dict[str, Any]] = []
    try:
        # Their import-time chatter goes to our stderr, never into the result line.
        with contextlib.redirect_stdout(noise):
            for one in request.get("requests", [request]):
                results.append(run_request(one))
    finally:
        sys.stderr.write(noise.getvalue())
        payload = {"results": results} if "requests" in request else (results[0] if results else {})
        print(MARKER + json.dumps(payload), flush=True)


if __name__ == "__main__":
    main()
