"""Step 6 — Review & write: who reads the config (plain DeepSpeed, accelerate, the HF Trainer) and what that
script must change (a short diff); every file to be written, syntax-highlighted, with a diff against the file already
there; the linter's findings; where to write. Writing never overwrites silently: a changed file needs a
confirmation and its old content is kept as a backup. Afterwards: the exact command to launch."""

from __future__ import annotations

import difflib
from pathlib import Path

from rich.syntax import Syntax
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Static

from wizard.errors import DswizError
from wizard.findings import Severity
from wizard.service import CONSUMERS
from wizard.service.key_diff import KeyChange, summary
from wizard.tui.screens.base import StepScreen
from wizard.tui.screens.dialogs import ConfirmScreen
from wizard.tui.widgets.fields import radio_set
from wizard.tui.widgets.findings_view import findings_text

LEXERS = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".sh": "bash"}
THEME = "ansi_dark"  # terminal colours: readable on any theme and stable in snapshots


def lexer_for(name: str) -> str:
    return LEXERS.get(Path(name).suffix, "bash" if name in (".deepspeed_env",) else "text")


def unified_diff(name: str, old: str, new: str) -> str:
    return "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"{name} (on disk)", f"{name} (new)")
    )


def import_diff_text(imported: str, rows: list[KeyChange]) -> Text:
    """The key-level diff against the imported file: a count of what is kept, then each key changed, removed or
    added with its values."""
    text = Text.assemble(("Against the imported ", "bold"), (imported, "bold"), f": {summary(rows)}")
    marks = {"changed": ("~", "yellow"), "removed": ("-", "red"), "added": ("+", "green")}
    for row in rows:
        if row.state == "kept":
            continue
        mark, style = marks[row.state]
        if row.state == "changed":
            values = f"{row.old!r} → {row.new!r}"
        else:
            values = repr(row.old if row.state == "removed" else row.new)
        text.append(f"\n  {mark} {row.key}: {values}", style=style)
    return text


class ReviewStep(StepScreen):
    STEP = 5
    AUTO_FOCUS = "#out-dir"
    HELP = (
        "The files dswiz will write, exactly. Where a file already exists, the diff shows what changes; writing "
        "over it asks first and keeps the old one as `NAME.bak-<time>`. Findings come from the same linter as "
        "`dswiz check`. **Used by** picks who reads the config (plain DeepSpeed, `accelerate launch`, the HF "
        "Trainer): the files and the script change shown below follow it. After writing, run the command shown "
        "to start training with a live dashboard."
    )

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, str] = {}
        self.on_disk: dict[str, str] = {}
        self.error_count = 0
        self.asked_refused = False  # the user answered whether to drop the keys accelerate refuses
        self.written_files: dict[str, str] | None = (
            None  # what the last write wrote, to tell Enter what to do
        )

    def body(self) -> ComposeResult:
        yield Label("Write to directory (Enter writes)", classes="field-label")
        with Horizontal(classes="row"):
            yield Input(id="out-dir")
            write = Button("Write files", id="write", variant="success")
            write.can_focus = False  # Enter in the folder field (or on "Used by") writes; Tab goes to Used by
            yield write
        yield Label("Used by", classes="field-label")
        yield radio_set("consumer", "consumer", CONSUMERS)
        yield Static("", id="written")
        yield Label("Your script", classes="section-title")
        yield Static("", id="hints")
        yield Label("Findings", classes="section-title")
        yield Static("", id="findings")
        yield Vertical(id="files")

    def refresh_from_state(self) -> None:
        c = self.wizard.choices
        with self.prevent(Input.Changed, RadioSet.Changed):
            self.query_one("#out-dir", Input).value = str(c.out_dir)
            self.query_one(f"#consumer-{c.consumer}", RadioButton).value = True
        self._show_files()

    @on(RadioSet.Changed, "#consumer")
    def _consumer_changed(self, event: RadioSet.Changed) -> None:
        c = self.wizard.choices
        c.consumer = next((n for n in CONSUMERS if event.pressed.id == f"consumer-{n}"), c.consumer)
        self._show_files()

    def _show_hints(self) -> None:
        """The script change for the chosen consumer: its explanation in words, the diff highlighted."""
        lines = self.wizard.service.code_hint_lines(self.wizard.choices, self.files)
        text = Text()
        for line in lines:
            style = ""
            if line.startswith(("+", "@@")) and not line.startswith("+++"):
                style = "green" if line.startswith("+") else "cyan"
            elif line.startswith("-") and not line.startswith("---"):
                style = "red"
            elif line.startswith(("---", "+++")):
                style = "dim"
            text.append(line + "\n", style=style)
        self.query_one("#hints", Static).update(text)

    def _show_files(self) -> None:
        c = self.wizard.choices
        box = self.query_one("#files", Vertical)
        box.remove_children()
        try:
            self.files = self.wizard.service.render_files(c, self.wizard.model, self.wizard.plan)
            findings = self.wizard.service.lint_files(
                self.files,
                c.world_size,
                hardware=c.hardware,
                launcher=c.launcher,
                out_dir=self._out_dir(),
                consumer=c.consumer,
            )
            findings = [*self.wizard.service.plan_findings(c, self.wizard.plan), *findings]
        except DswizError as e:
            self.files = {}
            self.set_status(e.problem, error=True)
            return
        self.query_one("#findings", Static).update(findings_text(findings))
        self._show_hints()
        self.on_disk = self.wizard.service.existing_files(self._out_dir(), self.files)
        against_import = self.wizard.service.import_key_diffs(c, self.files)
        widgets: list[Static] = []
        for name, text in self.files.items():
            if name in against_import:
                widgets.append(Static(import_diff_text(*against_import[name]), classes="import-diff"))
            old = self.on_disk.get(name)
            state = (
                "new file" if old is None else ("unchanged" if old == text else "changes the file on disk")
            )
            widgets.append(Label(Text.assemble((name, "bold"), (f"  {state}", "dim")), classes="file-title"))
            widgets.append(
                Static(Syntax(text, lexer_for(name), theme=THEME, line_numbers=True), classes="file")
            )
            if old is not None and old != text:
                diff = unified_diff(name, old, text)
                widgets.append(Static(Syntax(diff, "diff", theme=THEME), classes="file diff"))
        box.mount_all(widgets)
        self.error_count = sum(f.severity is Severity.ERROR for f in findings)

    def _out_dir(self) -> Path:
        return Path(self.query_one("#out-dir", Input).value.strip() or str(self.wizard.choices.out_dir))

    def go_on(self) -> None:
        """Enter (in the folder field, on "Used by", on Done) writes the files; once they are written, Done."""
        self.wizard.choices.out_dir = self._out_dir()
        self._show_files()
        if self.wizard.choices.written and self.written_files == self.files:
            super().go_on()
            return
        self._write_pressed()

    @on(Button.Pressed, "#write")
    def _write_pressed(self) -> None:
        self.wizard.choices.out_dir = self._out_dir()
        self._show_files()
        if not self.files:
            return
        if self._offer_to_drop_refused_keys():
            return
        if not self.error_count:
            self._confirm_overwrite()
            return

        def answered(write_anyway: bool | None) -> None:
            if write_anyway:
                self._confirm_overwrite()

        n = self.error_count
        self.app.push_screen(
            ConfirmScreen(
                f"The check found {n} error{'s' if n != 1 else ''} (listed under Findings): DeepSpeed or "
                "accelerate would refuse these files or not do what they say. Write them anyway?",
                yes="Write anyway",
                no="Go back and fix",
            ),
            answered,
        )

    def _offer_to_drop_refused_keys(self) -> bool:
        """An imported accelerate YAML with keys accelerate refuses beside deepspeed_config_file: offer to write it
        without them (asked once). True while the question is open."""
        refused = self.wizard.service.accelerate_keys_refused(self.wizard.choices)
        if not refused or self.asked_refused:
            return False
        self.asked_refused = True

        def answered(drop: bool | None) -> None:
            if drop:
                self.wizard.service.drop_accelerate_keys_refused(self.wizard.choices)
            self._write_pressed()

        self.app.push_screen(
            ConfirmScreen(
                f"accelerate refuses {', '.join(refused)} next to deepspeed_config_file (the DeepSpeed JSON holds "
                "those settings). Write accelerate.yaml without them?",
                yes="Remove them",
                no="Keep them",
            ),
            answered,
        )
        return True

    def _confirm_overwrite(self) -> None:
        out = self.wizard.choices.out_dir
        changed = [n for n, old in self.on_disk.items() if old != self.files.get(n)]
        if not changed:
            self._write(force=False)
            return

        def answered(overwrite: bool | None) -> None:
            if overwrite:
                self._write(force=True)

        self.app.push_screen(
            ConfirmScreen(
                f"{', '.join(changed)} already exist{'s' if len(changed) == 1 else ''} in {out} with other "
                "content. Overwrite? The old files are kept as .bak-<time> backups.",
                yes="Overwrite",
            ),
            answered,
        )

    def _write(self, *, force: bool) -> None:
        c = self.wizard.choices
        try:
            results = self.wizard.service.write_files(c.out_dir, self.files, force=force)
        except DswizError as e:
            self.show_error(e)
            return
        c.written = [r.path for r in results]
        self.written_files = dict(self.files)
        lines = Text()
        lines.append("Wrote\n", style="bold green")
        for r in results:
            note = (
                " (unchanged)" if r.unchanged else (f" (old one kept as {r.backup.name})" if r.backup else "")
            )
            lines.append(f"  {r.path}{note}\n")
        lines.append("Next, start training with a live dashboard:\n", style="bold")
        lines.append(f"  {self.wizard.service.launch_command(c)}", style="bold cyan")
        self.query_one("#written", Static).update(lines)
        self._show_files()
        self.set_status("written")

    def save(self) -> None:
        if not self.wizard.choices.written:
            raise DswizError("nothing written yet", "press Write files, or Ctrl-q to quit without writing")
