"""The bundle format as a library of its own: what a device needs to read, check and fetch a
``.edgepkg`` bundle, without ONNX, OpenVINO or the converters.

``manifest`` (the manifest and its records), ``format`` (container constants and path rules),
``reader`` (verify, safe extraction), ``writer``, ``signing``, ``profiles`` (device profiles),
``datatypes`` (the one KServe datatype table), ``parity`` (reference checks), ``pipeline``
(pipeline steps and their wiring), ``tensorrt_engine`` (the on-device engine build),
``errors`` (the packager's one error hierarchy, with codes) and ``oci/`` (references, the
registry client, the artifact layout, push and pull). Heavy runtimes are imported only inside
the functions that use them; ``tests/project/test_bundle_library.py`` holds that.
"""
