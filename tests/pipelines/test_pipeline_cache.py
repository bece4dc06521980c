"""The response cache in front of a pipeline follows its members (issue 27): after a member is
rolled back from v2 to v1, the pipeline answers with v1 even for inputs first seen under v2."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_agent.config.models import ModelOverrides
from tests.pipelines.conftest import Built, running_agent
from tests.pipelines.test_pipeline_serving import call, images, local


def test_a_rolled_back_member_is_never_answered_for_from_the_cache(built: Built,
                                                                   tmp_path: Path) -> None:
    batch = images(2, seed=27)
    want_v1 = local(built, batch)[1]  # prep, mlp version 1 (ONNX Runtime here), post
    with running_agent(tmp_path / "agent", built.public_key, response_cache_bytes=1 << 20,
                       models={"classify": ModelOverrides(response_cache=True)}) as agent, \
            agent.client() as c:
        for name in ("mlp", "prep", "post", "classify", "mlp2"):
            result = c.deploy(built.bundles[name])
            assert result.ok, (name, result.message)
        on_v2 = call(agent.tcp, batch)[1]  # first seen with mlp version 2 active: cached
        assert not np.allclose(on_v2, want_v1, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(call(agent.uds, batch)[1], on_v2)  # a hit
        hits = agent.dataplane.response_cache.stats("classify", 1).hit.count
        assert hits == 1
        result = c.rollback("mlp", 1)
        assert result.ok and result.active_version == 1, result.message
        np.testing.assert_allclose(call(agent.tcp, batch)[1], want_v1, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(call(agent.uds, batch)[1], want_v1, rtol=1e-5, atol=1e-6)
        # the second call after the rollback is answered from the cache again, with v1's answer
        assert agent.dataplane.response_cache.stats("classify", 1).hit.count == hits + 1
