"""The deploy screen: pick bundles (a file picker showing only .edgepkg) or type an
``oci://HOST[:PORT]/REPO:TAG`` reference (resolved to a digest once; each agent pulls it), pick
targets and a canary, then watch a staged rollout with a progress bar and per-step results per
agent."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import (
    Button,
    Checkbox,
    DataTable,
    DirectoryTree,
    Header,
    Input,
    Label,
    SelectionList,
    Static,
)
from textual.widgets.selection_list import Selection

from console.commands import LocalBundle, read_bundles, resolve_reference
from console.errors import ConsoleError
from console.fleet import AgentState, FleetAgent
from console.messages import FleetChanged, RolloutsChanged
from console.remembered import last_bundle_dir, remember_bundle_dir
from console.rollout.by_reference import bundle_head, reference_label, reference_mismatch
from console.rollout.session import RolloutJob
from console.rollout.staged import RolloutOutcome, TargetProgress, group_bundles
from console.screens.base import ConsoleScreen
from console.screens.confirm import ConfirmScreen
from console.widgets.bundle_tree import BundleTree
from console.widgets.console_footer import ConsoleFooter
from console.widgets.target_list import TargetList
from console.widgets.target_row import TargetRow
from packager.bundle.oci.layout import PROFILE as PROFILE_KEY


def profile_mismatch(bundles: Sequence[LocalBundle], agent: FleetAgent) -> str | None:
    """Why none of a model's bundles fits ``agent`` by its advertised profile (None: fine).
    The authoritative check (arch and runtimes too) runs against GetInfo before upload."""
    if not agent.profile:
        return None
    for group in group_bundles(bundles):
        if not any(b.manifest.profile == agent.profile or b.manifest.arch == agent.arch
                   for b in group):
            m = group[0].manifest
            built = ", ".join(sorted({b.manifest.profile for b in group}))
            return (f"{m.name} v{m.version} is built for {built}; {agent.name} runs "
                    f"{agent.profile}: build it with `edge-pack build --profile "
                    f"{agent.profile}`")
    return None


class DeployScreen(ConsoleScreen):
    """Bundles + targets + canary -> confirmation -> staged rollout."""

    BINDINGS = [
        Binding("escape", "back", "Back", tooltip="Back (a rollout goes on in the background)"),
        Binding("ctrl+s", "deploy", "Start rollout", tooltip="Deploy the picked bundles"),
        Binding("delete", "clear_bundles", "Clear bundles", tooltip="Unpick every bundle"),
        Binding("c", "mark_canary", "Canary", tooltip="The highlighted target goes first"),
        Binding("ctrl+x", "cancel_rollout", "Cancel rollout",
                tooltip="Stop the running rollout (a canary under watch is rolled back)"),
        Binding("tab", "next_field(1)", "Next field", show=False,
                tooltip="Files, targets, soak time, Start, then the oci:// reference"),
        Binding("shift+tab", "next_field(-1)", "Previous field", show=False,
                tooltip="Back through the fields"),
    ]
    # Tab follows the order of the work: pick, tick, soak, start; a reference is the other way
    TAB_ORDER = ("#bundle-tree", "#target-list", "#soak-input", "#start", "#reference-input",
                 "#registry-insecure", "#steps-table")

    def __init__(self, preselect: Sequence[str] = (), *, root: Path | None = None) -> None:
        super().__init__()
        self.preselect = set(preselect)
        self.root = root
        self.bundles: list[LocalBundle] = []
        self.reference: Any = None  # a resolved oci:// reference (instead of bundle files)
        self.job: RolloutJob | None = None  # the rollout started here (the app runs it)
        self.outcome: RolloutOutcome | None = None
        self.rows: dict[str, TargetRow] = {}
        self._target_keys: list[str] = []
        self._shown_targets: list[tuple[str, str | None, bool]] | None = None
        self.registry_insecure = False  # the reference was resolved over plain HTTP
        self.canary: str | None = None  # the target that goes first (None: the first ticked)
        self._unsubscribe: Callable[[], None] = lambda: None
        self._unsubscribe_rollouts: Callable[[], None] = lambda: None

    def compose(self) -> ComposeResult:
        settings = self.console.settings
        root = (self.root or last_bundle_dir(settings.state_dir) or settings.bundle_dir
                or Path.cwd())
        yield Header()
        with Horizontal(id="deploy-pick"):
            with Vertical(id="deploy-files"):
                yield Label("Bundles: Enter picks, Backspace: up", classes="section-title")
                yield BundleTree(root, id="bundle-tree")
                yield Label("or an oci:// reference: Enter resolves",
                            classes="section-title")
                with Horizontal(id="reference-row"):
                    yield Input(placeholder="oci://HOST[:PORT]/REPO:TAG", id="reference-input")
                    yield Checkbox("plain HTTP", id="registry-insecure")
            with Vertical(id="deploy-targets"):
                yield Label("Picked bundles", classes="section-title")
                yield Static("none yet", id="picked-bundles")
                yield Label("Targets: Space ticks, c: canary", classes="section-title")
                yield TargetList(id="target-list")
                with Horizontal(id="deploy-options"):
                    yield Label("canary", classes="option-label")
                    yield Static("the first ticked", id="canary-name")
                    yield Label("soak s", classes="option-label")
                    yield Input(str(int(self.console.settings.canary_soak_s)) if
                                self.console.settings.canary_soak_s.is_integer() else
                                str(self.console.settings.canary_soak_s),
                                id="soak-input", type="number")
                yield Button("Start rollout (Ctrl+S)", id="start", variant="error")
        yield Label("Rollout", classes="section-title")
        yield VerticalScroll(Static("pick bundles and targets, then start", id="rollout-empty"),
                             id="rollout-rows")
        yield DataTable(id="steps-table", cursor_type="row")
        yield Static("", id="deploy-status")
        yield ConsoleFooter()

    def action_next_field(self, step: int) -> None:
        """Focus the next (``step`` 1) or previous (-1) field of :attr:`TAB_ORDER` that can
        take the focus now."""
        fields = [w for w in (self.query_one(q) for q in self.TAB_ORDER)
                  if w.focusable and w.display]
        if not fields:
            return
        here = self.focused
        i = fields.index(here) if here in fields else (-1 if step > 0 else 0)
        fields[(i + step) % len(fields)].focus()

    def on_mount(self) -> None:
        self.sub_title = "deploy"
        self.query_one("#steps-table", DataTable).add_columns("AGENT", "STEP", "OK", "DETAIL")
        self._unsubscribe = self.console.fleet.subscribe(
            lambda: self.post_message(FleetChanged()))
        self._unsubscribe_rollouts = self.console.rollouts.subscribe(
            lambda: self.post_message(RolloutsChanged()))
        self._refresh_targets()
        self.query_one(BundleTree).focus()

    def on_unmount(self) -> None:
        self._unsubscribe()
        self._unsubscribe_rollouts()

    # -- picking -------------------------------------------------------------------------------
    def on_fleet_changed(self, _: FleetChanged) -> None:
        if not self.running:
            self._refresh_targets()

    def _candidates(self) -> list[FleetAgent]:
        return [a for a in self.console.fleet.agents()
                if a.state not in (AgentState.OFFLINE, AgentState.API_MISMATCH)]

    def _refresh_targets(self) -> None:
        """List the agents that could take the picked bundles (refusals shown, not ticked)."""
        targets = self.query_one("#target-list", TargetList)
        ticked = set(targets.selected) | self.preselect
        agents = self._candidates()
        keys = [a.key for a in agents]
        refusals = {a.key: self._mismatch(a) for a in agents}
        shown = [(a.key, refusals[a.key], a.key == self.canary) for a in agents]
        if shown == self._shown_targets:
            return
        self._shown_targets = shown
        highlighted = targets.highlighted
        targets.clear_options()
        for agent in agents:
            why = refusals[agent.key]
            label = Text(f"{agent.name}  {agent.profile or '?'}")
            if agent.key == self.canary and not why:
                label.append("  ◆ canary", style="bold yellow")
            if why:  # wrapped by the list, never clipped
                label.append(f"  refused: {why}", style="magenta")
            # a refused agent cannot be ticked: nothing would be sent to it
            targets.add_option(Selection(label, agent.key, agent.key in ticked and not why,
                                         id=agent.key, disabled=bool(why)))
        self._target_keys = keys
        if highlighted is not None and targets.option_count:
            targets.highlighted = min(highlighted, targets.option_count - 1)
        self._refresh_canary()

    def _mismatch(self, agent: FleetAgent) -> str | None:
        """Why what is picked (bundles or the reference) cannot go to ``agent`` (None: fine)."""
        if self.reference is not None:
            return reference_mismatch(self.reference, agent)
        return profile_mismatch(self.bundles, agent)

    def _canary_key(self) -> str | None:
        """The canary: the marked target while it is ticked, else the first ticked one."""
        ticked = self.query_one("#target-list", TargetList).selected
        if self.canary in ticked:
            return self.canary
        return next((k for k in self._target_keys if k in ticked), None)

    def _refresh_canary(self) -> None:
        key = self._canary_key()
        agent = self.console.fleet.get(key) if key else None
        text = (agent.name if agent else "-") + ("" if key == self.canary else
                                                 "  (the first ticked; c marks another)")
        self.query_one("#canary-name", Static).update(Text(text))

    def action_mark_canary(self) -> None:
        """Mark the highlighted target as the canary (ticking it)."""
        targets = self.query_one("#target-list", TargetList)
        if targets.highlighted is None:
            return
        option = targets.get_option_at_index(targets.highlighted)
        if option.disabled:
            self.notify("A refused target cannot be the canary", severity="warning")
            return
        self.canary = option.value
        targets.select(option.value)
        self._refresh_targets()
        self._refresh_canary()

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged[str]) -> None:
        targets = event.selection_list
        for key in list(targets.selected):  # "select all" included: refused stays unticked
            if targets.get_option(key).disabled:
                targets.deselect(key)
        self._refresh_canary()

    def on_directory_tree_file_selected(self, event: DirectoryTree.FileSelected) -> None:
        event.stop()
        self.toggle_bundle(Path(event.path))

    def toggle_bundle(self, path: Path) -> None:
        """Pick ``path`` (read and checked now) or unpick it when already picked."""
        if any(b.path == path for b in self.bundles):
            self.bundles = [b for b in self.bundles if b.path != path]
        else:
            try:
                self.bundles += read_bundles([path])
            except ConsoleError as exc:
                self.notify(str(exc), severity="error", timeout=8)
                return
            remember_bundle_dir(self.console.settings.state_dir, path.parent)
        self.reference = None  # bundle files replace a reference
        self._show_bundles()
        self._refresh_targets()

    def _show_bundles(self) -> None:
        if self.reference is not None:
            held = ", ".join(sorted(str(e.annotations.get(PROFILE_KEY))
                                    for e in self.reference.entries))
            self.query_one("#picked-bundles", Static).update(Text(
                f"{reference_label(self.reference)}\nprofiles: {held}"))
            return
        text = "\n".join(f"{b.manifest.name} v{b.manifest.version}  {b.manifest.profile}  "
                         f"({b.path.name})" for b in self.bundles) or "none yet"
        self.query_one("#picked-bundles", Static).update(Text(text))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "reference-input":
            event.stop()
            self.pick_reference(event.value.strip())

    def pick_reference(self, text: str) -> None:
        """Resolve ``text`` (``oci://...:TAG``) to a digest in a worker; once resolved it
        replaces the picked bundles (an empty text clears it)."""
        if not text:
            self.action_clear_bundles()
            return
        insecure = self.query_one("#registry-insecure", Checkbox).value
        self.query_one("#picked-bundles", Static).update(Text(f"resolving {text}…"))
        self.run_worker(lambda: self._resolve(text, insecure), thread=True,
                        group="resolve", exclusive=True, exit_on_error=False)

    def _resolve(self, text: str, insecure: bool) -> None:
        try:
            resolved = resolve_reference(text, insecure=insecure)
        except ConsoleError as exc:
            self.app.call_from_thread(self._resolved, None, str(exc))
            return
        self.app.call_from_thread(self._resolved, resolved, "")

    def _resolved(self, resolved: Any, error: str) -> None:
        if resolved is None:
            self.notify(error, severity="error", timeout=8)
            self._show_bundles()
            return
        self.reference = resolved
        self.registry_insecure = self.query_one("#registry-insecure", Checkbox).value
        self.bundles = []
        self._show_bundles()
        self._refresh_targets()

    def action_clear_bundles(self) -> None:
        self.bundles = []
        self.reference = None
        self._show_bundles()
        self._refresh_targets()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            self.action_deploy()

    def action_back(self) -> None:
        if self.running:
            self.notify("The rollout goes on in the background: R lists rollouts")
        self.app.pop_screen()

    # -- rollout -------------------------------------------------------------------------------
    def _soak_s(self) -> float | None:
        try:
            value = float(self.query_one("#soak-input", Input).value or "0")
        except ValueError:
            return None
        return value if value >= 0 else None

    def action_deploy(self) -> None:
        if self.running:
            return
        picked = [a for k in self.query_one("#target-list", TargetList).selected
                  if (a := self.console.fleet.get(k)) is not None]
        listed = [a for a in self._candidates() if a not in picked]
        refused = {a.key: why for a in [*picked, *listed] if (why := self._mismatch(a))}
        targets = [a for a in picked if a.key not in refused]
        soak = self._soak_s()
        problem = ("pick at least one bundle or resolve a reference"
                   if not self.bundles and self.reference is None else
                   "tick at least one target" if not targets else
                   "the soak time must be a number of seconds" if soak is None else None)
        if problem:
            self.notify(problem, severity="warning")
            return
        assert soak is not None
        chosen = self._canary_key()
        canary = chosen if chosen in {a.key for a in targets} else targets[0].key
        canary_name = next((a.name for a in targets if a.key == canary), targets[0].name)
        models = (reference_label(self.reference) if self.reference is not None else
                  ", ".join(sorted({f"{b.manifest.name} v{b.manifest.version}"
                                    for b in self.bundles})))
        question = (f"Deploy {models} to {len(targets)} agent(s)? {canary_name} goes first "
                    f"and must stay healthy for {soak:g}s before the others; if it fails it "
                    "is rolled back and nothing else is touched.")
        if refused:
            names = {a.key: a.name for a in [*picked, *listed]}
            question += " Not deployed (refused): " + "; ".join(
                f"{names[k]}: {why}" for k, why in refused.items()) + "."

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.start_rollout(targets, canary, soak)

        self.app.push_screen(ConfirmScreen("Deploy", question, yes="Deploy"), confirmed)

    def start_rollout(self, targets: Sequence[FleetAgent], canary: str, soak_s: float) -> None:
        """Start the rollout in the background (the app owns it) and follow it here."""
        self.outcome = None
        self.show_targets(targets, canary)
        self.query_one("#deploy-status", Static).update(
            "[b]rollout running…[/b] (it goes on in the background: Esc, R lists rollouts)")
        if self.reference is not None:
            self.job = self.console.start_reference_rollout(
                self.reference, targets, canary, soak_s,
                check=partial(bundle_head, insecure=self.registry_insecure))
        else:
            self.job = self.console.start_rollout(list(self.bundles), targets, canary, soak_s)
        self.refresh_bindings()

    @property
    def running(self) -> bool:
        """True while the rollout started here runs."""
        return self.job is not None and self.job.running

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_rollout" and not self.running:
            return False  # only shown while a rollout runs
        return super().check_action(action, parameters)

    def action_cancel_rollout(self) -> None:
        job = self.job
        if job is None or not job.running:
            return

        def confirmed(yes: bool | None) -> None:
            if yes and self.console.rollouts.cancel(job.id):
                self.query_one("#deploy-status", Static).update(
                    "[b]cancelling: finishing the upload in flight…[/b]")

        self.app.push_screen(ConfirmScreen(
            "Cancel rollout", "Stop the rollout? A canary still under watch is rolled back; "
            "agents not started yet are left alone.", yes="Stop rollout"), confirmed)

    def show_targets(self, targets: Sequence[FleetAgent], canary: str) -> None:
        """One progress row per target (waiting), and an empty step table."""
        box = self.query_one("#rollout-rows", VerticalScroll)
        box.remove_children()
        self.rows = {}
        for agent in targets:
            row = TargetRow(TargetProgress(agent.key, agent.name, canary=agent.key == canary))
            self.rows[agent.key] = row
            box.mount(row)
        self.query_one("#steps-table", DataTable).clear()

    def on_rollouts_changed(self, _: RolloutsChanged) -> None:
        job = self.job
        if job is None:
            return
        for progress in job.targets.values():
            self.show_progress(progress)
        if job.outcome is not None and self.outcome is None:
            self.finish(job.outcome)

    def show_progress(self, progress: TargetProgress) -> None:
        """Render one target's new state (and any new step results)."""
        row = self.rows.get(progress.key)
        if row is not None and row.progress != progress:
            before = len(row.progress.steps)
            row.show(progress)
            table = self.query_one("#steps-table", DataTable)
            for step in progress.steps[before:]:
                table.add_row(progress.name, step.step,
                              Text("ok", style="green") if step.ok else Text("FAILED",
                                                                            style="bold red"),
                              step.message)

    def finish(self, outcome: RolloutOutcome) -> None:
        """The rollout ended: say how (the app logged it and refreshes the fleet)."""
        self.outcome = outcome
        self.refresh_bindings()
        for progress in outcome.targets.values():
            self.show_progress(progress)
        style = "green" if outcome.ok else "bold red"
        self.query_one("#deploy-status", Static).update(f"[{style}]{escape(outcome.message)}[/]")
