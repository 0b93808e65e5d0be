"""The training loss (and step, learning rate) from the progress lines people print themselves. Pure and total.

DeepSpeed's engine no longer writes the loss anywhere (its csv monitor writes ``Train/Samples/lr`` and
``loss_scale`` only: ``deepspeed/runtime/engine.py`` ``_take_model_step``, 0.19.8; ``Train/Samples/train_loss`` is
left in the pipeline engine alone), and accelerate sets ``steps_per_print`` to infinity
(``accelerate/utils/dataclasses.py``, ``DeepSpeedPlugin.deepspeed_config_process``), so a plain script's own prints
are the only place the loss shows. Recognised (docs/log-formats.md, "Script prints", has the examples):

- ``loss 10.78``, ``loss=10.78``, ``loss: 10.78``, ``Loss 10.78``, ``train_loss=…``, ``train/loss …``,
  ``training loss: …``, ``avg loss …`` (any case), with a step beside it when the line has one: ``step 5``,
  ``step=5``, ``Step 5/100``, ``iter 5``, ``global_step=5``;
- tqdm bars with a postfix: ``12/100 [00:05<00:40, 2.31it/s, loss=2.31, lr=1e-4]`` (the bar's count is the step);
- a learning rate beside it: ``lr 1e-4``, ``lr=…``, ``learning_rate: …``.

Not the training loss: ``val_loss``, ``eval_loss``, ``valid loss``, ``test loss``, ``dev loss`` (reported as
``eval_loss`` when the line has no training loss), ``loss_scale``, ``loss scale 65536``, ``lossless``,
``packet loss 0.1%``, ``loss of 3``; a line with no loss word yields nothing, whatever numbers it has.
"""

from __future__ import annotations

import math
import re
from typing import Any

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# A loss word, then "=", ":" or spaces, then a number that is not a percentage or part of a longer token.
_LOSS_RE = re.compile(
    r"(?<![\w/.-])(?:(?P<qual>[A-Za-z]+)[ _/-])?(?P<word>loss)(?P<sep>\s*[=:]\s*|\s+)"
    rf"(?P<num>{_NUM})(?![\w%.:/])",
    re.IGNORECASE,
)
_EVAL_WORDS = frozenset({"val", "valid", "validation", "eval", "evaluation", "test", "dev", "holdout"})
_TRAIN_WORDS = frozenset(
    {
        "train",
        "training",
        "avg",
        "average",
        "mean",
        "running",
        "smoothed",
        "total",
        "lm",
        "step",
        "batch",
        "epoch",
        "iter",
    }
)
_STEP_RE = re.compile(
    r"(?<![\w.-])(?:global_step|global step|step|iter|iteration|it)\s*[=:#]?\s*(?P<step>\d+)"
    r"(?:\s*(?:/|of)\s*(?P<total>\d+))?(?![\w.%])",
    re.IGNORECASE,
)
_TQDM_RE = re.compile(r"(?P<n>\d+)/(?P<total>\d+) \[[\d:]+<[\d:?]+, [^\]]*\]")
_LR_RE = re.compile(rf"(?<![\w.])(?:lr|learning_rate|learning rate)\s*[=:]?\s*(?P<num>{_NUM})(?![\w%])", re.I)
_MAX_PRINT = 2000  # a progress print is short; a longer line is something else (a dump, a config)


def parse_progress_print(msg: str) -> dict[str, Any] | None:
    """``{"loss": float, "step": int?, "learning_rate": float?, "form": "print"|"tqdm"}`` for a line that prints
    a training loss; ``{"eval_loss": float, ...}`` for one that prints only an evaluation loss; None otherwise."""
    if len(msg) > _MAX_PRINT or "loss" not in msg.lower():
        return None
    train: float | None = None
    evaluation: float | None = None
    for m in _LOSS_RE.finditer(msg):
        qual = (m.group("qual") or "").lower()
        number = float(m.group("num"))  # _NUM is digits only: float() takes it (1e999 becomes inf)
        if not math.isfinite(number) or (qual and qual not in _EVAL_WORDS and qual not in _TRAIN_WORDS):
            continue  # "loss 5" after a word we do not know ("packet loss", "scale loss") is not the loss
        if qual in _EVAL_WORDS:
            evaluation = number if evaluation is None else evaluation
        elif train is None:
            train = number
    if train is None and evaluation is None:
        return None
    values: dict[str, Any] = {"loss": train} if train is not None else {"eval_loss": evaluation}
    tqdm = _TQDM_RE.search(msg)
    step = _STEP_RE.search(msg)
    if tqdm:
        values["step"], values["form"] = int(tqdm.group("n")), "tqdm"
    else:
        values["form"] = "print"
        if step:
            values["step"] = int(step.group("step"))
    lr = _LR_RE.search(msg)
    learning_rate = float(lr.group("num")) if lr else math.nan
    if math.isfinite(learning_rate):
        values["learning_rate"] = learning_rate
    return values
