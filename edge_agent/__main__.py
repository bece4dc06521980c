"""``python -m edge_agent`` runs the edge-agent command line."""

from edge_agent.cli import main

raise SystemExit(main())
