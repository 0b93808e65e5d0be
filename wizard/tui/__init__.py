"""The full-screen wizard (Textual). ``core_bridge`` and ``choices`` import no terminal library, so the line-prompt
mode (``wizard.prompts``) reuses them; everything else here is the Textual front end."""
