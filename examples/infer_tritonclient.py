"""The same call with the unmodified Triton client (tritonclient[grpc]) over TCP.

    edge-agent serve --state-dir ./state --grpc 127.0.0.1:8001 &
    python examples/infer_tritonclient.py --url 127.0.0.1:8001 --model mlp --shape 1,64

Needs numpy and tritonclient[grpc]: ``pip install 'edgeship[all]'``, or
``pip install 'tritonclient[grpc]'`` beside ``edgeship[agent]``.
"""

from __future__ import annotations

import argparse

import numpy as np
import tritonclient.grpc as tc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="127.0.0.1:8001", help="HOST:PORT (or unix:/path)")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--version", default="", help="default: the active version")
    parser.add_argument("--shape", default="1,64", help="input shape incl. batch")
    args = parser.parse_args()
    client = tc.InferenceServerClient(args.url)
    try:
        if not client.is_model_ready(args.model, args.version):
            print(f"model {args.model!r} is not ready on {args.url}")
            return 1
        meta = client.get_model_metadata(args.model, args.version)
        shape = [int(d) for d in args.shape.split(",")]
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        inp = tc.InferInput(meta.inputs[0].name, shape, "FP32")
        inp.set_data_from_numpy(x)
        result = client.infer(args.model, [inp], model_version=args.version)
        print(f"{args.model} version {result.get_response().model_version} answered:")
        for out in meta.outputs:
            array = result.as_numpy(out.name)
            print(f"  {out.name} {list(array.shape)}: "
                  f"{np.array2string(array.ravel()[:8], precision=4)}")
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
