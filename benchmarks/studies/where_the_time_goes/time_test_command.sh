#!/usr/bin/env bash
# Wall time of README.md's test command (the fast suite) in a fresh clone and a fresh virtual
# environment, on an idle machine or at load 5 (four busy processes beside the test run).
# Usage, from a checkout: bash benchmarks/studies/where_the_time_goes/time_test_command.sh idle|load5
# Run it on an otherwise quiet machine: the load it states is the load it adds.
set -euo pipefail
mode=${1:-idle}
case "$mode" in idle|load5) ;; *) echo "usage: $0 idle|load5" >&2; exit 2 ;; esac
repo=$(cd "$(dirname "$0")/../../.." && pwd)
work=$(mktemp -d)
git clone -q "$repo" "$work/avalanche-sdr" && cd "$work/avalanche-sdr"
python -m venv "$work/venv" && . "$work/venv/bin/activate"
pip install -q torch==2.14.1 torchvision==0.29.1 && pip install -q -e ".[test,ray]"
pids=()
if [ "$mode" = load5 ]; then
  for _ in 1 2 3 4; do python -c "while True: pass" & pids+=($!); done
fi
uptime
/usr/bin/time -f "README test command: %e s wall" python -m pytest -q -m "not slow" --durations=25 || status=$?
uptime
for p in "${pids[@]}"; do kill "$p"; done
echo "torch threads: $(python -c 'import torch; print(torch.get_num_threads())') (the suite sets 1 per library)"
exit "${status:-0}"
