use std::time::Instant;
fn time<F: FnMut()>(mut f: F) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let mut n = 0;
        while t.elapsed().as_secs_f64() < 0.04 { f(); n += 1; }
        best = best.min(t.elapsed().as_secs_f64() / n as f64);
    }
    best
}
// row-major C[m,n] = A[m,k] B[k,n]; ta/tb: operand stored transposed; pad: extra leading-dim elements
fn run(m: usize, k: usize, n: usize, ta: bool, tb: bool, pad: usize, thr: usize) -> f64 {
    gemm::set_lhs_packing_threshold_multi_thread(thr);
    let a = vec![1.0f32; (m+pad) * (k+pad)];
    let b = vec![1.0f32; (k+pad) * (n+pad)];
    let mut c = vec![0.0f32; m * n];
    let (a_cs, a_rs) = if ta { ((m+pad) as isize, 1) } else { (1, (k+pad) as isize) };
    let (b_cs, b_rs) = if tb { ((k+pad) as isize, 1) } else { (1, (n+pad) as isize) };
    let t = time(|| unsafe {
        gemm::gemm(m, n, k, c.as_mut_ptr(), 1, n as isize, false, a.as_ptr(), a_cs, a_rs, b.as_ptr(), b_cs, b_rs, 0.0f32, 1.0f32, false, false, false, gemm::Parallelism::Rayon(2));
    });
    t
}
fn main() {
    rayon::ThreadPoolBuilder::new().num_threads(2).build_global().unwrap();
    let shapes = [(64, 576, 8192), (32, 144, 4096), (16, 9, 16384), (64, 64, 2048), (512, 1024, 1024), (1024, 1024, 1024), (64, 1024, 1024), (512, 1024, 16), (128, 64, 128), (4096, 256, 4096)];
    for &(m, k, n) in &shapes {
        for ta in [false, true] { for tb in [false, true] {
            let fl = 2.0 * (m * n * k) as f64;
            let mut line = format!("m{m} k{k} n{n} ta{} tb{}:", ta as u8, tb as u8);
            for (pad, thr) in [(0, 16), (16, 16), (0, 1), (0, 4)] {
                let t = run(m, k, n, ta, tb, pad, thr);
                line += &format!("  p{pad}/t{thr} {:.3}ms {:.0}", t * 1e3, fl / t / 1e9);
            }
            println!("{line}");
        }}
    }
}
