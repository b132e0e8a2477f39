#!/usr/bin/env bash
# Issue 14, item 7: the op matrix (benches/ops.rs against bench/torch_ops.py),
# both in one run, interleaved; writes bench/results/ops.md, ops.json and ops.log.
# Run it on an otherwise idle machine. See bench/run_pair.sh for the settings:
#
#   bash bench/run_ops.sh
#   ROUNDS=1 FILTER=tanh,/medium bash bench/run_ops.sh
#   THREADS=2 NOTE="why this run is special" bash bench/run_ops.sh
exec bash "$(dirname "$0")/run_pair.sh" ops
