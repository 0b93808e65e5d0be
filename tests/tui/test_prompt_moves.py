"""The real questionary prompts (typed into through prompt_toolkit's pipe input): Up and Down move between the
options offered and stop at the ends, instead of wrapping round past a disabled one."""

from __future__ import annotations

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from wizard.prompts import QuestionaryPrompter, next_offered

UP, DOWN = "\x1b[A", "\x1b[B"
PRECISIONS = [
    ("bf16", "bf16", "needs compute capability 8.0"),
    ("fp16", "fp16", None),
    ("fp32", "fp32", None),
]


def answer(keys: str) -> object:
    with create_pipe_input() as pipe:
        pipe.send_text(keys + "\r")
        prompter = QuestionaryPrompter(input=pipe, output=DummyOutput())
        return prompter.select("precision", "Precision", PRECISIONS, default="fp16")


def test_up_from_the_first_offered_option_stays() -> None:
    assert answer(UP) == "fp16"  # bf16 above is disabled: no wrap round to fp32


def test_down_moves_and_stops_at_the_end() -> None:
    assert answer(DOWN) == "fp32"
    assert answer(DOWN + DOWN) == "fp32"


def test_next_offered_skips_disabled_options() -> None:
    assert next_offered([False, True, False], 0, 1) == 2
    assert next_offered([True, False, False], 1, -1) == 1


def test_an_option_whose_value_is_none_answers_none_not_its_title() -> None:
    """The model question's first option, "none: choose the strategy by hand", has the value None: questionary
    would answer its title, which the wizard then tried to load as a model name, and asked again forever."""
    from wizard.prompts import NO_MODEL

    options = [(NO_MODEL, None, None), ("gpt2", "gpt2", None)]
    with create_pipe_input() as pipe:
        pipe.send_text("\r")
        assert (
            QuestionaryPrompter(input=pipe, output=DummyOutput()).select("model-preset", "Model", options)
            is None
        )
    with create_pipe_input() as pipe:
        pipe.send_text(DOWN + "\r")
        assert (
            QuestionaryPrompter(input=pipe, output=DummyOutput()).select("model-preset", "Model", options)
            == "gpt2"
        )
