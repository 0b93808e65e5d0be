"""The application service every front door calls: the full-screen wizard, the line prompts and `dswiz config`.

``WizardService`` (wizard_service.py) answers the wizard's questions with the core's real types; ``Choices``
(choices.py) holds the user's answers; ``files`` builds, checks and writes the config set the same way for every
door; ``tables`` lays out the max-batch table for `dswiz plan` and the wizard. Imports no terminal library.
"""

from wizard.service.choices import CONSUMERS, DEFAULT_OUT_DIR, LAUNCHERS, Choices, parse_positive
from wizard.service.wizard_service import HardwareSource, WizardService, initial_choices

__all__ = [
    "CONSUMERS",
    "DEFAULT_OUT_DIR",
    "LAUNCHERS",
    "Choices",
    "HardwareSource",
    "WizardService",
    "initial_choices",
    "parse_positive",
]
