# Sourced by the bench runners (run_pair.sh, run_gemm_race.sh): the
# dispatch levels this CPU has and how each is capped on PyTorch's side,
# written once.
#
#   LEVELS       every level this CPU has, best first, unless already set
#                (v4 = AVX-512 and v3 = AVX2+FMA on x86-64, neon on aarch64)
#   torch_caps LV  prints the environment assignments that cap PyTorch (ATen,
#                MKL, oneDNN) to level LV, one per line; none for other levels
#   LEVEL_CAPS   the caps of every level in LEVELS, as one line for a report
#   CPU_LINE     the CPU's model name, family, model and core count
if [ -z "${LEVELS:-}" ]; then
    case "$(uname -m)" in
    x86_64) if grep -qw avx512f /proc/cpuinfo; then LEVELS="v4 v3"; else LEVELS="v3"; fi ;;
    aarch64) LEVELS="neon" ;;
    *) LEVELS="scalar" ;;
    esac
fi

torch_caps() {
    case "$1" in
    v4) printf '%s\n' ATEN_CPU_CAPABILITY=avx512 MKL_ENABLE_INSTRUCTIONS=AVX512 ONEDNN_MAX_CPU_ISA=AVX512_CORE ;;
    v3) printf '%s\n' ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ;;
    esac
}

LEVEL_CAPS=""
for _lv in $LEVELS; do
    _caps=$(torch_caps "$_lv" | paste -sd' ' -)
    LEVEL_CAPS="${LEVEL_CAPS:+$LEVEL_CAPS; }$_lv: TENSORSCOPE_SIMD=$_lv${_caps:+, $_caps}"
done
unset _lv _caps

CPU_LINE="$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), family $(sed -n 's/^cpu family\s*: //p' /proc/cpuinfo | head -1), model $(sed -n 's/^model\s*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
