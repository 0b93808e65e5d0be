"""The full-screen wizard (Textual): the App, one module per step, widgets. It asks ``wizard.service`` for every
answer, the same service the line prompts (``wizard.prompts``) use."""
