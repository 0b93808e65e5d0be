"""What a DeepSpeed JSON text is when strict JSON refuses it: a template whose placeholders a script fills
(``${zero_stage}``, ``{{ lr }}``, ``CONFIG_BATCH_SIZE``), or hjson (comments, trailing commas) -- which DeepSpeed
0.19.8 reads from a path (``deepspeed/runtime/config.py`` ``DeepSpeedConfig.__init__`` and
``runtime/tensor_parallel/init_utils.py`` ``load_ds_config``: ``hjson.load``), while the HF Trainer and accelerate
read the file with ``json.load`` (``accelerate/utils/deepspeed.py`` ``HfDeepSpeedConfig``) and refuse it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from wizard.config.lint.base import ERROR, WARNING, finding
from wizard.config.parse import parse_json
from wizard.config.schema import Consumer
from wizard.findings import Finding

# ${name} / {{ name }} anywhere, or a bare upper-case word where a JSON value goes (Megatron-DeepSpeed's and
# DeepSpeedExamples' *_TEMPLATE.json, filled by sed).
_SHELL = re.compile(r"\$\{[^}\n]+\}|\{\{[^}\n]+\}\}")
_BARE = re.compile(r"(?<=:)\s*([A-Z][A-Z0-9_]{2,})\s*(?=[,}\]\n])")


@dataclass(frozen=True)
class Placeholders:
    names: tuple[str, ...]
    line: int


def template_placeholders(text: str) -> Placeholders | None:
    """The placeholders of a template (None when the text has none)."""
    spans = [(m.start(), m.group(0)) for m in _SHELL.finditer(text)]
    spans += [(m.start(1), m.group(1)) for m in _BARE.finditer(text)]
    if not spans:
        return None
    spans.sort()
    names = tuple(dict.fromkeys(name for _, name in spans))
    return Placeholders(names, text.count("\n", 0, spans[0][0]) + 1)


def template_finding(found: Placeholders, name: str) -> Finding:
    shown = ", ".join(found.names[:4]) + (", ..." if len(found.names) > 4 else "")
    return finding(
        ERROR,
        "template-placeholders",
        f"{name} is a template: {len(found.names)} placeholder(s) ({shown}) are left to be filled",
        "a script fills them (sed, envsubst, a launcher) before DeepSpeed reads the file; as it is, no consumer "
        "can read it, so only the generated file can be checked",
        f"check the file the script writes from it (dswiz check GENERATED.json), or fill {found.names[0]} by hand",
        f"{name}:{found.line}",
    )


def parse_hjson(text: str) -> Any | None:
    """The config as DeepSpeed reads a path (hjson, duplicate keys refused), or None when hjson refuses it too."""
    import hjson  # only for a file strict JSON refused: most checks never need it

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ValueError(f"duplicate key {key}")
            out[key] = value
        return out

    try:
        return hjson.loads(text, object_pairs_hook=no_duplicates)
    except (ValueError, RecursionError):
        return None


BOM = "\ufeff"  # a UTF-8 byte-order mark, as an editor on Windows may save one


def strict_but_for_bom(text: str) -> bool:
    """Whether the text is strict JSON after a leading byte-order mark."""
    return text.startswith(BOM) and parse_json(text[len(BOM) :])[1] is None


def bom_finding(consumer: Consumer | None, name: str) -> Finding:
    """Strict JSON after a byte-order mark: json.load stops on the mark ("Unexpected UTF-8 BOM"); hjson, which
    plain DeepSpeed reads a path with, skips it."""
    if consumer in ("trainer", "accelerate"):
        who = "the HF Trainer" if consumer == "trainer" else "accelerate"
        severity, code, why = (
            ERROR,
            "not-json",
            f"{who} reads the DeepSpeed config with json.load, which stops on it",
        )
    else:
        severity, code = WARNING, "json-bom"
        why = "DeepSpeed reads it from a path (hjson skips the mark), but json.load and the HF Trainer refuse it"
    return finding(
        severity,
        code,
        f"{name} starts with a UTF-8 byte-order mark",
        why,
        "save it as UTF-8 without a BOM (most editors: encoding 'UTF-8', not 'UTF-8 with BOM')",
        name,
    )


def hjson_finding(consumer: Consumer | None, name: str) -> Finding:
    """A file DeepSpeed reads (hjson) but strict JSON does not: an error for the readers that use json.load."""
    if consumer in ("trainer", "accelerate"):
        who = "the HF Trainer" if consumer == "trainer" else "accelerate"
        return finding(
            ERROR,
            "not-json",
            f"{name} is not strict JSON (comments or hjson syntax)",
            f"{who} reads the DeepSpeed config with json.load and stops on it; only plain DeepSpeed reads "
            "hjson (from a path)",
            "remove the comments (// and #) and trailing commas, or move notes into keys starting with _",
            name,
        )
    return finding(
        WARNING,
        "json-comments",
        f"{name} is hjson, not strict JSON (comments or relaxed syntax)",
        "DeepSpeed reads it from a path (hjson), but the HF Trainer, accelerate and JSON tools refuse it, and "
        "deepspeed.initialize(config=dict) needs it parsed already",
        "remove the comments and trailing commas if anything but deepspeed --deepspeed_config reads it",
        name,
    )
