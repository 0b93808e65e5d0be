"""Where NVMe offload writes its swap files: a path field and what the checks say about it. Shown only while
something is offloaded to NVMe; the screen that owns it runs the checks (``WizardService.check_nvme_path``)."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Label, Static

from wizard.findings import Finding
from wizard.tui.widgets.findings_view import findings_text


class NvmePathField(Vertical):
    DEFAULT_CSS = """
    NvmePathField {
        height: auto;
    }
    NvmePathField #nvme-path {
        width: 1fr;
    }
    """

    def compose(self) -> ComposeResult:
        yield Label("NVMe offload directory (nvme_path: a local NVMe drive, the same path on every node)")
        yield Input(id="nvme-path", placeholder="/local_nvme/dswiz-offload")
        yield Static("", id="nvme-check")

    @property
    def value(self) -> str:
        return self.query_one("#nvme-path", Input).value.strip()

    def set_value(self, path: str) -> None:
        field = self.query_one("#nvme-path", Input)
        with field.prevent(Input.Changed):
            field.value = path

    def show_findings(self, findings: Iterable[Finding]) -> None:
        self.query_one("#nvme-check", Static).update(findings_text(findings, empty="The directory is fine."))
