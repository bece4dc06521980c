"""A camera-style app: two shared memory regions registered once, then inference in a loop
with no tensor bytes in the gRPC messages (the unmodified tritonclient over the Unix socket).

    edge-agent serve --state-dir ./state --uds /tmp/edge-infer.sock &
    python examples/camera_shared_memory.py --url unix:/tmp/edge-infer.sock --model squeezenet \\
        --shape 1,3,224,224 --frames 10

The app and the agent must run as the same user (the agent refuses another user's objects).
Each "frame" is written into the input region; the agent writes the answer into the output
region, where the app reads it.

Needs numpy and tritonclient[grpc]: ``pip install 'edgeship[all]'``, or
``pip install 'tritonclient[grpc]'`` beside ``edgeship[agent]``.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
import tritonclient.grpc as tc
import tritonclient.utils.shared_memory as shm

BYTES_PER_FLOAT = 4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="unix:/path (or HOST:PORT on this device)")
    parser.add_argument("--model", default="squeezenet")
    parser.add_argument("--shape", default="1,3,224,224", help="input shape incl. batch")
    parser.add_argument("--frames", type=int, default=10)
    args = parser.parse_args()
    client = tc.InferenceServerClient(args.url)
    meta = client.get_model_metadata(args.model)
    shape = [int(d) for d in args.shape.split(",")]
    out_meta = meta.outputs[0]
    out_shape = [shape[0] if d < 0 else int(d) for d in out_meta.shape]
    in_bytes = math.prod(shape) * BYTES_PER_FLOAT
    out_bytes = math.prod(out_shape) * BYTES_PER_FLOAT
    tag = f"camera_{os.getpid()}"
    frames = shm.create_shared_memory_region(f"{tag}_in", f"/{tag}_in", in_bytes)
    answers = shm.create_shared_memory_region(f"{tag}_out", f"/{tag}_out", out_bytes)
    try:
        client.register_system_shared_memory(f"{tag}_in", f"/{tag}_in", in_bytes)
        client.register_system_shared_memory(f"{tag}_out", f"/{tag}_out", out_bytes)
        inp = tc.InferInput(meta.inputs[0].name, shape, "FP32")
        inp.set_shared_memory(f"{tag}_in", in_bytes)
        out = tc.InferRequestedOutput(out_meta.name)
        out.set_shared_memory(f"{tag}_out", out_bytes)
        rng = np.random.default_rng(0)
        t0 = time.perf_counter()
        for i in range(args.frames):
            shm.set_shared_memory_region(frames, [rng.random(shape, dtype=np.float32)])
            result = client.infer(args.model, [inp], outputs=[out])
            answer = shm.get_contents_as_numpy(answers, np.float32, out_shape)
            print(f"frame {i}: {out_meta.name} {out_shape} top class {int(answer.argmax())} "
                  f"({len(result.get_response().raw_output_contents)} tensors in the reply)")
        per_frame = (time.perf_counter() - t0) / max(1, args.frames) * 1e3
        print(f"{args.frames} frames, {per_frame:.1f} ms each")
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(frames)
        shm.destroy_shared_memory_region(answers)
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
