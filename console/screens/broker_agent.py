"""One fleet agent as its MQTT broker tells it: the drill-down when its management API is not
reachable from this console (behind NAT, no management port, another network). Presence,
what it applied per model and why not (with its next retry), the last refused desired state
and its metrics summary, refreshed every second (docs/fleet.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Header, Static

from console.fleet_broker import AgentView
from console.screens.base import ConsoleScreen
from console.widgets.console_footer import ConsoleFooter

REFRESH_S = 1.0


def describe(view: AgentView, now: float) -> str:
    """The agent's broker reports as console markup (every value escaped)."""
    p = view.presence
    status = view.status or {}
    head = (f"[b]{escape(view.agent_id)}[/b]  group {escape(view.group or '-')}  "
            + ("[green]online[/]" if view.online else "[red]offline[/]")
            + f"  revision {view.revision}"
            + (f" (its own {status.get('agent_revision')})" if status.get("agent_revision")
               else ""))
    lines = [head, " ".join(f"{k} {escape(str(p[k]))}" for k in ("name", "arch", "profile",
                                                                  "agent_version") if p.get(k)),
             f"management {escape(view.management) if view.management else 'none'}", "",
             "[b]models[/b]" if view.models else "no model reported yet"]
    for model, entry in sorted(view.models.items()):
        state = str(entry.get("state"))
        color = {"ok": "green", "failed": "red"}.get(state, "yellow")
        line = (f"  {escape(model)}  [{color}]{escape(state)}[/]  version "
                f"{entry.get('version')}  {escape(str(entry.get('ref') or ''))}")
        if entry.get("error"):
            line += f"\n    {escape(str(entry['error']))}"
        retry_at = entry.get("retry_at")
        if isinstance(retry_at, int | float):
            line += (f"\n    attempt {entry.get('attempts')}, tries again in "
                     f"{max(0, round(retry_at - now))} s")
        lines.append(line)
    refused = status.get("refused")
    if isinstance(refused, dict):
        lines += ["", f"[b]refused[/b] a {escape(str(refused.get('scope')))} desired state: "
                      f"{escape(str(refused.get('reason')))}: "
                      f"{escape(str(refused.get('message')))}"]
    metrics = view.metrics
    if isinstance(metrics, dict):
        rows = [f"  {escape(k)}: {v.get('rps')} req/s, {v.get('errors')} errors, p95 "
                f"{v.get('p95_ms')} ms" for k, v in sorted((metrics.get("models") or {}).items())
                if isinstance(v, dict)]
        lines += ["", f"[b]metrics[/b] {max(0, round(now - float(metrics.get('at') or now)))} s "
                      f"ago: rss {metrics.get('rss_mib')} MiB, cpu {metrics.get('cpu')} %", *rows]
    return "\n".join(lines)


class BrokerAgentScreen(ConsoleScreen):
    """What the broker knows of ``agent_id``; ``why`` says why not the direct connection."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back", tooltip="Back to the fleet")]

    def __init__(self, agent_id: str, why: str, *,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.agent_id, self.why, self.clock = agent_id, why, clock

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"through the fleet broker: {escape(self.why)}", id="broker-agent-why")
        with VerticalScroll():
            yield Static("", id="broker-agent-body")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self.sub_title = f"fleet agent {self.agent_id}"
        self.refresh_agent()
        self.set_interval(REFRESH_S, self.refresh_agent)

    def refresh_agent(self) -> None:
        """Re-read the agent's reports from the broker."""
        broker = self.console.broker
        view = broker.agent(self.agent_id) if broker is not None else None
        self.query_one("#broker-agent-body", Static).update(
            describe(view, self.clock()) if view is not None
            else "the broker no longer knows this agent")
