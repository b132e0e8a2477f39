//! The CPU kernels' fast paths give the element-wise definition's results:
//! the one-pass dense loops (out of place, in place, and both inputs one
//! tensor), the blocked transposing copy (every element size, partial
//! blocks, offset views, parallel bands), and the parallel loops of one
//! thread team called from several user threads at once.
//!
//! Sizes above 2 x 65536 elements take the parallel plan; the small ones
//! the caller's thread.

use tensorscope::{memory, DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;

/// Every test of this file holds it: one test counts the CPU allocator's
/// allocations, which are process-wide.
fn lock() -> crate::common::Guard {
    crate::common::serial()
}

/// `rows x cols` values with a fraction, both signs, and some exact
/// integers and zeros (for floor/sign).
fn values(rows: usize, cols: usize) -> Vec<f64> {
    (0..rows * cols)
        .map(|i| {
            let v = ((i * 7919) % 2003) as f64 / 16.0 - 62.5;
            if i % 97 == 0 {
                0.0
            } else {
                v
            }
        })
        .collect()
}

fn tensor(v: &[f64], shape: &[usize], dt: DType) -> Tensor {
    Tensor::from_slice(v, shape, CPU)
        .unwrap()
        .to_dtype(dt)
        .unwrap()
}

fn vec64(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// floor, sign, square and neg, out of place and in place, at a serial and
/// a parallel size: the same values as the definition, in every float
/// dtype (the values are exact in f16 and bf16 after rounding the input).
#[test]
fn dense_unary_ops_in_and_out_of_place_match_the_definition() {
    let _l = lock();
    for (rows, cols) in [(7, 9), (300, 700)] {
        let v = values(rows, cols);
        for dt in FLOATS {
            let x = tensor(&v, &[rows, cols], dt);
            let xs = vec64(&x);
            type Op = (
                &'static str,
                fn(&Tensor) -> tensorscope::Result<Tensor>,
                fn(f64) -> f64,
            );
            let ops: [Op; 4] = [
                ("floor", Tensor::floor, f64::floor),
                ("sign", Tensor::sign, |x| {
                    if x > 0.0 {
                        1.0
                    } else if x < 0.0 {
                        -1.0
                    } else {
                        0.0
                    }
                }),
                ("square", Tensor::square, |x| x * x),
                ("neg", Tensor::neg, |x| -x),
            ];
            for (name, op, def) in ops {
                let want: Vec<f64> = vec64(&tensor(
                    &xs.iter().map(|&x| def(x)).collect::<Vec<_>>(),
                    &[rows, cols],
                    dt,
                ));
                assert_eq!(vec64(&op(&x).unwrap()), want, "{name} {dt:?} {rows}x{cols}");
            }
            let mut y = x.deep_clone().unwrap();
            y.floor_().unwrap();
            assert_eq!(vec64(&y), vec64(&x.floor().unwrap()), "floor_ {dt:?}");
            let mut y = x.deep_clone().unwrap();
            y.relu_().unwrap();
            assert_eq!(vec64(&y), vec64(&x.relu().unwrap()), "relu_ {dt:?}");
            let mut y = x.deep_clone().unwrap();
            y.exp_().unwrap();
            assert_eq!(vec64(&y), vec64(&x.exp().unwrap()), "exp_ {dt:?}");
        }
    }
}

/// `a += b`, `a *= a` through an alias (output and both inputs one
/// storage), and `c = a + b`: equal to the out-of-place results.
#[test]
fn dense_binary_ops_in_place_and_self_aliased_match_out_of_place() {
    let _l = lock();
    for (rows, cols) in [(5, 11), (400, 600)] {
        let v = values(rows, cols);
        let w: Vec<f64> = v.iter().map(|x| x * 0.5 + 1.0).collect();
        for dt in [DType::F32, DType::F64, DType::I32, DType::I64] {
            let a = tensor(&v, &[rows, cols], dt);
            let b = tensor(&w, &[rows, cols], dt);
            let sum = a.add(&b).unwrap();
            let mut a1 = a.deep_clone().unwrap();
            a1.add_(&b).unwrap();
            assert_eq!(vec64(&a1), vec64(&sum), "add_ {dt:?}");
            let sq = a.mul(&a).unwrap();
            let mut a2 = a.deep_clone().unwrap();
            let same = a2.alias();
            a2.mul_(&same).unwrap();
            assert_eq!(vec64(&a2), vec64(&sq), "mul_ by itself {dt:?}");
            let want: Vec<f64> = vec64(&a)
                .iter()
                .zip(vec64(&b))
                .map(|(x, y)| x + y)
                .collect();
            assert_eq!(vec64(&sum), want, "add {dt:?}");
        }
    }
}

/// `t().contiguous()` (and `transpose` of a narrowed, offset view) equals
/// the element-wise transpose for every element size (u8, bool, f16, bf16,
/// i32, f32, f64, i64), full and partial 16 x 16 blocks, serial and
/// parallel.
#[test]
fn transposing_copies_match_the_definition_for_every_element_size() {
    let _l = lock();
    let dts = [
        DType::U8,
        DType::Bool,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::F32,
        DType::F64,
        DType::I64,
    ];
    for (rows, cols) in [(16, 16), (37, 53), (100, 33), (513, 300)] {
        let v: Vec<f64> = (0..rows * cols).map(|i| (i % 251) as f64).collect();
        for dt in dts {
            let x = tensor(&v, &[rows, cols], dt);
            let xs = vec64(&x);
            let t = x.transpose(0, 1).unwrap().contiguous().unwrap();
            assert_eq!(t.shape(), &[cols, rows]);
            let got = vec64(&t);
            for r in 0..cols {
                for c in 0..rows {
                    assert_eq!(
                        got[r * rows + c],
                        xs[c * cols + r],
                        "{dt:?} {rows}x{cols} at {r},{c}"
                    );
                }
            }
            // An offset view: rows 3.. of x, transposed.
            let n = x.narrow(0, 3, rows - 3).unwrap();
            let tn = n.transpose(0, 1).unwrap().contiguous().unwrap();
            let got = vec64(&tn);
            for r in 0..cols {
                for c in 0..rows - 3 {
                    assert_eq!(
                        got[r * (rows - 3) + c],
                        xs[(c + 3) * cols + r],
                        "{dt:?} offset {rows}x{cols} at {r},{c}"
                    );
                }
            }
        }
    }
}

/// Parallel kernels called from four user threads at once (one of them
/// holds the team's slot, the others run on rayon's scope): every result
/// is right.
#[test]
fn parallel_kernels_from_several_user_threads_at_once_are_right() {
    let _l = lock();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let x = Tensor::full(&[512, 512], t as f64 + 1.0, DType::F32, CPU).unwrap();
                for _ in 0..50 {
                    let y = x.add(&x).unwrap().neg().unwrap();
                    let s = y.sum(&[1], false).unwrap().to_vec::<f32>().unwrap();
                    assert!(s.iter().all(|&v| v == -(2.0 * (t as f32 + 1.0)) * 512.0));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// `masked_fill` without autograd is one pass into a fresh tensor: the
/// values of `where(mask, value, x)` with a full and a row-broadcast mask,
/// in place the same, exactly two allocations (the result and the 0-d
/// value; a deep copy first made three), and its errors name
/// `masked_fill`, not the in-place form it used to call.
#[test]
fn masked_fill_is_one_pass_and_names_itself() {
    let _l = lock();
    let (rows, cols) = (300, 700);
    let v = values(rows, cols);
    for dt in [DType::F32, DType::F64, DType::BF16, DType::I32] {
        let x = tensor(&v, &[rows, cols], dt);
        let xs = vec64(&x);
        let full = x.gt_scalar(0.0).unwrap();
        let row = tensor(&values(1, cols), &[1, cols], DType::F32)
            .gt_scalar(0.0)
            .unwrap();
        for mask in [&full, &row] {
            let ms = vec64(mask);
            let want: Vec<f64> = xs
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    // The row mask repeats over the rows.
                    let m = if ms.len() == cols {
                        ms[i % cols]
                    } else {
                        ms[i]
                    };
                    if m != 0.0 {
                        -3.0
                    } else {
                        x
                    }
                })
                .collect();
            let before = memory::memory_stats(CPU).allocation.all.allocated;
            let y = x.masked_fill(mask, -3.0).unwrap();
            let allocs = memory::memory_stats(CPU).allocation.all.allocated - before;
            assert_eq!(allocs, 2, "masked_fill {dt:?}: the result and the value");
            assert_eq!(vec64(&y), want, "masked_fill {dt:?}");
            let mut z = x.deep_clone().unwrap();
            z.masked_fill_(mask, -3.0).unwrap();
            assert_eq!(vec64(&z), want, "masked_fill_ {dt:?}");
        }
    }
    let x = Tensor::zeros(&[3], DType::F32, CPU).unwrap();
    let e = x.masked_fill(&x, 1.0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "masked_fill",
                ..
            }
        ),
        "{e:?}"
    );
    let bad = Tensor::zeros(&[4], DType::Bool, CPU).unwrap();
    let e = x.masked_fill(&bad, 1.0).unwrap_err().to_string();
    assert!(
        e.contains("masked_fill") && !e.contains("masked_fill_"),
        "{e}"
    );
}

/// f32 bases and exponents that meet every special case of C's `powf`
/// (±0, ±1, ±inf, NaN, negative bases with odd, even and non-integer
/// exponents, overflow and underflow) among ordinary values.
fn pow_grid() -> (Vec<f32>, Vec<f32>) {
    let bases = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        3.7,
        -3.7,
        1e-30,
        1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        0.999,
        1.001,
    ];
    let exps = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        2.0,
        3.0,
        -3.0,
        0.5,
        -0.5,
        1.5,
        7.0,
        40.0,
        -40.0,
        1e6,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -0.7,
    ];
    // Every pair, repeated past a block of 1024 elements and a ragged end.
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        for &x in &bases {
            for &y in &exps {
                xs.push(x);
                ys.push(y);
            }
        }
    }
    (xs, ys)
}

/// `got` is C's `powf(x, y)`: the special cases exactly (NaN as NaN), the
/// rest within one ulp of the f64 power rounded to f32.
fn assert_powf(what: &str, xs: &[f32], ys: &[f32], got: &[f32]) {
    for ((&x, &y), &g) in xs.iter().zip(ys).zip(got) {
        let want = if y == 0.0 {
            1.0
        } else {
            (x as f64).powf(y as f64) as f32
        };
        let ok = if want.is_nan() || want.is_infinite() || want == 0.0 || want.abs() == 1.0 {
            g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan())
        } else {
            let ulp = f32::from_bits(want.abs().to_bits() + 1) - want.abs();
            (g - want).abs() <= ulp
        };
        assert!(ok, "{what}: pow({x:e}, {y:e}) = {g:e}, want {want:e}");
    }
}

/// `pow` and `pow_scalar` on f32 take two loops per block for a fresh
/// output (the powers, then C's special cases) and one fused loop in
/// place or through a transposed operand: every path gives C's `powf`,
/// and f16 and bf16 give the f32 result rounded once.
#[test]
fn pow_follows_c_on_every_kernel_path() {
    let _l = lock();
    let (xs, ys) = pow_grid();
    let n = xs.len();
    let x = Tensor::from_slice(&xs, &[n], CPU).unwrap();
    let y = Tensor::from_slice(&ys, &[n], CPU).unwrap();
    let fresh = x.pow(&y).unwrap().to_vec::<f32>().unwrap();
    assert_powf("pow, fresh output", &xs, &ys, &fresh);
    let mut inplace = x.deep_clone().unwrap();
    inplace.pow_(&y).unwrap();
    assert_powf(
        "pow_, in place",
        &xs,
        &ys,
        &inplace.to_vec::<f32>().unwrap(),
    );
    // [n/2, 2] read through the transpose of a [2, n/2] tensor: strided runs.
    let h = n / 2;
    let xt = Tensor::from_slice(&[&xs[..h], &xs[h..2 * h]].concat(), &[2, h], CPU)
        .unwrap()
        .t()
        .unwrap();
    let yt = Tensor::from_slice(&[&ys[..h], &ys[h..2 * h]].concat(), &[2, h], CPU)
        .unwrap()
        .t()
        .unwrap();
    let strided = xt.pow(&yt).unwrap().t().unwrap().contiguous().unwrap();
    assert_powf(
        "pow, transposed operands",
        &xs[..2 * h],
        &ys[..2 * h],
        &strided.to_vec::<f32>().unwrap(),
    );
    // f16 and bf16 compute in f32 and round once: the f32 result of the
    // rounded inputs, rounded (both loops run in the compute type).
    for dt in [DType::F16, DType::BF16] {
        let (xh, yh) = (x.to_dtype(dt).unwrap(), y.to_dtype(dt).unwrap());
        let got = xh.pow(&yh).unwrap().to_dtype(DType::F32).unwrap();
        let (xr, yr) = (
            xh.to_dtype(DType::F32).unwrap(),
            yh.to_dtype(DType::F32).unwrap(),
        );
        let want = xr
            .pow(&yr)
            .unwrap()
            .to_dtype(dt)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        let (got, want) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{dt:?} pow({}, {}) = {g}, want {w}",
                xs[i],
                ys[i]
            );
        }
    }
    for s in [0.0f32, 1.0, 3.0, -3.0, 0.5, 1.5, f32::INFINITY, f32::NAN] {
        let same = vec![s; n];
        let got = x.pow_scalar(s as f64).unwrap().to_vec::<f32>().unwrap();
        assert_powf(&format!("pow_scalar({s})"), &xs, &same, &got);
        let mut inplace = x.deep_clone().unwrap();
        inplace.pow_scalar_(s as f64).unwrap();
        let got = inplace.to_vec::<f32>().unwrap();
        assert_powf(&format!("pow_scalar_({s}), in place"), &xs, &same, &got);
    }
}
