"""Running the agent as a systemd service: the unit file renderer and installer."""

from edge_agent.service.unit import UNIT_NAME, install_service, render_unit

__all__ = ["UNIT_NAME", "install_service", "render_unit"]
