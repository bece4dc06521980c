"""Image bytes in, labels out: a pipeline of two Python steps around the sample MLP.

    python examples/pipeline/run.py [--workdir DIR]

1. generate the sample MLP and a signing key; 2. ``edge-pack build`` the MLP (ONNX) and the
specs prep.toml, post.toml (Python models) and classify.toml (the pipeline), all signed;
3. start a local agent (a subprocess, loopback only, mDNS off) trusting the key; 4. deploy the
members, then the pipeline; 5. send compressed images (imaging.py's EPI format) to
``classify`` with tritonclient and compare the labels with the same steps computed here.
Numpy only, no downloads. Exits 0 when every answer matches; the agent is always stopped.

Needs ``pip install 'edgeship[all]'`` (packager, agent and tritonclient).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT)]

import imaging  # noqa: E402  (this directory)
import post  # noqa: E402
import prep  # noqa: E402

PROFILE = "x86_64-cpu-onnxruntime"


def build(workdir: Path) -> tuple[Path, Path, dict[str, Path]]:
    from packager.build import build_bundles
    from packager.bundle.signing import generate_keypair
    from packager.samples import make_mlp

    private, public = generate_keypair(workdir / "keys")
    mlp = make_mlp(workdir / "mlp.onnx", seed=3)
    out = workdir / "dist"
    bundles = {"mlp": build_bundles(mlp, name="mlp", version=1, profiles=[PROFILE],
                                    out_dir=out, key_path=private, dynamic_batch=True)[0]}
    for name in ("prep", "post", "classify"):
        bundles[name] = build_bundles(HERE / f"{name}.toml", name=name, version=1,
                                      profiles=[PROFILE], out_dir=out, key_path=private)[0]
    for path in bundles.values():
        print(f"  built {path.name}")
    return mlp, public, bundles


def local(mlp: Path, images: list[bytes]) -> list[list[bytes]]:
    import onnxruntime as ort

    feats = np.stack([prep.features(b) for b in images])
    probs = ort.InferenceSession(str(mlp), providers=["CPUExecutionProvider"]).run(
        None, {"input": feats})[0]
    return post.topk({"PROBS": probs}, None)["LABELS"].tolist()  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    from examples.demo import LocalAgent, fresh_workdir

    workdir = fresh_workdir(__doc__ or "", "pipeline-out", argv)

    print("1-2. build the bundles")
    mlp, public, bundles = build(workdir)
    print("3. start a local agent")
    agent = LocalAgent(workdir / "agent-state", public)
    agent.start()
    try:
        import tritonclient.grpc as grpcclient

        from edge_agent.client.agent_client import AgentClient, PinnedTls
        from edge_agent.management.tls import fingerprint_of

        print("4. deploy mlp, prep, post, then classify")
        pin = PinnedTls(fingerprint_of(agent.state_dir))
        with AgentClient(agent.management, token=agent.token, tls=pin) as client:
            for name in ("mlp", "prep", "post", "classify"):
                result = client.deploy(bundles[name])
                print(f"  {name}: {'ok' if result.ok else 'FAILED'} {result.message}")
                if not result.ok:
                    return 1
        print("5. classify compressed images")
        yy, xx = np.mgrid[0:480, 0:640]
        images = [imaging.encode(((yy * (i + 1) + xx * (3 - i)) // 8 % 256).astype(np.uint8))
                  for i in range(4)]  # 640x480 grey images, smooth enough to compress
        data = np.array([[b] for b in images], dtype=object)
        with grpcclient.InferenceServerClient(agent.grpc) as triton:
            inp = grpcclient.InferInput("IMAGE", list(data.shape), "BYTES")
            inp.set_data_from_numpy(data)
            result = triton.infer("classify", [inp])
        labels, scores = result.as_numpy("LABELS"), result.as_numpy("SCORES")
        for i, (row, score) in enumerate(zip(labels, scores, strict=True)):
            top = ", ".join(f"{lbl.decode()} {s:.3f}" for lbl, s in zip(row, score, strict=True))
            print(f"  image {i} ({len(images[i])} bytes): {top}")
        same = labels.tolist() == local(mlp, images)
        print(f"  the same labels as the steps computed here: {'yes' if same else 'NO'}")
        return 0 if same else 1
    finally:
        agent.stop()


if __name__ == "__main__":
    sys.exit(main())
