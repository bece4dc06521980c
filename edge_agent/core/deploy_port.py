"""The port the deploy lifecycle (the model manager) reaches the data plane through.

:class:`DeployPort` lists every call the deploy lifecycle makes: what is on disk and what
serves, load / activate / reload / drain and unload a version, the per-model settings, the
memory budget's figures and the response cache's counts. The data plane implements it
(:class:`DeployOperations`, one of its bases); the manager never touches the repository, the
orchestrator or the cache themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from edge_agent.config.models import ModelOverrides
from edge_agent.core.cache import CacheStats, ResponseCache
from edge_agent.core.orchestrator import LoadedHook, Loader, Orchestrator, ResidencyStats
from edge_agent.core.repository import LoadedVersion, ModelRepository, VersionSlot
from edge_agent.core.sequences import Sequences
from edge_agent.errors import AgentError

if TYPE_CHECKING:
    from packager.bundle.manifest import Manifest

VersionCheck = Callable[[LoadedVersion], None]
"""Run on a fresh copy before it is swapped in (a health probe); raises to refuse it."""


class DeployPort(Protocol):
    """What the deploy lifecycle may ask of the data plane. Every method is thread-safe."""

    # ------------------------------------------------------------------ disk and serving
    @property
    def state_dir(self) -> Path:
        """The agent's state directory (the models are under ``models/``)."""
        ...

    @property
    def models_dir(self) -> Path:
        """``<state_dir>/models``: ``NAME/VERSION/`` per extracted bundle."""
        ...

    def scan(self) -> dict[str, list[int]]:
        """Model name -> the version numbers on disk, sorted."""
        ...

    def versions(self, name: str | None = None) -> list[VersionSlot]:
        """Every version being served or tried (of one model, or all), any state."""
        ...

    def model_names(self) -> list[str]: ...

    def resolve(self, name: str, version: int | None = None) -> LoadedVersion:
        """The READY version (the default when ``version`` is None); ModelNotFoundError or
        ModelUnavailableError otherwise."""
        ...

    def default_version(self, name: str) -> int | None:
        """The version requests without one go to (None: none is READY)."""
        ...

    # ------------------------------------------------------------------ lifecycle
    def load_all(self, only: Callable[[str, int], bool] | None = None) -> list[VersionSlot]:
        """Load the versions on disk ``only`` accepts; then the data plane reports ready."""
        ...

    def load_version(self, name: str, version: int) -> VersionSlot:
        """Load (and warm) a version next to those served; raises when it fails."""
        ...

    def reload_version(self, name: str, version: int, *, check: VersionCheck | None = None,
                       drain_timeout_s: float | None = None,
                       overrides: ModelOverrides | None = None) -> bool:
        """Load a fresh copy, ``check`` it, swap it in, drain the old copy; True when the old
        copy drained in time."""
        ...

    def set_default(self, name: str, version: int | None) -> None:
        """Activate ``version`` (None: the highest READY) for requests without a version."""
        ...

    def unload_version(self, name: str, version: int, *,
                       drain_timeout_s: float | None = None) -> bool:
        """Stop routing to the version, drain it, unload it; True when it drained in time."""
        ...

    # ------------------------------------------------------------------ settings
    def overrides_for(self, name: str) -> ModelOverrides: ...

    def set_overrides(self, name: str, overrides: ModelOverrides) -> None:
        """Use ``overrides`` for ``name`` from its next load on."""
        ...

    # ------------------------------------------------------------------ memory budget
    @property
    def budget_bytes(self) -> int | None:
        """The memory budget of the loaded models (None: none)."""
        ...

    def used_bytes(self) -> int: ...

    def set_loader(self, loader: Loader, on_loaded: LoadedHook | None = None,
                   active: Callable[[str], int | None] | None = None,
                   pinned: Callable[[str, int], bool] | None = None) -> None:
        """Who loads a model for a request, which version is active, which are pinned."""
        ...

    def seed(self, name: str, version: int, rss_bytes: int | None) -> None:
        """A memory figure measured earlier (the state store's)."""
        ...

    def hold(self, name: str) -> None:
        """An operator unloaded ``name``: requests do not load it back."""
        ...

    def needed_for(self, manifest: Manifest) -> tuple[int, str]: ...

    def check_deploy(self, name: str, version: int, needed: int | None = None,
                     swap_from: int | None = None) -> None:
        """MemoryBudgetError when the version cannot fit in the budget; changes nothing."""
        ...

    def did_not_fit(self, name: str) -> bool: ...

    def memory_of(self, name: str, version: int) -> tuple[int, str]: ...

    def residency_stats(self, name: str) -> ResidencyStats: ...

    def not_loaded_reason(self, name: str) -> tuple[str, str]: ...

    # ------------------------------------------------------------------ response cache
    def cache_counts(self, name: str, version: int) -> CacheStats | None:
        """Hits and misses of a version that answers from the response cache (None: it
        does not, or the agent has no cache)."""
        ...

    # ------------------------------------------------------------------ sequences
    def version_sequences(self, name: str, version: int) -> tuple[int, int] | None:
        """A loaded stateful version's live sequences and its model's slots
        (``max_candidate_sequences``); None when it is not loaded or not stateful."""
        ...


class DeployOperations:
    """The :class:`DeployPort` half of the data plane, over its repository, orchestrator,
    response cache and sequences (set by the data plane's constructor)."""

    repository: ModelRepository
    orchestrator: Orchestrator
    response_cache: ResponseCache | None
    sequences: Sequences

    @property
    def state_dir(self) -> Path:
        return self.repository.state_dir

    @property
    def models_dir(self) -> Path:
        return self.repository.models_dir

    def scan(self) -> dict[str, list[int]]:
        return self.repository.scan()

    def versions(self, name: str | None = None) -> list[VersionSlot]:
        return self.repository.versions(name)

    def model_names(self) -> list[str]:
        return self.repository.model_names()

    def resolve(self, name: str, version: int | None = None) -> LoadedVersion:
        return self.repository.resolve(name, version)

    def default_version(self, name: str) -> int | None:
        return self.repository.default_version(name)

    def load_version(self, name: str, version: int) -> VersionSlot:
        return self.repository.load_version(name, version)

    def reload_version(self, name: str, version: int, *, check: VersionCheck | None = None,
                       drain_timeout_s: float | None = None,
                       overrides: ModelOverrides | None = None) -> bool:
        return self.repository.reload_version(name, version, check=check,
                                              drain_timeout_s=drain_timeout_s,
                                              overrides=overrides)

    def set_default(self, name: str, version: int | None) -> None:
        self.repository.set_default(name, version)

    def unload_version(self, name: str, version: int, *,
                       drain_timeout_s: float | None = None) -> bool:
        return self.repository.unload_version(name, version, drain_timeout_s=drain_timeout_s)

    def overrides_for(self, name: str) -> ModelOverrides:
        return self.repository.overrides_for(name)

    def set_overrides(self, name: str, overrides: ModelOverrides) -> None:
        self.repository.set_overrides(name, overrides)

    @property
    def budget_bytes(self) -> int | None:
        return self.orchestrator.budget_bytes

    def used_bytes(self) -> int:
        return self.orchestrator.used_bytes()

    def set_loader(self, loader: Loader, on_loaded: LoadedHook | None = None,
                   active: Callable[[str], int | None] | None = None,
                   pinned: Callable[[str, int], bool] | None = None) -> None:
        self.orchestrator.set_loader(loader, on_loaded, active, pinned)

    def seed(self, name: str, version: int, rss_bytes: int | None) -> None:
        self.orchestrator.seed(name, version, rss_bytes)

    def hold(self, name: str) -> None:
        self.orchestrator.hold(name)

    def needed_for(self, manifest: Manifest) -> tuple[int, str]:
        return self.orchestrator.needed_for(manifest)

    def check_deploy(self, name: str, version: int, needed: int | None = None,
                     swap_from: int | None = None) -> None:
        self.orchestrator.check_deploy(name, version, needed, swap_from)

    def did_not_fit(self, name: str) -> bool:
        return self.orchestrator.did_not_fit(name)

    def memory_of(self, name: str, version: int) -> tuple[int, str]:
        return self.orchestrator.memory_of(name, version)

    def residency_stats(self, name: str) -> ResidencyStats:
        return self.orchestrator.stats(name)

    def not_loaded_reason(self, name: str) -> tuple[str, str]:
        return self.orchestrator.not_loaded_reason(name)

    def cache_counts(self, name: str, version: int) -> CacheStats | None:
        cache = self.response_cache
        if cache is None:
            return None
        try:
            cached = self.repository.lookup(name, version).loaded
        except AgentError:
            return None
        if cached is None or not cached.response_cache:
            return None
        return cache.stats(name, version)

    def version_sequences(self, name: str, version: int) -> tuple[int, int] | None:
        try:
            loaded = self.repository.lookup(name, version).loaded
        except AgentError:
            return None
        if loaded is None or loaded.manifest.sequence is None:
            return None
        return (self.sequences.live_on(name, version),
                loaded.manifest.sequence.max_candidate_sequences)
