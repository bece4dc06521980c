"""The edge-console terminal UI: find agents, deploy, roll back and watch them.

The app owns the long-lived parts: the fleet view model (:mod:`console.fleet`), the mDNS
browser worker, the poll worker that asks each agent for its state (one round at a time, the
next scheduled only after the last finished), and the management clients
(:mod:`console.connections`). Screens render and act; network work runs in workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.dom import DOMNode
from textual.screen import Screen
from textual.worker import get_current_worker

from console.config import ConsoleSettings
from console.connections import Connections
from console.discovery import AgentBrowser
from console.fleet import AgentState, Fleet, FleetAgent
from console.rollout.session import RolloutJob, Rollouts
from console.screens.base import MUTATING_ACTIONS
from console.screens.details import DetailsScreen
from console.screens.events import EventsScreen
from console.screens.fleet import FleetScreen
from console.screens.help import HelpScreen
from console.screens.jump import JumpScreen

if TYPE_CHECKING:
    from console.commands import LocalBundle
    from console.fleet_broker import FleetBroker
    from console.rollout.staged import RolloutOutcome

PROBE_THREADS = 16
VIEWS_HINT = "try fleet, events, deploy, rollouts, agent NAME, history NAME, help"


# vi motions and the widget actions that perform them (a table, an option list, a scroll pane)
MOTIONS: dict[str, tuple[str, ...]] = {
    "down": ("cursor_down", "scroll_down"), "up": ("cursor_up", "scroll_up"),
    "top": ("scroll_top", "first", "scroll_home"), "bottom": ("scroll_bottom", "last",
                                                            "scroll_end"),
    "page_down": ("page_down",), "page_up": ("page_up",)}


class EdgeConsoleApp(App[None]):
    """The console. ``clock`` feeds every displayed time (fixed in snapshot tests);
    ``poll=False`` never contacts agents (the fleet shows only what discovery says)."""

    CSS_PATH = "console.tcss"
    TITLE = "edge-console"
    BINDINGS = [
        Binding("question_mark", "help", "Help", tooltip="Keys of this screen"),
        Binding("colon", "jump", "Jump", tooltip="Jump to a view: fleet, events, agent NAME..."),
        Binding("e", "events", "Events", tooltip="The console's event log"),
        Binding("R", "rollouts", "Rollouts", tooltip="Running and recent rollouts"),
        Binding("q", "quit", "Quit", tooltip="Leave edge-console"),
        Binding("j", "move('down')", "Down", show=False, tooltip="Next row (vi)"),
        Binding("k", "move('up')", "Up", show=False, tooltip="Previous row (vi)"),
        Binding("g", "move('top')", "Top", show=False, tooltip="First row (vi)"),
        Binding("G", "move('bottom')", "Bottom", show=False, tooltip="Last row (vi)"),
        Binding("ctrl+f", "move('page_down')", "Page down", show=False,
                tooltip="One page down (vi)"),
        Binding("ctrl+b", "move('page_up')", "Page up", show=False, tooltip="One page up (vi)"),
    ]

    def __init__(self, settings: ConsoleSettings | None = None, *,
                 clock: Callable[[], float] = time.time, poll: bool = True) -> None:
        super().__init__()
        self.settings = settings or ConsoleSettings()
        self.read_only = self.settings.read_only
        self.clock = clock
        self.poll_enabled = poll
        self.fleet = Fleet(clock=clock)
        self.connections = Connections(self.settings)
        self._probe_pool = ThreadPoolExecutor(PROBE_THREADS, thread_name_prefix="probe")
        self.poll_rounds = 0  # finished poll rounds (tests wait on it)
        self.polling = False  # a round is in flight
        self._poll_now = asyncio.Event()
        self._asked_trust: set[str] = set()  # addresses and fingerprints already asked about
        self._trust_queue: list[tuple[str, str]] = []  # (address, fingerprint) to ask next
        self._trust_open = False  # a trust prompt is on screen
        self.rollouts = Rollouts(clock=clock)  # run in the background, whatever is on screen
        self.broker: FleetBroker | None = None  # the fleet's MQTT broker, once connected

    # -- lifecycle -----------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.fleet.add_static(self.settings.agents)
        self.rollouts.subscribe(self._show_rollouts_in_header)
        self.push_screen(FleetScreen())
        if self.settings.discovery:
            self.browse()
        if self.poll_enabled:
            self.poll_loop()
        if self.settings.broker is not None:
            self.connect_broker()

    async def on_unmount(self) -> None:
        self.workers.cancel_all()
        self._probe_pool.shutdown(wait=False, cancel_futures=True)
        await asyncio.to_thread(self.connections.close)
        if self.broker is not None:
            await asyncio.to_thread(self.broker.close)

    # -- workers -------------------------------------------------------------------------------
    @work(exclusive=True, group="discovery", exit_on_error=False)
    async def browse(self) -> None:
        """Follow mDNS announcements into the fleet until the app stops."""
        interfaces = list(self.settings.interfaces) if self.settings.interfaces else None
        try:
            async with AgentBrowser(interfaces=interfaces) as browser:
                async for event in browser.events():
                    self.fleet.apply_discovery(event)
        except Exception as exc:  # shown in the UI, never a traceback
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            text = (f"mDNS discovery failed ({why or type(exc).__name__}); list agents with "
                    "--agent HOST:PORT or choose --mdns-interface")
            self.fleet.log("", "error", text)
            self.notify(text, severity="error", timeout=10)

    @work(thread=True, exclusive=True, group="broker", exit_on_error=False)
    def connect_broker(self) -> None:
        """Connect to the fleet's MQTT broker (``--broker``, ``[fleet]``): its agents are
        listed beside the mDNS ones (the fleet screen's broker panel)."""
        import os

        from console.fleet_broker import FleetBroker
        from edge_agent.fleet.link import BrokerCredentials

        cfg = self.settings.broker
        assert cfg is not None
        try:
            broker = FleetBroker(cfg.url, BrokerCredentials(
                cfg.ca, cfg.cert, cfg.key, cfg.username,
                os.environ.get("EDGE_MQTT_PASSWORD") if cfg.username else None),
                allow_plaintext=cfg.allow_plaintext)
            broker.connect()
        except Exception as exc:  # shown in the UI, never a traceback
            text = f"fleet broker {cfg.url}: {exc}"
            self.call_from_thread(self.fleet.log, "", "error", text)
            self.call_from_thread(self.notify, text, severity="error", timeout=10)
            return
        if get_current_worker().is_cancelled:  # the app is closing
            broker.close()
            return
        self.broker = broker
        self.call_from_thread(self.fleet.log, "", "info",
                              f"connected to the fleet broker {broker.broker}")

    @work(exclusive=True, group="poll", exit_on_error=False)
    async def poll_loop(self) -> None:
        """Ask every agent for its state, one round at a time, forever: the next round starts
        ``poll_interval_s`` after the last one finished, or as soon as :meth:`poll_agents`
        asks (never while a round is in flight)."""
        while True:
            self.polling = True
            try:
                await self.poll_once()
            finally:
                self.polling = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poll_now.wait(), self.settings.poll_interval_s)
            self._poll_now.clear()

    def poll_agents(self) -> None:
        """Ask every agent again as soon as the round in flight (if any) has finished."""
        self._poll_now.set()

    async def poll_once(self) -> None:
        """One round: probe every agent that may answer, concurrently, off the UI thread."""
        loop = asyncio.get_running_loop()
        agents = [a for a in self.fleet.agents() if self._worth_probing(a)]
        results = await asyncio.gather(*(loop.run_in_executor(
            self._probe_pool, self.connections.probe, a) for a in agents))
        for agent, result in zip(agents, results, strict=True):
            self.fleet.apply_probe(agent.key, result)
        self.poll_rounds += 1
        self._ask_trust()

    def _ask_trust(self) -> None:
        """First contact with a TLS agent: show its fingerprint and ask to pin it, once per
        address and fingerprint; several new agents are asked one after the other, never
        stacked (a stacked prompt swallowed keys)."""
        for address, fp in list(self.connections.untrusted.items()):
            if address in self._asked_trust or fp in self._asked_trust:
                continue
            self._asked_trust.update((address, fp))
            self._trust_queue.append((address, fp))
        self._next_trust_prompt()

    def _agent_label(self, address: str) -> str:
        """``name (HOST:PORT)`` of the agent at ``address``, or the address alone."""
        names = sorted({a.name for a in self.fleet.agents()
                        if a.address == address and a.name and a.name != address})
        return f"{', '.join(names)} ({address})" if names else address

    def _next_trust_prompt(self) -> None:
        from console.screens.confirm import ConfirmScreen

        if self._trust_open or not self._trust_queue:
            return
        address, fp = self._trust_queue.pop(0)
        self._trust_open = True

        async def answered(yes: bool | None) -> None:
            self._trust_open = False
            if yes:
                await asyncio.to_thread(self.connections.trust, address, fp)
                self.fleet.log("", "info", f"pinned the certificate of {address}: {fp}")
                self.poll_agents()
            self._next_trust_prompt()

        waiting = len(self._trust_queue)
        self.push_screen(ConfirmScreen(
            "New agent" + (f" ({waiting} more waiting)" if waiting else ""),
            f"The authenticity of agent {self._agent_label(address)} can't be established.\n"
            f"Its certificate fingerprint is\n{fp}\nCompare it with `edge-agent token "
            "--state-dir DIR` on the device. Trust it and remember it in known_agents?",
            yes="Trust"), answered)

    @staticmethod
    def _worth_probing(agent: FleetAgent) -> bool:
        if agent.state is AgentState.API_MISMATCH and agent.discovered:
            return False  # its advert already says it speaks another API
        return not (agent.left and not agent.static)

    # -- rollouts (owned here: they outlive the deploy view) -----------------------------------
    def start_rollout(self, bundles: Sequence[LocalBundle], targets: Sequence[FleetAgent],
                      canary: str, soak_s: float) -> RolloutJob:
        """Start a staged rollout in a background thread; its progress goes to
        :attr:`rollouts` (the header, the rollouts view and the deploy view show it)."""
        from console.rollout.staged import TargetProgress

        models = ", ".join(sorted({f"{b.manifest.name} v{b.manifest.version}" for b in bundles}))
        job = self.rollouts.add(f"{models} to {len(targets)} agent(s)", [
            TargetProgress(a.key, a.name, canary=a.key == canary) for a in targets], canary)
        self.fleet.log("", "info", f"rollout #{job.id} of {len(bundles)} bundle(s) to "
                       f"{len(targets)} agent(s) started")
        self.run_worker(partial(self._run_rollout, job, list(bundles), list(targets), canary,
                                soak_s), thread=True, group="rollouts", exit_on_error=False,
                        name=f"rollout-{job.id}")
        return job

    def start_reference_rollout(self, resolved: Any, targets: Sequence[FleetAgent],
                                canary: str, soak_s: float, *,
                                check: Callable[[Any, Any], Any] | None = None) -> RolloutJob:
        """Start a staged rollout of a resolved ``oci://`` reference (each agent pulls it
        from the registry: DeployReference) in a background thread, as :meth:`start_rollout`;
        ``check(resolved, entry)`` gives what CheckDeploy is fed for one profile's bundle."""
        from console.rollout.by_reference import reference_label
        from console.rollout.staged import TargetProgress

        label = reference_label(resolved)
        job = self.rollouts.add(f"{label} to {len(targets)} agent(s)", [
            TargetProgress(a.key, a.name, canary=a.key == canary) for a in targets], canary)
        self.fleet.log("", "info", f"rollout #{job.id} of {label} to {len(targets)} agent(s) "
                       "started")
        self.run_worker(partial(self._run_rollout, job, [], list(targets), canary, soak_s,
                                resolved=resolved, check=check), thread=True,
                        group="rollouts", exit_on_error=False, name=f"rollout-{job.id}")
        return job

    def _run_rollout(self, job: RolloutJob, bundles: list[LocalBundle],
                     targets: list[FleetAgent], canary: str, soak_s: float, *,
                     resolved: Any = None, check: Callable[[Any, Any], Any] | None = None
                     ) -> None:
        from console.rollout.by_reference import ReferenceRollout
        from console.rollout.staged import Rollout, RolloutOutcome

        worker = get_current_worker()
        rollout: Rollout
        if resolved is not None:
            rollout = ReferenceRollout(
                self.connections, resolved, targets, canary=canary, soak_s=soak_s,
                check=check,
                cancelled=lambda: job.cancel_requested.is_set() or worker.is_cancelled,
                report=lambda p: self.call_from_thread(self.rollouts.progress, job.id, p))
        else:
            rollout = Rollout(
                self.connections, bundles, targets, canary=canary, soak_s=soak_s,
                cancelled=lambda: job.cancel_requested.is_set() or worker.is_cancelled,
                report=lambda p: self.call_from_thread(self.rollouts.progress, job.id, p))
        try:
            outcome = rollout.run()
        except Exception as exc:  # shown, never a traceback
            outcome = RolloutOutcome(False, f"rollout stopped: {type(exc).__name__}: {exc}",
                                     dict(rollout.progress))
        if not worker.is_cancelled:  # the app is not closing
            self.call_from_thread(self._rollout_finished, job.id, outcome)

    def _rollout_finished(self, job_id: int, outcome: RolloutOutcome) -> None:
        self.rollouts.finished(job_id, outcome)
        self.fleet.log("", "info" if outcome.ok else "error",
                       f"rollout #{job_id}: {outcome.message}")
        for progress in outcome.targets.values():
            self.fleet.log(progress.name, "info" if progress.phase.value == "done"
                           else "error", f"deploy: {progress.phase.value} {progress.message}")
        self.notify(f"rollout #{job_id}: {outcome.message}",
                    severity="information" if outcome.ok else "error", timeout=10)
        self.poll_agents()

    def _show_rollouts_in_header(self) -> None:
        text = self.rollouts.header_text()
        self.title = f"{self.TITLE} · {text}" if text else self.TITLE

    def action_rollouts(self) -> None:
        from console.screens.rollouts import RolloutsScreen

        if not isinstance(self.screen, RolloutsScreen):
            self.push_screen(RolloutsScreen())

    # -- navigation ----------------------------------------------------------------------------
    def open_agent(self, key: str) -> None:
        """Show the agent screen of ``key``."""
        from console.screens.agent import AgentScreen

        if self.fleet.get(key) is not None:
            self.push_screen(AgentScreen(key))

    @work(exclusive=True, group="drill-down", exit_on_error=False)
    async def open_broker_agent(self, agent_id: str) -> None:
        """Drill down on a fleet agent listed by the broker: its agent screen over the direct
        management connection when the management address it said at connect answers from
        here, else what the broker knows of it (:class:`BrokerAgentScreen`)."""
        from console.config import StaticAgent, parse_address
        from console.errors import ConsoleError
        from console.screens.broker_agent import BrokerAgentScreen

        view = self.broker.agent(agent_id) if self.broker is not None else None
        if view is None:
            self.notify(f"The fleet broker does not know {agent_id}", severity="warning")
            return
        why = "it has no management address (reached through the broker alone)"
        if view.management:
            try:
                host, port = parse_address(view.management, where="management")
            except ConsoleError:
                host, port = "", 0
            name = str(view.presence.get("name") or agent_id)
            known = next((a for a in self.fleet.agents() if a.address == view.management),
                         None) or FleetAgent(key=view.management, name=name, host=host,
                                             port=port)
            self.notify(f"{agent_id}: trying its management API {view.management}")
            result = await asyncio.get_running_loop().run_in_executor(
                self._probe_pool, self.connections.probe, known)
            if result.state is AgentState.ONLINE:
                if self.fleet.get(known.key) is None:
                    self.fleet.add_static([StaticAgent(host, port, name)])
                self.fleet.apply_probe(known.key, result)
                self.open_agent(known.key)
                return
            why = (f"its management API {view.management} does not answer from here "
                   f"({result.state.value}: {result.message})")
        self.push_screen(BrokerAgentScreen(agent_id, why, clock=self.clock))

    def show_details(self, agent: FleetAgent) -> None:
        """Show the details modal of ``agent``."""
        self.push_screen(DetailsScreen(agent, self.clock()))

    def open_deploy(self, preselect: Sequence[str] = ()) -> None:
        """Show the deploy screen with ``preselect`` agents ticked."""
        if self.read_only:
            self.notify("Read-only mode: deploying is disabled", severity="warning")
            return
        from console.screens.deploy import DeployScreen

        self.push_screen(DeployScreen(preselect))

    def open_history(self, key: str) -> None:
        """Show past metrics of agent ``key``."""
        from console.screens.history import HistoryScreen

        if self.fleet.get(key) is not None:
            self.push_screen(HistoryScreen(key))

    async def action_quit(self) -> None:
        """Leave the console; while a rollout runs, only after a warning saying what it
        leaves behind."""
        from console.rollout.staged import Phase
        from console.screens.confirm import ConfirmScreen

        running = self.rollouts.running()
        if not running:
            self.exit()
            return
        lines = []
        for job in running:
            watched = [p.name for p in job.targets.values() if p.phase is Phase.SOAKING]
            lines.append(f"#{job.id} {job.title}: {job.status()}"
                         + (f"; canary {', '.join(watched)} under watch" if watched else ""))

        def answered(yes: bool | None) -> None:
            if yes:
                self.exit()

        self.push_screen(ConfirmScreen(
            "Quit with a rollout running",
            "Still running:\n" + "\n".join(lines) + "\nQuitting stops it where it is: "
            "agents keep what they have, a canary under watch is NOT rolled back and the "
            "agents not reached yet get nothing. Stay to let it finish (R shows it), or "
            "cancel it there first.", yes="Quit anyway"), answered)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    def action_events(self) -> None:
        if not isinstance(self.screen, EventsScreen):
            self.push_screen(EventsScreen())

    def action_move(self, where: str) -> None:
        """vi motion for whatever has focus: a table, a list or a scrolling pane."""
        widget = self.focused
        if widget is None:
            return
        for name in MOTIONS.get(where, ()):
            action = getattr(widget, f"action_{name}", None)
            if callable(action):
                action()
                return

    def action_jump(self) -> None:
        names = [a.name for a in self.fleet.agents()]
        self.push_screen(JumpScreen(names), self.jump_to)

    def _back_to_fleet(self) -> None:
        """Pop every view above the fleet (a jump replaces the view stack, k9s-style); a
        rollout keeps running in the background."""
        while len(self.screen_stack) > 2:
            self.pop_screen()

    def jump_to(self, target: str | None) -> None:
        """Go to the view named by ``target`` (what was typed after ``:``); the view replaces
        the ones opened before it instead of stacking on them."""
        if not target:
            return
        word, _, rest = target.partition(" ")
        word = word.lower()
        if word in ("quit", "q"):
            self.call_later(self.action_quit)  # warns while a rollout runs
            return
        if word == "help":
            self.action_help()
            return
        agent: FleetAgent | None = None
        if word in ("agent", "history"):
            agent, names = self.fleet.find_prefix(rest.strip()) if rest.strip() else (None, [])
            if agent is None:
                why = (f"{rest.strip()!r} matches {', '.join(names)}: type more of the name"
                       if len(names) > 1 else f"No agent named {rest.strip()!r}")
                self.notify(why, severity="warning")
                return
        if word not in ("fleet", "agents", "events", "log", "logs", "deploy", "agent",
                        "history", "rollouts"):
            self.notify(f"Unknown view {target!r}: {VIEWS_HINT}", severity="warning")
            return
        self._back_to_fleet()
        if word in ("events", "log", "logs"):
            self.action_events()
        elif word == "rollouts":
            self.action_rollouts()
        elif word == "deploy":
            self.open_deploy()
        elif agent is not None and word == "agent":
            self.open_agent(agent.key)
        elif agent is not None:
            self.open_history(agent.key)
        else:
            self.notify(f"Unknown view {target!r}: {VIEWS_HINT}", severity="warning")

    # -- command palette: every bound action of the screen and the app -------------------------
    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        seen: set[str] = set()
        for node in (screen, self):
            for binding in getattr(node, "BINDINGS", []):
                b = binding if isinstance(binding, Binding) else Binding(*binding)
                action = b.action.split("(")[0]
                if action in seen or action in ("quit", "dismiss_modal"):
                    continue
                if action in MUTATING_ACTIONS and self.read_only:
                    continue
                if node is screen and screen.check_action(action, ()) is False:
                    continue
                seen.add(action)
                yield SystemCommand(b.description or action, b.tooltip or b.description,
                                    partial(self._run_on, node, b.action))

    async def _run_on(self, node: DOMNode, action: str) -> None:
        await self.run_action(action, node)
