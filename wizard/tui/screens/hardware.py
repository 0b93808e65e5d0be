"""Step 1 — Hardware: what was detected (or the described profile), its hazards with their fixes.

The spec input is editable: type "8xA100-80GB", "2x8xH100" or a YAML profile path to plan for other hardware,
or leave it empty to use this machine.
"""

from __future__ import annotations

import math

from rich.markup import escape
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Button, Input, Label, Static

from wizard.errors import DswizError
from wizard.hardware.report import HardwareReport, HostInfo
from wizard.planner.calibration import DEFAULT_SAFETY_MARGIN
from wizard.service.choices import gpu_memory_for
from wizard.tui.screens.base import StepScreen
from wizard.tui.widgets.fields import labelled
from wizard.tui.widgets.findings_view import findings_text
from wizard.units import MAX_SAFETY_MARGIN, fmt_bytes, parse_card_size


def gpu_table(hw: HardwareReport) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for col in ("#", "GPU", "memory", "compute", "bf16", "fp16"):
        table.add_column(col)
    for g in hw.gpus:
        cc = "?" if g.compute_capability is None else f"{g.compute_capability[0]}.{g.compute_capability[1]}"
        yes = {True: "yes", False: "no", None: "?"}
        table.add_row(
            str(g.index),
            escape(g.name),
            fmt_bytes(g.memory_total_bytes),
            cc,
            yes[g.supports_bf16],
            yes[g.supports_fp16],
        )
    return table


def cores_text(h: HostInfo) -> str:
    """ "16 cores", or "16 cores, 4 usable here" when an affinity mask or a cgroup quota narrows this process."""
    return f"{h.cores or '?'} cores" + (f", {h.usable_cores} usable here" if h.restricted else "")


def host_text(hw: HardwareReport) -> Text:
    h = hw.host
    lines = [
        ("nodes", f"{hw.nodes} × {hw.gpus_per_node} GPU{'s' if hw.gpus_per_node != 1 else ''}"),
        ("CPU", f"{h.cpu_model or '?'} ({cores_text(h)})"),
        ("RAM", f"{fmt_bytes(h.ram_total_bytes)} total, {fmt_bytes(h.ram_available_bytes)} available"),
        ("/dev/shm", fmt_bytes(h.shm_bytes)),
        ("libaio", {True: "present", False: "missing (no NVMe offload)", None: "unknown"}[h.libaio]),
    ]
    for d in h.disks:
        kind = "NVMe" if d.nvme else "disk"
        lines.append((kind, f"{d.mountpoint} {fmt_bytes(d.free_bytes)} free of {fmt_bytes(d.total_bytes)}"))
    text = Text()
    for n, (k, v) in enumerate(lines):
        text.append(("\n" if n else "") + f"{k:<9}", style="bold")
        text.append(v)
    return text


class HardwareStep(StepScreen):
    STEP = 0
    AUTO_FOCUS = "#hw-spec"
    HELP = (
        "What dswiz plans for. Empty: **this machine**, as detected (NVML, /proc, disks, libaio). "
        "Or describe the machine you will train on: `8xA100-80GB`, `2x8xH100` (2 nodes of 8), or the path of a "
        "YAML profile. Hazards are problems found on the machine, each with its fix. **Memory per GPU**: plan "
        "for part of each card (e.g. `24GiB`: a card shared with another job, or a smaller card than the one "
        "described); empty, the whole card. **Kept free**: the percent of it the plan leaves unused "
        "(`--gpu-memory`, `--margin` on the command line)."
    )

    def body(self) -> ComposeResult:
        yield Label("Plan for", classes="field-label")
        with Horizontal(classes="row"):
            yield Input(
                placeholder="empty = this machine; or 8xA100-80GB, 2x8xH100, profile.yaml", id="hw-spec"
            )
            yield Button("Use", id="hw-use")
        with Horizontal(classes="row"):
            yield labelled(
                "Memory per GPU to plan for",
                Input(placeholder="empty: whole card; e.g. 24GiB", id="hw-gpu-memory"),
            )
            yield labelled("Kept free (%)", Input(type="number", id="hw-margin"))
        yield Static("", id="hw-source", classes="section-title")
        yield Static("", id="hw-nogpu", classes="banner")
        yield Static("", id="hw-gpus")
        yield Static("", id="hw-host")
        yield Label("Hazards", classes="section-title")
        yield Static("", id="hw-hazards")

    def refresh_from_state(self) -> None:
        c = self.wizard.choices
        spec_input = self.query_one("#hw-spec", Input)
        spec_input.value = c.hardware_spec or ""
        # shown rounded; an untouched field keeps the exact value it shows (save)
        memory = fmt_bytes(c.gpu_memory_bytes) if c.gpu_memory_bytes else ""
        self._shown_card = (memory, f"{c.safety_margin * 100:g}")
        self.query_one("#hw-gpu-memory", Input).value, self.query_one("#hw-margin", Input).value = (
            self._shown_card
        )
        hw = self.wizard.choices.hardware
        if hw is not None:
            self._show(hw)
        elif self.wizard.detecting:
            self.query_one("#hw-source", Static).update("Detecting this machine…")

    def show_hardware(self, spec: str | None, report: HardwareReport | DswizError) -> None:
        if isinstance(report, DswizError):
            # "Reading …" gives way to what is still in use (or to nothing read), the problem below it
            in_use = self.wizard.choices.hardware
            if in_use is not None:
                self._show(in_use)
            else:
                self.query_one("#hw-source", Static).update(Text(f"Could not read {spec or 'this machine'}"))
            self.show_error(report)
            return
        self.wizard.choices.hardware_spec = spec
        self.wizard.choices.hardware = report
        self.wizard.plan = None
        self.set_status("")
        self._show(report)

    def _show(self, hw: HardwareReport) -> None:
        source = "Described" if hw.source == "described" else "Detected"
        what = f": {hw.description}" if hw.description else ""
        self.query_one("#hw-source", Static).update(Text(f"{source}{what}", style="bold"))
        banner = self.query_one("#hw-nogpu", Static)
        if not hw.gpus:
            reason = hw.no_gpu_reason or "no NVIDIA GPU was found"
            banner.update(
                Text(
                    f"No GPU on this machine ({reason}).\nType the hardware you will train on above "
                    "(e.g. 8xA100-80GB) and press Use to plan for it.",
                    style="bold yellow",
                )
            )
            banner.display = True
        else:
            banner.display = False
        self.query_one("#hw-gpus", Static).update(gpu_table(hw) if hw.gpus else "")
        self.query_one("#hw-host", Static).update(host_text(hw))
        self.query_one("#hw-hazards", Static).update(findings_text(hw.hazards, empty="None found."))

    advance_when_ready = False  # Enter on a changed spec: read it, then move on once it is read

    def submitted(self, field: Input) -> bool:
        """Enter in the spec field: a changed spec is read first, and the step moves on once it is."""
        spec = field.value.strip() or None
        if spec == self.wizard.choices.hardware_spec and not self.wizard.detecting:
            return False
        self.advance_when_ready = True
        if spec != self.wizard.choices.hardware_spec:
            self._use_spec()
        return True

    @on(Button.Pressed, "#hw-use")
    def _use_spec(self) -> None:
        spec = self.query_one("#hw-spec", Input).value.strip() or None
        self.query_one("#hw-source", Static).update(
            Text("Detecting this machine…" if spec is None else f"Reading {spec}…")
        )
        self.wizard.detecting = True
        self.wizard.detect_hardware(spec)

    def save(self) -> None:
        spec = self.query_one("#hw-spec", Input).value.strip() or None
        hw = self.wizard.choices.hardware
        if self.wizard.detecting:
            raise DswizError("still reading the hardware", "wait a moment, then press Next again")
        if hw is None:
            raise DswizError(
                "no hardware yet", "leave the field empty for this machine or describe one, then Use"
            )
        if spec != self.wizard.choices.hardware_spec:
            raise DswizError("the hardware field changed", "press Use (or Enter) to read it first")
        if not hw.gpus:
            raise DswizError(
                "there is no GPU to plan for", "describe the GPUs you will train on, e.g. 8xA100-80GB"
            )
        self._save_card_memory(hw)

    _shown_card: tuple[str, str] = ("", "")  # the two fields as last filled from the choices

    def card_memory_ok(self, hw: HardwareReport) -> bool:
        """Whether the memory per GPU the choices hold (--gpu-memory) fits ``hw``'s cards; if not, says so here."""
        try:
            self._card_memory(hw, self.wizard.choices.gpu_memory_bytes)
        except DswizError as e:
            self.show_error(e)
            return False
        return True

    @staticmethod
    def _card_memory(hw: HardwareReport, asked: int | None) -> int | None:
        return gpu_memory_for(asked, hw, what="memory per GPU", hardware_field="in the Plan for field")

    def _save_card_memory(self, hw: HardwareReport) -> None:
        """The memory per GPU and the share kept free, as `dswiz config --gpu-memory / --margin` take them; a change
        re-plans. A field left as it was filled keeps the exact value it shows rounded."""
        c = self.wizard.choices
        text = self.query_one("#hw-gpu-memory", Input).value.strip()
        if text == self._shown_card[0]:
            asked = c.gpu_memory_bytes
        else:
            try:
                asked = parse_card_size(text) if text else None
            except ValueError as e:
                raise DswizError(
                    f"memory per GPU: {e}", "or leave it empty to plan for the whole card"
                ) from None
        gpu_memory = self._card_memory(hw, asked)
        margin_text = self.query_one("#hw-margin", Input).value.strip()
        margin: float | None = None  # as it was
        if margin_text != self._shown_card[1]:
            try:
                margin = float(margin_text) if margin_text else DEFAULT_SAFETY_MARGIN * 100
            except ValueError:
                margin = math.nan
        if margin is not None and not 0 <= margin <= MAX_SAFETY_MARGIN * 100:  # nan too
            raise DswizError(
                f"kept free must be a percent from 0 to {MAX_SAFETY_MARGIN * 100:g}, not {margin_text!r}",
                f"type e.g. {DEFAULT_SAFETY_MARGIN * 100:g} (empty: {DEFAULT_SAFETY_MARGIN * 100:g})",
            )
        share = c.safety_margin if margin is None else margin / 100
        if (gpu_memory, share) != (c.gpu_memory_bytes, c.safety_margin):
            c.gpu_memory_bytes, c.safety_margin = gpu_memory, share
            self.wizard.plan = None  # planned for other memory: the Model step plans again
        self._shown_card = (text, margin_text)
