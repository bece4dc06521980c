"""The KServe/Triton protocol extensions a front end lists in its server metadata."""

from __future__ import annotations


def extensions(repository_control: bool, shared_memory: bool,
               binary_tensor_data: bool = False) -> tuple[str, ...]:
    """The KServe/Triton protocol extensions a front end serves, by Triton's names, and only
    those: classification, schedule policy (the request parameters priority and timeout),
    model configuration, sequence (stateful models' sequence batcher), statistics, logging and
    trace always; the model repository when model control is on; system shared memory where
    the system has it; binary tensor data on HTTP. Not parameters or cuda_shared_memory (not
    served)."""
    return ("classification", "sequence", "schedule_policy", "model_configuration",
            "statistics", "logging", "trace") + (
        ("model_repository",) if repository_control else ()) + (
        ("system_shared_memory",) if shared_memory else ()) + (
        ("binary_tensor_data",) if binary_tensor_data else ())
