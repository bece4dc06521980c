"""One KServe datatype table (packager.bundle.datatypes) for the packager, the core and the wire."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.errors import InvalidInputError
from edge_agent.frontends.common.tensors import datatype_of, wire_dtype
from edge_agent.frontends.grpc.generated import model_config_pb2
from edge_agent.frontends.grpc.wire_types import config_data_type
from packager.bundle import datatypes
from packager.bundle.datatypes import NUMPY_DTYPES, numpy_dtype
from packager.bundle.errors import BundleError
from packager.bundle.manifest import DATATYPES
from packager.onnx_tools import _ONNX_TO_KSERVE


def test_the_table_covers_exactly_the_manifest_datatypes() -> None:
    assert tuple(NUMPY_DTYPES) == DATATYPES
    assert set(_ONNX_TO_KSERVE.values()) == set(DATATYPES)
    for name in DATATYPES:
        assert config_data_type(name) != model_config_pb2.DataType.TYPE_INVALID


@pytest.mark.parametrize("name", [n for n in DATATYPES if n != "BYTES"])
def test_core_and_wire_agree_on_every_fixed_size_datatype(name: str) -> None:
    assert numpy_dtype(name) == wire_dtype(name, "x")
    swapped = np.dtype(numpy_dtype(name)).newbyteorder(">")
    assert datatypes.datatype_of(numpy_dtype(name)) == datatype_of(numpy_dtype(name)) == name
    assert datatypes.datatype_of(swapped) == datatype_of(swapped) == name  # any byte order


def test_bytes_is_an_object_array_in_the_core_and_on_the_wire() -> None:
    assert numpy_dtype("BYTES") == wire_dtype("BYTES", "text") == np.dtype(object)
    assert datatype_of(np.array(["a"]).dtype) == "BYTES"


def test_an_unknown_manifest_datatype_is_a_bundle_error() -> None:
    with pytest.raises(BundleError, match="'FLOAT32' is not a KServe v2 datatype"):
        numpy_dtype("FLOAT32")
    assert datatypes.datatype_of(np.dtype(np.complex64)) is None


def test_a_dtype_without_a_datatype_is_refused_on_the_wire_with_the_agents_error() -> None:
    with pytest.raises(InvalidInputError, match="has no KServe v2 datatype"):
        datatype_of(np.dtype(np.complex64))
