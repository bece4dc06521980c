"""Interim agent entry point for subprocess tests until `edge-agent serve` has the management
flags: ``python -m tests.agent_management.serve_entry STATE_DIR [PUBKEY]``."""

from __future__ import annotations

import sys
from pathlib import Path

from edge_agent.config import AgentConfig, GrpcConfig
from edge_agent.management.agent_main import run_agent
from edge_agent.management.runtime import ManagementOptions


def main() -> int:
    state_dir = Path(sys.argv[1])
    trust = (Path(sys.argv[2]),) if len(sys.argv) > 2 else ()
    metrics = "--no-metrics" not in sys.argv
    config = AgentConfig(state_dir=state_dir,
                         grpc=GrpcConfig(address="127.0.0.1:0", uds_enabled=False))
    options = ManagementOptions(address="127.0.0.1:0", name="test-agent", trusted_keys=trust,
                                mdns=False, watch_window_s=0.0, metrics=metrics)

    def ready(addresses, _dataplane, runtime) -> None:  # type: ignore[no-untyped-def]
        print(f"edge-agent ready: listening on {', '.join(addresses.targets())}; management "
              f"on {runtime.management_address}; models: -", flush=True)

    return run_agent(config, options, on_ready=ready)


if __name__ == "__main__":
    raise SystemExit(main())
