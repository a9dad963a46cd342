#!/usr/bin/env bash
# Written for, and not yet run on, the lent H200 (the device tool carries the main checkout, so it runs
# once this branch is merged). What it does: on the H200 after ../shared/gpu's three staging
# commands (vLLM 0.26 in /tmp/site), from the repository root. Results go to $OUT (the device tool's).
#   bash loadtest/gpu/h200.sh prepare     1.5B stand-in, its FP8_DYNAMIC copy, both served (0.4 of the GPU
#                                         each), quality agreement and rubric on both
#   bash loadtest/gpu/h200.sh agreement   loadtest vs `vllm bench serve` on the bf16 server
#   bash loadtest/gpu/h200.sh rollout     the seed's comparison (256 in / 128 out at 1 and 4 req/s, 60 s)
#                                         and a classroom, on each variant
set -euo pipefail
# shellcheck source=/dev/null
source /tmp/gpu/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH CLASSROOM_MODEL__DIR=/tmp/models/original
M=/tmp/models
R=${OUT:-/tmp/out}/gpu-h200
mkdir -p "$R"
case ${1:?prepare, agreement or rollout} in
prepare)
  python3 -c "from pathlib import Path; from service.model.prepare import prepare_model, announce; d = Path('$M/original'); print(announce(d, prepare_model(d, '1.5b', 0, standin=True)))"
  PYTHONPATH=/tmp/lc_site:/tmp/site python3 /tmp/gpu/fp8_llmcompressor.py $M/original $M/fp8 2>&1 | tail -2
  cp $M/original/classroom-model.json $M/fp8/
  bash /tmp/gpu/serve.sh bf16 8000 $M/original --enable-prefix-caching --gpu-memory-utilization 0.4
  bash /tmp/gpu/serve.sh fp8 8001 $M/fp8 --enable-prefix-caching --gpu-memory-utilization 0.4
  python3 -m loadtest quality agreement --original http://127.0.0.1:8000/v1 --candidate http://127.0.0.1:8001/v1 \
    --model-dir $M/original --out "$R/quality-agreement-1.5b-fp8.json"
  python3 -m loadtest quality rubric --url http://127.0.0.1:8000/v1 --variant original --model-dir $M/original --out "$R/rubric-original.json" | tail -2
  python3 -m loadtest quality rubric --url http://127.0.0.1:8001/v1 --variant fp8 --model-dir $M/fp8 --out "$R/rubric-fp8.json" | tail -2
  ;;
agreement)
  python3 -m loadtest.agreement --url http://127.0.0.1:8000/v1 --model-dir $M/original --rate 1 --rate 4 \
    --requests "${REQUESTS:-24}" --repeats "${REPEATS:-4}" --bench-cmd "python3 -m vllm.entrypoints.cli.main" \
    --out "$R/agreement-vllm-bench-h200.json" | tail -30
  ;;
rollout)
  for v in original fp8; do
    port=8000; [ $v = fp8 ] && port=8001
    common=(--url "http://127.0.0.1:$port/v1" --model-dir "$M/$v" --variant "$v" --ttft-target-ms 250 --warmup 4)
    python3 -m loadtest run "${common[@]}" --workload synthetic --profile constant --rate 1 --requests 60 \
      --prompt-tokens 256 --output-tokens 128 --out "$R/$v-synthetic-1rps.json" | grep -A3 "^### "
    python3 -m loadtest run "${common[@]}" --workload synthetic --profile constant --rate 4 --requests 240 \
      --prompt-tokens 256 --output-tokens 128 --out "$R/$v-synthetic-4rps.json" | grep -A3 "^### "
    python3 -m loadtest run "${common[@]}" --workload classroom --classes 4 --pupils 30 --passage-tokens 1000 \
      --trickle 10 --profile constant --rate 20 --requests 160 --output-tokens 128 --out "$R/$v-classroom.json" | grep -A3 "^### "
  done
  ;;
esac
