#!/usr/bin/env bash
# Issue 29: Triton 2.51, the agent over its Unix socket, the naive server and the core-queue
# probes (benchmarks/probe_core_loop.py, batched and not) up at once, driven by the anchor's
# client through benchmarks.anchor_cpu at 16 and 1 in flight: infer/s, server CPU per request
# and p50, interleaved rounds (ratios in one run). Needs what ../shared/anchor/versus.sh needs.
#   benchmarks/anchor_probes.sh                       # the agent with its defaults
#   AGENT_CONFIG=agent.toml benchmarks/anchor_probes.sh   # e.g. [grpc] infer_lane = "threads"
#   ROUNDS=3 SECS=6 (the defaults)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd); cd "$ROOT"
HERE=$ROOT/../shared/anchor; PY=${PY:-/tmp/bench/bin/python}; AV=${AGENT_VENV:-$ROOT/.venv}
W=$(mktemp -d /tmp/fourth.XXXX); PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done; kill -TERM "$(cat /tmp/logs/triton.pid 2>/dev/null)" 2>/dev/null' EXIT
for m in mlp squeezenet; do "$AV/bin/edge-pack" build /tmp/models/$m.onnx --name $m --version 1 --profile x86_64-cpu-onnxruntime --out "$W/b" >/dev/null 2>&1 || exit 1; done
for f in "$W"/b/*.edgepkg; do "$AV/bin/edge-agent" add-bundle --state-dir "$W/st" --allow-unsigned "$f" >/dev/null || exit 1; done
ready() { "$PY" -c "import tritonclient.grpc as g,sys;c=g.InferenceServerClient('$1');sys.exit(0 if c.is_model_ready('mlp') else 1)" 2>/dev/null; }
"$AV/bin/edge-agent" serve --state-dir "$W/st" --grpc 127.0.0.1:8201 --uds "$W/i.sock" --no-mdns ${AGENT_CONFIG:+--config $AGENT_CONFIG} >"$W/agent.log" 2>&1 & APID=$!; PIDS+=($APID)
until ready 127.0.0.1:8201; do sleep 0.1; done
"$HERE/start_triton.sh" >/dev/null 2>&1; until ready 127.0.0.1:8001; do sleep 0.1; done; TPID=$(cat /tmp/logs/triton.pid)
"$PY" "$HERE/naive_grpc_server.py" --port 9001 --model mlp=/tmp/models/mlp.onnx >/dev/null 2>&1 & NPID=$!; PIDS+=($NPID)
PYTHONPATH=. $AV/bin/python -m benchmarks.probe_core_loop --model /tmp/models/mlp.onnx --listen 127.0.0.1:9101 >/dev/null 2>&1 & PPID1=$!; PIDS+=($PPID1)
PYTHONPATH=. $AV/bin/python -m benchmarks.probe_core_loop --model /tmp/models/mlp.onnx --listen 127.0.0.1:9102 --no-batch >/dev/null 2>&1 & PPID2=$!; PIDS+=($PPID2)
until ready 127.0.0.1:9001; do sleep 0.2; done; sleep 1
for c in 16 1; do
  PYTHONPATH=. $AV/bin/python -m benchmarks.anchor_cpu -c $c --rounds ${ROUNDS:-3} --seconds ${SECS:-6} \
    --server triton=127.0.0.1:8001:$TPID --server agent-uds=unix://$W/i.sock:$APID \
    --server naive=127.0.0.1:9001:$NPID --server probe=127.0.0.1:9101:$PPID1 --server probe-1=127.0.0.1:9102:$PPID2 ${EXTRA:-}
done
