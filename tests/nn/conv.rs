//! Issue 17 item 1, convolutions: `conv2d`, `conv1d` and
//! `conv_transpose2d` against a direct
//! f64 loop over every option (stride, explicit / same / valid padding,
//! dilation, groups, bias, unbatched input), their gradients against the
//! loop's adjoint, the im2col workspace freed before the op returns (exact
//! allocator statistics), and the errors naming the op and the shapes.
//! Agreement with PyTorch itself is in the differential suite.

use crate::common;

use common::conv_ref::{plan, reference, Case};
use common::{assert_close, read, tensor, uniform};
use tensorscope::{memory, ConvOptions, ConvTransposeOptions, DType, Device, Padding, Tensor};

fn cases() -> Vec<Case> {
    let o = |stride, padding, dilation, groups| ConvOptions::<2> {
        stride,
        padding,
        dilation,
        groups,
    };
    vec![
        Case {
            x: [2, 3, 7, 6],
            w: [4, 3, 3, 3],
            opts: ConvOptions::default(),
            bias: true,
        },
        Case {
            x: [1, 2, 9, 8],
            w: [3, 2, 3, 2],
            opts: o([2, 3], Padding::Explicit([1, 2]), [1, 1], 1),
            bias: false,
        },
        Case {
            x: [2, 4, 8, 8],
            w: [6, 2, 3, 3],
            opts: o([1, 1], Padding::Same, [2, 1], 2),
            bias: true,
        },
        Case {
            x: [1, 4, 6, 7],
            w: [4, 1, 4, 2],
            opts: o([1, 1], Padding::Same, [1, 3], 4),
            bias: true,
        },
        Case {
            x: [3, 2, 5, 5],
            w: [2, 2, 1, 1],
            opts: o([2, 2], Padding::Valid, [1, 1], 1),
            bias: false,
        },
        Case {
            x: [1, 6, 10, 9],
            w: [9, 2, 3, 3],
            opts: o([3, 2], Padding::Explicit([2, 0]), [2, 2], 3),
            bias: true,
        },
        // N OH OW = 512 output positions: in f64 the columns' and dy's
        // rows would lie 4 KiB apart, so the im2col workspace pads them
        // (ops/conv.rs `padded_row`); in f32 they do not.
        Case {
            x: [2, 2, 16, 16],
            w: [2, 2, 3, 3],
            opts: o([1, 1], Padding::Explicit([1, 1]), [1, 1], 1),
            bias: true,
        },
        // Unit strides with OW = W (the CPU kernels' flat runs): padding
        // on the columns only; then row padding past a dilated kernel's
        // reach, so whole output rows lie in the padding for every tap.
        Case {
            x: [2, 3, 5, 6],
            w: [2, 3, 3, 3],
            opts: o([1, 1], Padding::Explicit([0, 1]), [1, 1], 1),
            bias: true,
        },
        Case {
            x: [1, 2, 4, 5],
            w: [3, 2, 2, 3],
            opts: o([1, 1], Padding::Explicit([3, 1]), [2, 1], 1),
            bias: false,
        },
        // The same with two groups, a dilation and a stride along W
        // (N OH OW = 2 * 16 * 16 = 512 again: padded in f64).
        Case {
            x: [2, 4, 16, 32],
            w: [4, 2, 3, 3],
            opts: o([1, 2], Padding::Explicit([2, 2]), [2, 2], 2),
            bias: false,
        },
    ]
}

fn conv2d_matches_the_direct_loop(dev: Device) {
    for (k, c) in cases().into_iter().enumerate() {
        let xn: usize = c.x.iter().product();
        let wn: usize = c.w.iter().product();
        let xv = uniform(xn, 10 + k as u64, -1.0, 1.0);
        let wv = uniform(wn, 20 + k as u64, -1.0, 1.0);
        let bv = uniform(c.w[0], 30 + k as u64, -1.0, 1.0);
        let want = reference(&c, &xv, &wv, &bv);
        let (_, [oh, ow]) = plan(&c);
        for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5), (DType::BF16, 3e-2)] {
            let x = tensor(&xv, &c.x, dt, dev);
            let w = tensor(&wv, &c.w, dt, dev);
            let b = tensor(&bv, &[c.w[0]], dt, dev);
            let y = x.conv2d(&w, c.bias.then_some(&b), &c.opts).unwrap();
            assert_eq!(y.shape(), &[c.x[0], c.w[0], oh, ow], "{c:?}");
            // bf16 inputs are rounded: compare with the loop over the rounded values.
            let want = if dt == DType::BF16 {
                reference(&c, &read(&x), &read(&w), &read(&b))
            } else {
                want.clone()
            };
            assert_close(&read(&y), &want, tol, &format!("{dt} {c:?}"));
        }
        // Unbatched input: the batch dimension is added and removed.
        if c.x[0] == 1 {
            let x = tensor(&xv, &c.x[1..], DType::F64, dev);
            let w = tensor(&wv, &c.w, DType::F64, dev);
            let b = tensor(&bv, &[c.w[0]], DType::F64, dev);
            let y = x.conv2d(&w, c.bias.then_some(&b), &c.opts).unwrap();
            assert_eq!(y.shape(), &[c.w[0], oh, ow]);
            assert_close(&read(&y), &want, 1e-12, &format!("unbatched {c:?}"));
        }
    }
}

/// The gradients against the loop's adjoint: for `L = sum(y * r)`,
/// `dL/dx`, `dL/dw` and `dL/db` by central differences of the (linear)
/// loop, which are exact up to rounding.
fn conv2d_gradients_match_the_loop(dev: Device) {
    for (k, c) in cases().into_iter().enumerate() {
        let xn: usize = c.x.iter().product();
        let wn: usize = c.w.iter().product();
        let xv = uniform(xn, 40 + k as u64, -1.0, 1.0);
        let wv = uniform(wn, 50 + k as u64, -1.0, 1.0);
        let bv = uniform(c.w[0], 60 + k as u64, -1.0, 1.0);
        let (_, [oh, ow]) = plan(&c);
        let rv = uniform(c.x[0] * c.w[0] * oh * ow, 70 + k as u64, -1.0, 1.0);
        let loss = |x: &[f64], w: &[f64], b: &[f64]| -> f64 {
            reference(&c, x, w, b)
                .iter()
                .zip(&rv)
                .map(|(a, r)| a * r)
                .sum()
        };
        // The loss is linear in each operand: one difference of step 1 is exact.
        let grad = |which: usize, len: usize| -> Vec<f64> {
            (0..len)
                .map(|i| {
                    let (mut x, mut w, mut b) = (xv.clone(), wv.clone(), bv.clone());
                    let v = [&mut x, &mut w, &mut b][which].get_mut(i).unwrap();
                    *v += 0.5;
                    let up = loss(&x, &w, &b);
                    let (mut x, mut w, mut b) = (xv.clone(), wv.clone(), bv.clone());
                    let v = [&mut x, &mut w, &mut b][which].get_mut(i).unwrap();
                    *v -= 0.5;
                    up - loss(&x, &w, &b)
                })
                .collect()
        };
        let x = tensor(&xv, &c.x, DType::F64, dev)
            .requires_grad_(true)
            .unwrap();
        let w = tensor(&wv, &c.w, DType::F64, dev)
            .requires_grad_(true)
            .unwrap();
        let b = tensor(&bv, &[c.w[0]], DType::F64, dev)
            .requires_grad_(true)
            .unwrap();
        let r = tensor(&rv, &[c.x[0], c.w[0], oh, ow], DType::F64, dev);
        let y = x.conv2d(&w, c.bias.then_some(&b), &c.opts).unwrap();
        y.mul(&r).unwrap().sum_all().unwrap().backward().unwrap();
        let ctx = format!("{c:?}");
        assert_close(
            &read(&x.grad().unwrap()),
            &grad(0, xn),
            1e-10,
            &format!("dx {ctx}"),
        );
        assert_close(
            &read(&w.grad().unwrap()),
            &grad(1, wn),
            1e-10,
            &format!("dw {ctx}"),
        );
        if c.bias {
            assert_close(
                &read(&b.grad().unwrap()),
                &grad(2, c.w[0]),
                1e-10,
                &format!("db {ctx}"),
            );
        } else {
            assert!(b.grad().is_none());
        }
    }
}

/// conv1d is conv2d of height 1: against the 2-d loop with `h = 1`.
fn conv1d_is_conv2d_of_height_one(dev: Device) {
    let c = Case {
        x: [2, 4, 1, 11],
        w: [6, 2, 1, 3],
        opts: ConvOptions {
            stride: [1, 2],
            padding: Padding::Explicit([0, 2]),
            dilation: [1, 2],
            groups: 2,
        },
        bias: true,
    };
    let xv = uniform(2 * 4 * 11, 1, -1.0, 1.0);
    let wv = uniform(6 * 2 * 3, 2, -1.0, 1.0);
    let bv = uniform(6, 3, -1.0, 1.0);
    let want = reference(&c, &xv, &wv, &bv);
    let x = tensor(&xv, &[2, 4, 11], DType::F64, dev);
    let w = tensor(&wv, &[6, 2, 3], DType::F64, dev);
    let b = tensor(&bv, &[6], DType::F64, dev);
    let opts = ConvOptions::<1> {
        stride: [2],
        padding: Padding::Explicit([2]),
        dilation: [2],
        groups: 2,
    };
    let y = x.conv1d(&w, Some(&b), &opts).unwrap();
    assert_eq!(y.shape(), &[2, 6, 6]);
    assert_close(&read(&y), &want, 1e-12, "conv1d");
    let y1 = x.select(0, 0).unwrap().conv1d(&w, Some(&b), &opts).unwrap();
    assert_eq!(y1.shape(), &[6, 6]);
    assert_close(&read(&y1), &want[..6 * 6], 1e-12, "unbatched conv1d");
    let same = ConvOptions::<1> {
        padding: Padding::Same,
        ..ConvOptions::default()
    };
    assert_eq!(
        x.conv1d(
            &tensor(&wv[..4 * 3], &[1, 4, 3], DType::F64, dev),
            None,
            &same
        )
        .unwrap()
        .shape(),
        &[2, 1, 11]
    );
}

/// The columns are workspace: allocated and freed inside the op, so after
/// it only the output is new, and the peak held them.
fn the_workspace_is_freed_before_the_op_returns(dev: Device) {
    let x = Tensor::ones(&[2, 8, 16, 16], DType::F32, dev).unwrap();
    let w = Tensor::ones(&[16, 8, 3, 3], DType::F32, dev).unwrap();
    let opts = ConvOptions {
        padding: Padding::Explicit([1, 1]),
        ..ConvOptions::default()
    };
    drop(x.conv2d(&w, None, &opts).unwrap()); // first use (cuBLAS's workspace, ...)
    let (y, m) = memory::measure(dev, || x.conv2d(&w, None, &opts).unwrap()).unwrap();
    let out_bytes = 2 * 16 * 16 * 16 * 4;
    let cols_bytes = 2 * 8 * 9 * 16 * 16 * 4;
    assert_eq!(m.allocated_delta, out_bytes as i64, "only the output stays");
    assert!(
        m.peak_delta >= out_bytes + cols_bytes,
        "the columns were held at the peak: {m:?}"
    );
    drop(y);
    // In f64 the columns' rows (N OH OW = 512 elements, 4 KiB) are padded
    // by 64 bytes (ops/conv.rs `padded_row`): the peak holds the padded
    // columns and the product `[16, 512]` together, more than unpadded
    // columns and the product could be (72 rows x 64 B = 4.6 KB more).
    let x = x.to_dtype(DType::F64).unwrap();
    let w = w.to_dtype(DType::F64).unwrap();
    drop(x.conv2d(&w, None, &opts).unwrap());
    let (y, m) = memory::measure(dev, || x.conv2d(&w, None, &opts).unwrap()).unwrap();
    let padded_cols = 8 * 9 * (512 + 8) * 8;
    let product = 16 * 512 * 8;
    assert_eq!(m.allocated_delta, (2 * 16 * 16 * 16 * 8) as i64);
    assert!(
        m.peak_delta >= padded_cols + product,
        "the padded columns and the product were held at the peak: {m:?}"
    );
    drop(y);
}

/// `conv_transpose2d` against its direct loop
/// (`y[n, co, i s - p + a d, j s - p + b d] += x[n, ci, i, j] w[ci, co', a, b]`),
/// values and gradients (exact differences: the loss is linear in each
/// operand).
fn conv_transpose2d_matches_the_loop(dev: Device) {
    // (input, weight [Cin, Cout/g, kh, kw], stride, padding, output padding, dilation, groups)
    #[allow(clippy::type_complexity)]
    let cases: [(
        [usize; 4],
        [usize; 4],
        [usize; 2],
        [usize; 2],
        [usize; 2],
        [usize; 2],
        usize,
    ); 4] = [
        (
            [2, 3, 4, 5],
            [3, 2, 3, 3],
            [1, 1],
            [0, 0],
            [0, 0],
            [1, 1],
            1,
        ),
        (
            [1, 4, 3, 3],
            [4, 3, 2, 2],
            [2, 2],
            [0, 0],
            [0, 0],
            [1, 1],
            1,
        ),
        (
            [2, 4, 4, 3],
            [4, 1, 3, 2],
            [2, 1],
            [1, 0],
            [1, 0],
            [1, 2],
            2,
        ),
        (
            [1, 2, 5, 4],
            [2, 2, 3, 3],
            [3, 2],
            [1, 1],
            [2, 1],
            [2, 1],
            1,
        ),
    ];
    for (k, (xs, ws, st, pd, op, dl, g)) in cases.into_iter().enumerate() {
        let cout = ws[1] * g;
        let cin_g = xs[1] / g;
        let out = [0, 1]
            .map(|i| (xs[2 + i] - 1) * st[i] + dl[i] * (ws[2 + i] - 1) + op[i] + 1 - 2 * pd[i]);
        let reference = |x: &[f64], w: &[f64], b: &[f64]| -> Vec<f64> {
            let mut y = vec![0.0; xs[0] * cout * out[0] * out[1]];
            for n in 0..xs[0] {
                for co in 0..cout {
                    for r in 0..out[0] {
                        for c in 0..out[1] {
                            y[((n * cout + co) * out[0] + r) * out[1] + c] = b[co];
                        }
                    }
                }
                for ci in 0..xs[1] {
                    let grp = ci / cin_g;
                    for cog in 0..ws[1] {
                        let co = grp * ws[1] + cog;
                        for i in 0..xs[2] {
                            for j in 0..xs[3] {
                                for a in 0..ws[2] {
                                    for bb in 0..ws[3] {
                                        let r = (i * st[0] + a * dl[0]) as isize - pd[0] as isize;
                                        let c = (j * st[1] + bb * dl[1]) as isize - pd[1] as isize;
                                        if r < 0
                                            || c < 0
                                            || r >= out[0] as isize
                                            || c >= out[1] as isize
                                        {
                                            continue;
                                        }
                                        let xv = x[((n * xs[1] + ci) * xs[2] + i) * xs[3] + j];
                                        let wv = w[((ci * ws[1] + cog) * ws[2] + a) * ws[3] + bb];
                                        y[((n * cout + co) * out[0] + r as usize) * out[1]
                                            + c as usize] += xv * wv;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            y
        };
        let xn: usize = xs.iter().product();
        let wn: usize = ws.iter().product();
        let xv = uniform(xn, 130 + k as u64, -1.0, 1.0);
        let wv = uniform(wn, 140 + k as u64, -1.0, 1.0);
        let bv = uniform(cout, 150 + k as u64, -1.0, 1.0);
        let opts = ConvTransposeOptions {
            stride: st,
            padding: pd,
            output_padding: op,
            groups: g,
            dilation: dl,
        };
        let x = tensor(&xv, &xs, DType::F64, dev)
            .requires_grad_(true)
            .unwrap();
        let w = tensor(&wv, &ws, DType::F64, dev)
            .requires_grad_(true)
            .unwrap();
        let b = tensor(&bv, &[cout], DType::F64, dev)
            .requires_grad_(true)
            .unwrap();
        let y = x.conv_transpose2d(&w, Some(&b), &opts).unwrap();
        assert_eq!(y.shape(), &[xs[0], cout, out[0], out[1]], "case {k}");
        assert_close(
            &read(&y),
            &reference(&xv, &wv, &bv),
            1e-12,
            &format!("case {k}"),
        );
        let rv = uniform(y.numel(), 160 + k as u64, -1.0, 1.0);
        y.mul(&tensor(&rv, y.shape(), DType::F64, dev))
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let loss = |x: &[f64], w: &[f64], b: &[f64]| -> f64 {
            reference(x, w, b).iter().zip(&rv).map(|(a, r)| a * r).sum()
        };
        let grad = |which: usize, len: usize| -> Vec<f64> {
            (0..len)
                .map(|i| {
                    let mut v = [xv.clone(), wv.clone(), bv.clone()];
                    v[which][i] += 0.5;
                    let up = loss(&v[0], &v[1], &v[2]);
                    v[which][i] -= 1.0;
                    up - loss(&v[0], &v[1], &v[2])
                })
                .collect()
        };
        assert_close(
            &read(&x.grad().unwrap()),
            &grad(0, xn),
            1e-10,
            &format!("dx case {k}"),
        );
        assert_close(
            &read(&w.grad().unwrap()),
            &grad(1, wn),
            1e-10,
            &format!("dw case {k}"),
        );
        assert_close(
            &read(&b.grad().unwrap()),
            &grad(2, cout),
            1e-10,
            &format!("db case {k}"),
        );
    }
    // A stride with one input position has no effect, however large
    // (col2im's ranges are computed in i128): each of the kernel's two rows
    // lands in the output.
    let x1 = Tensor::ones(&[1, 1, 1, 1], DType::F32, dev).unwrap();
    let w2 = Tensor::from_slice(&[2.0f32, 3.0], &[1, 1, 2, 1], dev).unwrap();
    let huge = ConvTransposeOptions {
        stride: [usize::MAX, 1],
        ..ConvTransposeOptions::default()
    };
    let y = x1.conv_transpose2d(&w2, None, &huge).unwrap();
    assert_eq!(
        (y.shape(), read(&y)),
        (&[1usize, 1, 2, 1][..], vec![2.0, 3.0])
    );
    let t = |s: &[usize]| Tensor::zeros(s, DType::F32, dev).unwrap();
    let d = ConvTransposeOptions::default();
    let e = t(&[1, 3, 4, 4])
        .conv_transpose2d(&t(&[2, 2, 3, 3]), None, &d)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("conv_transpose2d") && e.contains("[2, 2, 3, 3]"),
        "{e}"
    );
    let e = t(&[1, 2, 4, 4])
        .conv_transpose2d(
            &t(&[2, 2, 3, 3]),
            None,
            &ConvTransposeOptions {
                output_padding: [1, 0],
                ..d
            },
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("conv_transpose2d") && e.contains("output_padding"),
        "{e}"
    );
    let e = t(&[1, 2, 1, 1])
        .conv_transpose2d(
            &t(&[2, 2, 1, 1]),
            None,
            &ConvTransposeOptions {
                padding: [1, 1],
                ..d
            },
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("conv_transpose2d") && e.contains("no output"),
        "{e}"
    );
}

/// Bad operands: an `Err` naming the op and the shapes, never a panic.
fn bad_operands_are_errors_naming_the_op(dev: Device) {
    let t = |s: &[usize]| Tensor::zeros(s, DType::F32, dev).unwrap();
    let d = ConvOptions::<2>::default();
    let msg = |r: tensorscope::Result<Tensor>| r.unwrap_err().to_string();
    let e = msg(t(&[1, 4, 5, 5]).conv2d(&t(&[2, 3, 3, 3]), None, &d));
    assert!(
        e.contains("conv2d") && e.contains("[1, 4, 5, 5]") && e.contains("[2, 3, 3, 3]"),
        "{e}"
    );
    let g3 = ConvOptions { groups: 3, ..d };
    let e = msg(t(&[1, 4, 5, 5]).conv2d(&t(&[3, 1, 3, 3]), None, &g3));
    assert!(e.contains("conv2d") && e.contains("groups"), "{e}");
    let e = msg(t(&[1, 1, 2, 2]).conv2d(&t(&[1, 1, 3, 3]), None, &d));
    assert!(
        e.contains("conv2d") && e.contains("smaller than the dilated kernel"),
        "{e}"
    );
    let same2 = ConvOptions {
        stride: [2, 2],
        padding: Padding::Same,
        ..d
    };
    let e = msg(t(&[1, 1, 5, 5]).conv2d(&t(&[1, 1, 3, 3]), None, &same2));
    assert!(e.contains("conv2d") && e.contains("stride"), "{e}");
    let z = ConvOptions {
        stride: [0, 1],
        ..d
    };
    assert!(msg(t(&[1, 1, 5, 5]).conv2d(&t(&[1, 1, 3, 3]), None, &z)).contains("stride"));
    let e = msg(t(&[1, 1, 5, 5]).conv2d(&t(&[2, 1, 3, 3]), Some(&t(&[3])), &d));
    assert!(e.contains("conv2d") && e.contains("bias"), "{e}");
    let e = msg(t(&[5, 5]).conv2d(&t(&[1, 1, 3, 3]), None, &d));
    assert!(e.contains("conv2d") && e.contains("rank"), "{e}");
    let i = Tensor::zeros(&[1, 1, 5, 5], DType::I64, dev).unwrap();
    assert!(msg(i.conv2d(&t(&[1, 1, 3, 3]), None, &d)).contains("float"));
    let h = Tensor::zeros(&[1, 1, 3, 3], DType::F64, dev).unwrap();
    assert!(msg(t(&[1, 1, 5, 5]).conv2d(&h, None, &d)).contains("weight"));
    let huge = ConvOptions {
        dilation: [usize::MAX, 1],
        ..d
    };
    let e = msg(t(&[1, 1, 5, 5]).conv2d(&t(&[1, 1, 3, 3]), None, &huge));
    assert!(e.contains("conv2d") && e.contains("too large"), "{e}");
    let e = t(&[1, 2, 0, 4])
        .conv_transpose2d(&t(&[2, 2, 3, 3]), None, &ConvTransposeOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("conv_transpose2d") && e.contains("no output"),
        "{e}"
    );
    let e = msg(t(&[1, 2, 5]).conv1d(&t(&[1, 1, 7]), None, &ConvOptions::default()));
    assert!(e.contains("conv1d") && e.contains("[1, 2, 5]"), "{e}");
}

/// Batches large enough that the CPU's im2col and col2im cut their samples
/// into blocks (about 2^14 taps each: 3 planes of 96x96, 40 of 8x8, whose
/// taps per sample are 9 x 64) agree with one convolution per sample, which
/// is one block (within rounding: the products see other shapes, and the
/// weight's gradient sums the samples in another order; a misplaced block
/// would be off by whole elements). Padding on both sides, and
/// on the columns only, with unit strides (the kernels' flat runs), and a
/// stride (their row-by-row path).
fn sample_blocks_agree_with_one_sample_at_a_time(dev: Device) {
    let o = |stride, padding| ConvOptions::<2> {
        stride,
        padding,
        ..ConvOptions::default()
    };
    for (k, (xs, opts)) in [
        ([3, 2, 96, 96], o([1, 1], Padding::Same)),
        ([40, 2, 8, 8], o([1, 1], Padding::Same)),
        ([40, 2, 8, 8], o([1, 1], Padding::Explicit([0, 1]))),
        ([100, 2, 8, 9], o([2, 2], Padding::Explicit([1, 1]))),
    ]
    .into_iter()
    .enumerate()
    {
        let xv = uniform(xs.iter().product(), 80 + k as u64, -1.0, 1.0);
        let wv = uniform(3 * 2 * 9, 90 + k as u64, -1.0, 1.0);
        let x = tensor(&xv, &xs, DType::F32, dev)
            .requires_grad_(true)
            .unwrap();
        let w = tensor(&wv, &[3, 2, 3, 3], DType::F32, dev)
            .requires_grad_(true)
            .unwrap();
        let y = x.conv2d(&w, None, &opts).unwrap();
        let r = tensor(
            &uniform(y.numel(), 100 + k as u64, -1.0, 1.0),
            y.shape(),
            DType::F32,
            dev,
        );
        y.mul(&r).unwrap().sum_all().unwrap().backward().unwrap();
        let (mut ys, mut dxs) = (vec![], vec![]);
        let mut dw = vec![0.0; wv.len()];
        for s in 0..xs[0] {
            let xi = x
                .narrow(0, s, 1)
                .unwrap()
                .detach()
                .requires_grad_(true)
                .unwrap();
            let wi = w.detach().requires_grad_(true).unwrap();
            let yi = xi.conv2d(&wi, None, &opts).unwrap();
            let ri = r.narrow(0, s, 1).unwrap();
            yi.mul(&ri).unwrap().sum_all().unwrap().backward().unwrap();
            ys.extend(read(&yi));
            dxs.extend(read(&xi.grad().unwrap()));
            for (a, g) in dw.iter_mut().zip(read(&wi.grad().unwrap())) {
                *a += g;
            }
        }
        let ctx = format!("{xs:?} {opts:?}");
        assert_close(&read(&y), &ys, 1e-5, &format!("y {ctx}"));
        assert_close(&read(&x.grad().unwrap()), &dxs, 1e-5, &format!("dx {ctx}"));
        assert_close(&read(&w.grad().unwrap()), &dw, 1e-4, &format!("dw {ctx}"));
    }
}

/// The CPU's flat im2col reads each sample's whole shifted plane when it
/// lies inside the storage, dropping the lanes that are padding, and its
/// col2im adds every tap's `l` outputs into a buffer with margins (both
/// for unit strides and rows as long as the input's: `same` padding). An
/// input that is a view into a larger storage full of NaN around it, and
/// that view's copy, give bit-identical outputs and gradients, with no
/// NaN: nothing read outside the view reaches a result.
fn the_flat_kernels_ignore_what_surrounds_the_view(dev: Device) {
    for (k, (xs, kernel, dt)) in [
        ([4, 3, 4, 4], [3, 3], DType::F32),
        ([3, 2, 8, 8], [3, 3], DType::F32),
        ([2, 3, 6, 6], [5, 5], DType::F64),
    ]
    .into_iter()
    .enumerate()
    {
        let same = ConvOptions::<2> {
            padding: Padding::Same,
            ..ConvOptions::default()
        };
        let n: usize = xs.iter().product();
        let xv = uniform(n, 110 + k as u64, -1.0, 1.0);
        // [nan x n, x, nan x n]: the view starts one input's size in.
        let mut around = vec![f64::NAN; 3 * n];
        around[n..2 * n].copy_from_slice(&xv);
        let big = tensor(&around, &[3 * n], dt, dev);
        let view = big
            .narrow(0, n, n)
            .unwrap()
            .reshape(&[
                xs[0] as isize,
                xs[1] as isize,
                xs[2] as isize,
                xs[3] as isize,
            ])
            .unwrap();
        assert!(view.storage_offset() > 0);
        let copy = tensor(&xv, &xs, dt, dev);
        let wv = uniform(2 * xs[1] * kernel[0] * kernel[1], 120 + k as u64, -1.0, 1.0);
        let mut got = vec![];
        for x in [view, copy] {
            let x = x.requires_grad_(true).unwrap();
            let w = tensor(&wv, &[2, xs[1], kernel[0], kernel[1]], dt, dev)
                .requires_grad_(true)
                .unwrap();
            let y = x.conv2d(&w, None, &same).unwrap();
            y.sum_all().unwrap().backward().unwrap();
            got.push([read(&y), read(&x.grad().unwrap()), read(&w.grad().unwrap())]);
        }
        for (a, b) in got[0].iter().zip(&got[1]) {
            assert!(a.iter().all(|v| v.is_finite()), "{xs:?} {dt}");
            let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(a), bits(b), "{xs:?} {dt}");
        }
    }
}

/// f16 and bf16 gradients (col2im's general path, which sums in f64,
/// and, with `same` padding and unit strides, its flat runs) against
/// f64's autograd on the same rounded operands, within the half types'
/// rounding of the result.
fn half_precision_gradients_match_f64(dev: Device) {
    for (k, c) in cases().into_iter().enumerate() {
        let (_, [oh, ow]) = plan(&c);
        let xv = uniform(c.x.iter().product(), 130 + k as u64, -1.0, 1.0);
        let wv = uniform(c.w.iter().product(), 140 + k as u64, -1.0, 1.0);
        let rv = uniform(c.x[0] * c.w[0] * oh * ow, 150 + k as u64, -1.0, 1.0);
        for dt in [DType::F16, DType::BF16] {
            let grads = |dt: DType, xv: &[f64], wv: &[f64], rv: &[f64]| {
                let x = tensor(xv, &c.x, dt, dev).requires_grad_(true).unwrap();
                let w = tensor(wv, &c.w, dt, dev).requires_grad_(true).unwrap();
                let r = tensor(rv, &[c.x[0], c.w[0], oh, ow], dt, dev);
                let y = x.conv2d(&w, None, &c.opts).unwrap();
                y.mul(&r).unwrap().sum_all().unwrap().backward().unwrap();
                let (dx, dw) = (x.grad().unwrap(), w.grad().unwrap());
                let rounded = [read(&x), read(&w), read(&r)];
                ((read(&dx), read(&dw)), rounded)
            };
            let ((dx, dw), [xr, wr, rr]) = grads(dt, &xv, &wv, &rv);
            let ((dx64, dw64), _) = grads(DType::F64, &xr, &wr, &rr);
            let ctx = format!("{dt} {c:?}");
            assert_close(&dx, &dx64, 3e-2, &format!("dx {ctx}"));
            assert_close(&dw, &dw64, 3e-2, &format!("dw {ctx}"));
        }
    }
}

common::on_devices!(
    half_precision_gradients_match_f64,
    the_flat_kernels_ignore_what_surrounds_the_view,
    sample_blocks_agree_with_one_sample_at_a_time,
    conv2d_matches_the_direct_loop,
    conv2d_gradients_match_the_loop,
    conv1d_is_conv2d_of_height_one,
    the_workspace_is_freed_before_the_op_returns,
    bad_operands_are_errors_naming_the_op,
    conv_transpose2d_matches_the_loop,
);
