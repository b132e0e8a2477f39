//! The CPU dispatch seen through the op layer: which vector kernel a
//! `Tensor` op reaches at the level this process runs at. (Here, not in
//! `backend/cpu/vmath/tests.rs`: the backend's own tests see no `Tensor`.)

use crate::backend::cpu::simd::Level;
use crate::backend::cpu::vmath::float32 as k32;
use crate::backend::cpu::vmath::tests::gelu_table;
use crate::device::Device;
use crate::tensor::Tensor;

/// `Tensor::gelu` runs the table for a contiguous f32 tensor when the
/// process runs at AVX-512, and the vector kernel for a strided one.
#[test]
fn tensor_gelu_takes_the_table_at_avx512_only_for_dense_f32() {
    let xs: Vec<f32> = (0..512 * 130)
        .map(|i| ((i * 7919) % 2003) as f32 / 128.0 - 9.0)
        .collect();
    let x = Tensor::from_slice(&xs, &[512, 130], Device::Cpu).unwrap();
    let got = x.gelu().unwrap().to_vec::<f32>().unwrap();
    if crate::backend::cpu::simd::level() == Level::V4 {
        assert_eq!(got, gelu_table(&xs));
    } else {
        println!(
            "the process runs at {}: no table",
            crate::backend::cpu::simd::level().name()
        );
    }
    // Through the transpose: strided runs, the vector kernel at every level.
    let t = x.t().unwrap().gelu().unwrap().t().unwrap();
    let got = t.contiguous().unwrap().to_vec::<f32>().unwrap();
    let fma = crate::backend::cpu::simd::level() != Level::Scalar
        || crate::backend::cpu::simd::BASELINE_FMA;
    for (&x, &y) in xs.iter().zip(&got) {
        let want = if fma {
            k32::gelu::<true>(x)
        } else {
            k32::gelu::<false>(x)
        };
        assert!(
            y.to_bits() == want.to_bits(),
            "gelu({x:e}) = {y:e}, want {want:e}"
        );
    }
}
