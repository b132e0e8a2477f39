#!/usr/bin/env bash
# Alternating old (93c5358) / new processes, the layer_norm rows, at one SIMD
# cap ($1: v4 or v3), with PyTorch capped alike every fourth round.
cd /work/main
lvl=$1; aten=$([ "$lvl" = v3 ] && echo avx2 || echo avx512); mkl=$([ "$lvl" = v3 ] && echo AVX2 || echo AVX512)
echo "== $(date -u +%FT%TZ) TENSORSCOPE_SIMD=$lvl ATEN_CPU_CAPABILITY=$aten MKL_ENABLE_INSTRUCTIONS=$mkl; CPU: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), family $(sed -n 's/^cpu family\s*: //p' /proc/cpuinfo | head -1) model $(sed -n 's/^model\s*: //p' /proc/cpuinfo | head -1), $(nproc) cores; load $(cat /proc/loadavg)"
for r in $(seq 1 10); do
  if [ $((r%2)) = 0 ]; then o="new2 old"; else o="old new2"; fi
  for s in $o; do TENSORSCOPE_SIMD=$lvl /tmp/lnbench/$s --filter layer_norm 2>&1 | grep "^layer_norm" | sed "s/^/$s r$r /"; done
  if [ $((r%4)) = 0 ]; then ATEN_CPU_CAPABILITY=$aten MKL_ENABLE_INSTRUCTIONS=$mkl bench/.venv/bin/python bench/torch_ops.py --threads 2 --filter layer_norm 2>&1 | grep "^layer_norm" | sed "s/^/torch r$r /"; fi
done
echo "== load after $(cat /proc/loadavg)"
