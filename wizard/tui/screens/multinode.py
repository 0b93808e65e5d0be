"""Step 5 — Multi-node: nodes, GPUs per node, the hostfile (edited and validated as you type), the launcher
with what each one requires, and the master address / port."""

from __future__ import annotations

import contextlib

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Label, RadioButton, RadioSet, Static, TextArea

from wizard.config.launchers import MultinodeLauncher
from wizard.errors import DswizError
from wizard.findings import Severity, has_errors
from wizard.launch_command import PORT_FIX, PORTS
from wizard.service import LAUNCHERS, parse_positive
from wizard.tui.screens.base import StepScreen
from wizard.tui.widgets.fields import labelled, radio_set
from wizard.tui.widgets.findings_view import findings_text


class MultiNodeStep(StepScreen):
    STEP = 4
    AUTO_FOCUS = "#nodes"
    HELP = (
        "How many machines and how the job reaches them. The **hostfile** has one line per node: "
        "`hostname slots=N` (N = GPUs per node), no duplicates. The **launcher** starts the nodes: pdsh (ssh from "
        "the first host, the default), the MPI flavours (openmpi, mpich, impi, mvapich) or Slurm start every node "
        "from one command; nossh (DeepSpeed without ssh) and standard (torchrun) run launch.sh on every node with "
        "NODE_RANK set. One node is always started locally. The **master** is the address every rank connects to "
        "(the first host by default)."
    )

    _placeholder = ""  # the hostfile this step last filled in by itself

    def body(self) -> ComposeResult:
        with Horizontal(classes="row"):
            yield labelled("Nodes", Input(id="nodes", type="integer"))
            yield labelled("GPUs per node", Input(id="gpus", type="integer"))
            yield labelled("Master address", Input(id="master-addr", placeholder="the first host"))
            yield labelled("Master port", Input(id="master-port", type="integer"))
        yield Static("", id="world")
        with Horizontal(classes="row", id="multi"):
            yield labelled("Hostfile", TextArea("", id="hostfile"))
            yield labelled(
                "Launcher", radio_set("launcher", "launcher", LAUNCHERS), Static("", id="launcher-note")
            )
        yield Label("Hostfile check", classes="section-title")
        yield Static("", id="hostfile-findings")

    def refresh_from_state(self) -> None:
        c = self.wizard.choices
        s = c.strategy
        if s is None:
            return
        with self.prevent(Input.Changed, TextArea.Changed):
            self.query_one("#nodes", Input).value = str(s.nodes)
            self.query_one("#gpus", Input).value = str(s.gpus_per_node)
            self.query_one("#master-addr", Input).value = c.master_addr
            self.query_one("#master-port", Input).value = str(c.master_port)
            if not c.hostfile_text and s.nodes > 1:
                c.hostfile_text = self.wizard.service.default_hostfile(s.nodes, s.gpus_per_node)
            self.query_one("#hostfile", TextArea).text = c.hostfile_text
        self.query_one(f"#launcher-{c.launcher}", RadioButton).value = True
        self._check()

    def _launcher(self) -> MultinodeLauncher:
        for name in LAUNCHERS:
            if self.query_one(f"#launcher-{name}", RadioButton).value:
                return name
        return self.wizard.choices.launcher

    def _topology(self) -> tuple[int, int]:
        nodes = parse_positive(self.query_one("#nodes", Input).value, "number of nodes") or 1
        gpus = parse_positive(self.query_one("#gpus", Input).value, "GPUs per node") or 1
        return nodes, gpus

    def _check(self) -> list:
        launcher = self._launcher()
        try:
            nodes, gpus = self._topology()
        except DswizError as e:
            self.set_status(e.problem, error=True)
            return []
        self.set_status("")
        self.query_one("#launcher", RadioSet).disabled = nodes == 1
        note = Text(self.wizard.service.LAUNCHER_NOTES.get(launcher, ""), style="dim")
        if nodes == 1:
            note = Text("One node: started locally, no multi-node launcher.", style="dim")
        for problem in self.wizard.service.launcher_problems(launcher, self.wizard.choices.hardware):
            note.append(f"\n{problem}", style="bold red")
        self.query_one("#launcher-note", Static).update(note)
        s = self.wizard.choices.strategy
        if s is not None:
            world = nodes * gpus
            self.query_one("#world", Static).update(
                Text(
                    f"world size {world}: global batch {s.micro_batch_size * s.gradient_accumulation_steps * world}"
                    f" = micro {s.micro_batch_size} × accumulation {s.gradient_accumulation_steps} × {world}"
                )
            )
        out = self.query_one("#hostfile-findings", Static)
        multi = nodes > 1
        area = self.query_one("#hostfile", TextArea)
        area.disabled = not multi
        if not multi:
            if area.text == self._placeholder:  # the last count's placeholder lines, not the user's: gone
                with self.prevent(TextArea.Changed):
                    area.text = ""
            out.update(Text("Single node: no hostfile is written or needed.", style="dim"))
            return []
        text = area.text
        placeholder = self.wizard.service.default_hostfile(nodes, gpus)
        if not text.strip() or text == self._placeholder:
            # nothing typed yet (or only the last placeholder): one placeholder line per node to edit
            with self.prevent(TextArea.Changed):
                area.text = text = placeholder
        self._placeholder = placeholder
        try:
            findings = self.wizard.service.check_hostfile(
                text, nodes=nodes, gpus_per_node=gpus, launcher=launcher
            )
        except DswizError as e:
            out.update(Text(e.problem, style="dim"))
            return []
        out.update(findings_text(findings, empty="Hostfile is valid."))
        return findings

    @on(Input.Changed)
    @on(TextArea.Changed)
    @on(RadioSet.Changed)
    def _changed(self) -> None:
        self._check()

    def keep(self) -> None:
        # the typed text and the launcher; the node count changes the strategy and the plan: Next sets it
        c = self.wizard.choices
        c.launcher = self._launcher()
        c.master_addr = self.query_one("#master-addr", Input).value.strip()
        c.hostfile_text = self.query_one("#hostfile", TextArea).text
        with contextlib.suppress(DswizError):
            port = parse_positive(self.query_one("#master-port", Input).value, "master port")
            if port is not None and PORTS[0] <= port <= PORTS[1]:
                c.master_port = port

    def save(self) -> None:
        c = self.wizard.choices
        nodes, gpus = self._topology()
        launcher = self._launcher()
        port = parse_positive(self.query_one("#master-port", Input).value, "master port") or 29500
        if not PORTS[0] <= port <= PORTS[1]:
            raise DswizError(f"port {port} is out of range", PORT_FIX)
        problems = self.wizard.service.launcher_problems(launcher, self.wizard.choices.hardware)
        if nodes > 1 and problems:
            raise DswizError(problems[0], "choose another launcher")
        findings = self._check()
        if has_errors(findings):
            first = next(f for f in findings if f.severity is Severity.ERROR)
            raise DswizError(f"hostfile: {first.what}", first.fix)
        before = (c.strategy, c.global_batch, c.launcher, c.master_addr, c.master_port, c.hostfile_text)
        c.set_topology(nodes=nodes, gpus_per_node=gpus)
        c.launcher = launcher
        c.master_addr = self.query_one("#master-addr", Input).value.strip()
        c.master_port = port
        c.hostfile_text = self.query_one("#hostfile", TextArea).text if nodes > 1 else ""
        try:
            self.wizard.service.config_set(c, self.wizard.model)  # the writers' own checks (hosts vs nodes)
        except DswizError:
            c.strategy, c.global_batch, c.launcher, c.master_addr, c.master_port, c.hostfile_text = before
            raise
