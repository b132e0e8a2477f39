#!/usr/bin/env bash
# Issue 14, item 7: the end-to-end programs (benches/e2e.rs against bench/torch_e2e.py),
# both in one run, interleaved; writes bench/results/e2e.md, e2e.json and e2e.log.
# Run it on an otherwise idle machine. See bench/run_pair.sh for the settings:
#
#   bash bench/run_e2e.sh
#   ROUNDS=1 FILTER=mlp_serve bash bench/run_e2e.sh
#   THREADS=2 NOTE="why this run is special" bash bench/run_e2e.sh
exec bash "$(dirname "$0")/run_pair.sh" e2e
