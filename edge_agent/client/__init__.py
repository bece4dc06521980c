"""The management client: what the console and ``perf`` import to talk to an agent.

:mod:`.agent_client` (``AgentClient``, its errors and TLS options), :mod:`.types` (the plain
values it returns) and :mod:`.convert` (edge.agent.v1 messages -> those values). Importing it
loads no manager, metrics store or state store.
"""
