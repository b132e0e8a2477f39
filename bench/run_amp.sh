#!/usr/bin/env bash
# Issue 49 item 8: the proof models' training steps (examples/gpt.rs's and
# examples/cnn.rs's, benches/e2e.rs against bench/torch_e2e.py) in f32 and
# with the forward under bf16 autocast on both sides, interleaved; time, and
# the peak of a fresh process over 3 steps; writes
# bench/results/amp.{md,json,log}. See bench/run_pair.sh for the settings:
#
#   bash bench/run_amp.sh
#   ROUNDS=3 THREADS=2 bash bench/run_amp.sh
exec bash "$(dirname "$0")/run_pair.sh" amp
