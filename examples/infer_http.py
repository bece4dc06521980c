"""The same call over KServe v2 HTTP/REST: the unmodified tritonclient.http client, or (with
--plain) nothing but the standard library and JSON tensors.

    edge-agent serve --state-dir ./state --http 8000 &
    python examples/infer_http.py --url 127.0.0.1:8000 --model mlp --shape 1,64
    python examples/infer_http.py --url 127.0.0.1:8000 --model mlp --shape 1,64 --plain

Needs numpy, and tritonclient[http] unless --plain: ``pip install 'edgeship[all]'``, or
``pip install 'tritonclient[http]'`` beside ``edgeship[agent]``.
"""

from __future__ import annotations

import argparse
import http.client
import json

import numpy as np


def plain(url: str, model: str, version: str, x: np.ndarray) -> tuple[str, dict[str, np.ndarray]]:
    """One inference with http.client and JSON tensors; returns the version and the outputs."""
    host, _, port = url.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("GET", f"/v2/models/{model}" + (f"/versions/{version}" if version else ""))
        meta = json.loads(conn.getresponse().read())
        if "error" in meta:
            raise SystemExit(meta["error"])
        body = {"inputs": [{"name": meta["inputs"][0]["name"], "shape": list(x.shape),
                            "datatype": "FP32", "data": x.ravel().tolist()}]}
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    if "error" in answer:
        raise SystemExit(answer["error"])
    return answer["model_version"], {o["name"]: np.array(o["data"]).reshape(o["shape"])
                                     for o in answer["outputs"]}


def with_tritonclient(url: str, model: str, version: str,
                      x: np.ndarray) -> tuple[str, dict[str, np.ndarray]]:
    """One inference with tritonclient.http (binary tensors)."""
    import tritonclient.http as th

    client = th.InferenceServerClient(url)
    try:
        meta = client.get_model_metadata(model, version)
        inp = th.InferInput(meta["inputs"][0]["name"], list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = client.infer(model, [inp], model_version=version)
        return result.get_response()["model_version"], {
            o["name"]: result.as_numpy(o["name"]) for o in meta["outputs"]}
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="127.0.0.1:8000", help="HOST:PORT of --http")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--version", default="", help="default: the active version")
    parser.add_argument("--shape", default="1,64", help="input shape incl. batch")
    parser.add_argument("--plain", action="store_true",
                        help="standard library and JSON only (no tritonclient)")
    args = parser.parse_args()
    shape = [int(d) for d in args.shape.split(",")]
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    call = plain if args.plain else with_tritonclient
    version, outputs = call(args.url, args.model, args.version, x)
    print(f"{args.model} version {version} answered:")
    for name, array in outputs.items():
        print(f"  {name} {list(array.shape)}: {np.array2string(array.ravel()[:8], precision=4)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
