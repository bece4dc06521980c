"""``edge-agent perf``: a closed-loop load generator speaking the KServe v2 gRPC protocol only
(so it measures this agent or a Triton server alike), with perf_analyzer's flags and report
lines; ``edge-agent tune`` measures its candidates with it."""
