#!/usr/bin/env bash
# Issue 48 item 6: the Hugging Face examples' models (examples/hf_*/model.rs,
# benches/interop.rs) against PyTorch + transformers (bench/torch_interop.py)
# on the same saved folders, interleaved: a forward at batch 4 x 128 and a
# 64-token greedy generation of each, time and peak memory; writes
# bench/results/interop.{md,json,log}. See bench/run_pair.sh for the settings:
#
#   bash bench/run_interop.sh
#   ROUNDS=3 THREADS=2 bash bench/run_interop.sh
exec bash "$(dirname "$0")/run_pair.sh" interop
