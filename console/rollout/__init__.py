"""Staged rollouts: :mod:`.staged` (upload to a canary, soak, the rest), :mod:`.by_reference`
(every target pulls one registry reference) and :mod:`.session` (the session's running and
recent rollouts, owned by the app)."""
