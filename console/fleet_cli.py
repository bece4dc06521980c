"""``edge-console fleet deploy|status|rollback|agents``: a fleet through an MQTT broker
(docs/fleet.md), beside the LAN commands (mDNS and direct management stay as they are)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from console.errors import ConsoleError
from edge_agent.fleet import protocol as p

EXAMPLES = """examples:
  edge-console fleet deploy --broker mqtts://broker:8883 --ca broker-ca.pem --group cams \\
      --key edge-pack.key oci://registry:5000/edge/mlp@sha256:... \\
      --waves 1,5%,25%,100% --soak 60 --max-failed 2%
  edge-console fleet status --broker mqtts://broker:8883 --group cams
  edge-console fleet agents --broker mqtts://broker:8883 --group cams --json
  edge-console fleet view --broker mqtts://broker:8883 --group cams
  edge-console fleet rollback --broker mqtts://broker:8883 --group cams --key edge-pack.key"""


def add_parser(sub: Any) -> None:
    """Register ``fleet`` and its four subcommands."""
    raw = argparse.RawDescriptionHelpFormatter
    fleet = sub.add_parser("fleet", help="fleets through an MQTT broker: deploy in waves, "
                           "status, rollback, agents", description=__doc__, epilog=EXAMPLES,
                           formatter_class=raw)
    actions = fleet.add_subparsers(dest="fleet_command", metavar="ACTION", required=True)
    for name, text in (("deploy", "publish a signed desired state wave by wave"),
                       ("view", "a live terminal view of the group (counts, filter)"),
                       ("status", "the group's desired state and its agents' counts"),
                       ("rollback", "publish the previous desired state to every agent"),
                       ("agents", "every agent of the group, its state and versions")):
        a = actions.add_parser(name, help=text, formatter_class=raw, epilog=EXAMPLES)
        a.add_argument("--broker", required=True, metavar="URL",
                       help="mqtts://HOST[:PORT] (mqtt:// only to a loopback host unless "
                            "--allow-plaintext)")
        a.add_argument("--group", required=True, help="the fleet group")
        a.add_argument("--ca", type=Path, metavar="PEM", help="trust this CA for the broker")
        a.add_argument("--cert", type=Path, metavar="PEM", help="client certificate")
        a.add_argument("--cert-key", type=Path, metavar="PEM", help="client certificate key")
        a.add_argument("--username", help="broker username (password: $EDGE_MQTT_PASSWORD)")
        a.add_argument("--allow-plaintext", action="store_true",
                       help="allow mqtt:// to another host (trusted networks only)")
        a.add_argument("--json", action="store_true", help="print JSON")
        if name in ("deploy", "rollback"):
            a.add_argument("--key", type=Path, required=True, metavar="PEM",
                           help="the release key (edge-pack keygen) that signs the state")
        if name == "deploy":
            a.add_argument("references", nargs="+", metavar="OCI_REF",
                           help="oci://HOST/REPO@sha256:... (pinned by digest); the model "
                                "name is the repository's last part unless NAME=REF")
            a.add_argument("--waves", default="1,5%,25%,100%",
                           help="counts or percentages, the last 100%% (default "
                                "1,5%%,25%%,100%%)")
            a.add_argument("--soak", type=float, default=60.0, metavar="S",
                           help="hold each wave this long (default 60)")
            a.add_argument("--max-failed", default="2%", metavar="N|P%",
                           help="failures per wave that halt the rollout (default 2%%)")
            a.add_argument("--timeout", type=float, default=300.0, metavar="S",
                           help="how long a wave's agents may take to report (default 300)")


def _broker(args: argparse.Namespace) -> Any:
    import os

    from console.fleet_broker import FleetBroker
    from edge_agent.fleet.link import BrokerCredentials

    return FleetBroker(args.broker, BrokerCredentials(
        args.ca, args.cert, args.cert_key, args.username,
        os.environ.get("EDGE_MQTT_PASSWORD") if args.username else None),
        allow_plaintext=args.allow_plaintext)


def _key(path: Path) -> Any:
    from packager.bundle.errors import KeyFileError
    from packager.bundle.signing import load_private_key

    try:
        return load_private_key(path)
    except KeyFileError as exc:
        raise ConsoleError(str(exc)) from None


def parse_references(items: list[str]) -> dict[str, p.ModelTarget]:
    """``[NAME=]oci://HOST/REPO@sha256:...`` as the desired state's models."""
    out: dict[str, p.ModelTarget] = {}
    for item in items:
        name, sep, ref = item.partition("=")
        if not sep or name.startswith("oci:"):
            name, ref = "", item
        if not ref.startswith("oci://") or "@sha256:" not in ref:
            raise ConsoleError(f"{ref!r} is not pinned by digest: give oci://HOST/REPO@sha256:"
                               "... (edge-pack push prints it)")
        name = name or ref.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
        try:
            p.check_name("model", name)
        except ValueError as exc:
            raise ConsoleError(f"{exc}; name it: NAME=oci://...") from None
        out[name] = p.ModelTarget(ref)
    return out


def cmd_fleet(args: argparse.Namespace) -> int:
    """Run one ``fleet`` action."""
    from packager.extras import refusal

    if refused := refusal("fleet", "edge-console fleet"):
        raise ConsoleError(refused)
    try:
        p.check_name("group", args.group)
    except ValueError as exc:
        raise ConsoleError(str(exc)) from None
    with _broker(args) as broker:
        return int(_ACTIONS[args.fleet_command](args, broker))


def _deploy(args: argparse.Namespace, broker: Any) -> int:
    from console.fleet_rollout import FailureBudget, Rollout, parse_waves

    models = parse_references(args.references)
    waves, budget = parse_waves(args.waves), FailureBudget.parse(args.max_failed)
    key = _key(args.key)
    broker.settle()
    say = (lambda _: None) if args.json else print
    result = Rollout(broker, args.group, key, say=say,
                     converge_timeout_s=args.timeout).run(models, waves, args.soak, budget)
    if args.json:
        print(json.dumps({"halted": result.halted, "restored_revision":
                          result.restored_revision, "restored": result.restored,
                          "not_restored": result.not_restored,
                          "waves": [w.__dict__ for w in result.waves]}, indent=2))
    elif result.halted:
        print(f"halted; previous state published as revision {result.restored_revision}: "
              f"{len(result.restored)} agent(s) restored"
              + (f", not restored: {result.not_restored}" if result.not_restored else ""))
    else:
        print(f"rolled out to group {args.group} in {len(result.waves)} wave(s)")
    return 1 if result.halted else 0


def _rollback(args: argparse.Namespace, broker: Any) -> int:
    from console.fleet_rollout import rollback

    desired = rollback(broker, args.group, _key(args.key))
    print(json.dumps(desired.to_json(), indent=2) if args.json else
          f"group {args.group}: revision {desired.revision} restores "
          + ", ".join(f"{m} {t.ref}" for m, t in desired.models.items()))
    return 0


def _agents(args: argparse.Namespace, broker: Any) -> int:
    broker.settle()
    rows = [{"agent": a.agent_id, "online": a.online, "revision": a.revision,
             "models": (a.status or {}).get("models") or {},
             "refused": (a.status or {}).get("refused")} for a in broker.group_agents(args.group)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        models = ", ".join(f"{m}:{s.get('version')} {s.get('state')}"
                           for m, s in r["models"].items())
        print(f"{r['agent']:<24} {'online' if r['online'] else 'OFFLINE':<8} "
              f"rev {r['revision']:<5} {models or '-'}"
              + (f"  refused: {r['refused']['reason']}" if r["refused"] else ""))
    return 0


def _status(args: argparse.Namespace, broker: Any) -> int:
    current = broker.current(args.group)
    agents = broker.group_agents(args.group)
    from console.fleet_broker import counts

    states, versions = counts(agents)
    doc = {"group": args.group, "desired": current.to_json() if current else None,
           "agents": len(agents), "states": dict(states), "versions": dict(versions)}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"group {args.group}: " + (f"revision {current.revision}, wave "
          f"{current.percent:g}% ({current.note})" if current else "no desired state"))
    print(f"agents: {len(agents)}  " + "  ".join(f"{k} {v}" for k, v in sorted(states.items())))
    for v, n in sorted(versions.items()):
        print(f"  {v}: {n}")
    return 0


def _view(args: argparse.Namespace, broker: Any) -> int:
    from console.fleet_view import BrokerFleetApp

    BrokerFleetApp(broker, args.group).run()
    return 0


_ACTIONS = {"deploy": _deploy, "rollback": _rollback, "agents": _agents, "status": _status,
            "view": _view}
