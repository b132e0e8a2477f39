#!/usr/bin/env bash
# Runs the MLP benchmark (issues 4 and 5) for tensorscope and PyTorch CPU in
# one go and writes bench/results/mlp.md with the raw output of both.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bench mlp
cargo build --release --manifest-path bench/peers/Cargo.toml --target-dir bench/target
bin=$(ls -t target/release/deps/mlp-* | grep -v '\.d$' | head -1)
out=bench/results/mlp.md
{
  echo "# MLP benchmark (issues 4 and 5)"
  echo
  echo "$(date -Iseconds), \`bash bench/run_mlp.sh\`, commit \`$(git rev-parse --short=12 HEAD)\`."
  echo "Machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "## tensorscope"; echo '```'; "$bin"; echo '```'
  echo "## PyTorch"; echo '```'; python3 bench/torch_mlp.py; echo '```'
  echo "## candle-core (inference only)"; echo '```'
  bench/target/release/tensorscope-bench-peers --filter mlp_inference 2>&1
  echo '```'
} > "$out"
cat "$out"
