//! Issue 17 item 1 and issue 14: the Winograd F(2x2, 3x3) path of
//! `conv2d` on the CPU (`ops/conv/winograd.rs`) against the direct f64
//! loop, its workspace freed before the op returns, and its chunks of
//! samples bounding the peak memory (exact allocator statistics).

use crate::common;

use common::conv_ref::{plan, reference, Case};
use common::{assert_close, read, tensor, uniform};
use tensorscope::{memory, ConvOptions, ConvTransposeOptions, DType, Device, Padding, Tensor};

/// Winograd's F(2x2, 3x3), which `conv2d` runs for f32 CPU tensors with a
/// 3x3 kernel, stride and dilation 1, one group, at least 32 channels in
/// and out and an output at least 16 wide (ops/conv/winograd.rs;
/// elsewhere, CUDA included, im2col):
/// values against the direct loop (odd sizes, so the last row and column
/// of tiles are cut; padding 0, 1, 2, uneven and `same`; one output row),
/// gradients against the f64 path (im2col, checked against the loop above),
/// and `conv_transpose2d`, whose forward pass is the input's gradient.
fn winograd_matches_the_loop(dev: Device) {
    let o = |padding| ConvOptions::<2> {
        padding,
        ..ConvOptions::default()
    };
    let cases = [
        (
            [2, 32, 7, 17],
            [32, 32, 3, 3],
            o(Padding::Explicit([1, 1])),
            true,
        ),
        ([1, 40, 6, 19], [33, 40, 3, 3], o(Padding::Valid), false),
        (
            [3, 32, 5, 14],
            [36, 32, 3, 3],
            o(Padding::Explicit([2, 2])),
            true,
        ),
        ([1, 32, 8, 16], [32, 32, 3, 3], o(Padding::Same), true),
        (
            [2, 32, 4, 14],
            [32, 32, 3, 3],
            o(Padding::Explicit([0, 2])),
            false,
        ),
        ([2, 32, 3, 18], [48, 32, 3, 3], o(Padding::Valid), true),
        // 11 samples of 64 tiles at 32 channels: chunks of 8 and 3
        // samples (ops/conv/winograd.rs `chunks`: 1 MiB per operand).
        (
            [11, 32, 16, 16],
            [32, 32, 3, 3],
            o(Padding::Explicit([1, 1])),
            true,
        ),
        // 32 x 32 tiles: the transformed operands' rows are 4 KiB, so
        // they are padded (ops/conv.rs `padded_row`).
        (
            [1, 32, 64, 64],
            [32, 32, 3, 3],
            o(Padding::Explicit([1, 1])),
            false,
        ),
    ];
    for (k, (xs, ws, opts, bias)) in cases.into_iter().enumerate() {
        let c = Case {
            x: xs,
            w: ws,
            opts,
            bias,
        };
        let (xn, wn) = (xs.iter().product(), ws.iter().product());
        let xv = uniform(xn, 80 + k as u64, -1.0, 1.0);
        let wv = uniform(wn, 90 + k as u64, -1.0, 1.0);
        let bv = uniform(ws[0], 100 + k as u64, -1.0, 1.0);
        let (_, [oh, ow]) = plan(&c);
        let rv = uniform(xs[0] * ws[0] * oh * ow, 110 + k as u64, -1.0, 1.0);
        let run = |dt: DType| {
            let x = tensor(&xv, &xs, dt, dev).requires_grad_(true).unwrap();
            let w = tensor(&wv, &ws, dt, dev).requires_grad_(true).unwrap();
            let b = tensor(&bv, &[ws[0]], dt, dev);
            let y = x.conv2d(&w, bias.then_some(&b), &opts).unwrap();
            let r = tensor(&rv, &[xs[0], ws[0], oh, ow], dt, dev);
            y.mul(&r).unwrap().sum_all().unwrap().backward().unwrap();
            (read(&y), read(&x.grad().unwrap()), read(&w.grad().unwrap()))
        };
        let (y, dx, dw) = run(DType::F32);
        let (_, dx64, dw64) = run(DType::F64);
        let ctx = format!("{c:?}");
        assert_close(&y, &reference(&c, &xv, &wv, &bv), 1e-5, &ctx);
        assert_close(&dx, &dx64, 1e-5, &format!("dx {ctx}"));
        // dw sums N OH OW products per element (4096 in the largest case,
        // where im2col's f32 result, with TENSORSCOPE_CONV=im2col, is also
        // 2.4e-5 off): the tolerance grows with the sum's length.
        let dw_tol = 1e-5 * ((xs[0] * oh * ow) as f64 / 64.0).sqrt().max(1.0);
        assert_close(&dw, &dw64, dw_tol, &format!("dw {ctx}"));
        // conv_transpose2d of r with the weight: conv2d's input gradient
        // (its forward pass), and its own gradients (conv2d's forward and
        // weight gradient), against f64.
        if let Padding::Explicit(p) = opts.padding {
            let t = ConvTransposeOptions {
                padding: p,
                ..ConvTransposeOptions::default()
            };
            let sv = uniform(xn, 120 + k as u64, -1.0, 1.0);
            let run = |dt: DType| {
                let r = tensor(&rv, &[xs[0], ws[0], oh, ow], dt, dev)
                    .requires_grad_(true)
                    .unwrap();
                let w = tensor(&wv, &ws, dt, dev).requires_grad_(true).unwrap();
                let z = r.conv_transpose2d(&w, None, &t).unwrap();
                let s = tensor(&sv, &xs, dt, dev);
                z.mul(&s).unwrap().sum_all().unwrap().backward().unwrap();
                (
                    read(&z),
                    read(&r.grad().unwrap()),
                    read(&w.grad().unwrap()),
                    z.shape().to_vec(),
                )
            };
            let (z, dr, dw, shape) = run(DType::F32);
            let (_, dr64, dw64, _) = run(DType::F64);
            assert_eq!(shape, xs, "{ctx}");
            assert_close(&z, &dx64, 1e-5, &format!("transpose {ctx}"));
            assert_close(&dr, &dr64, 1e-5, &format!("transpose dr {ctx}"));
            assert_close(&dw, &dw64, dw_tol, &format!("transpose dw {ctx}"));
        }
    }
    // No samples: an empty output and empty gradients.
    let x = Tensor::zeros(&[0, 32, 5, 16], DType::F32, dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let w = Tensor::ones(&[32, 32, 3, 3], DType::F32, dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = x.conv2d(&w, None, &o(Padding::Explicit([1, 1]))).unwrap();
    assert_eq!(y.shape(), &[0, 32, 5, 16]);
    y.sum_all().unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().shape(), &[0, 32, 5, 16]);
    assert_eq!(read(&w.grad().unwrap()), vec![0.0; 32 * 32 * 9]);
    // A batch whose transformed operands could not be sized is an Err
    // (an input of zero height can have any batch size), not a panic.
    let huge = Tensor::zeros(&[1 << 44, 32, 0, 0], DType::F32, dev).unwrap();
    assert!(huge
        .conv2d(&w, None, &o(Padding::Explicit([1025, 1025])))
        .is_err());
}

/// The Winograd path's workspace (the transformed input `V` `[16, C, T]`,
/// weight `U` `[16, O, C]` and product `M` `[16, O, T]`, T the 2x2 output
/// tiles) is freed before the op returns, and was held at the peak: more
/// than im2col's columns and product could be, so the test also shows
/// which path ran on the CPU.
fn the_winograd_workspace_is_freed(dev: Device) {
    let x = Tensor::ones(&[2, 32, 16, 16], DType::F32, dev).unwrap();
    let w = Tensor::ones(&[64, 32, 3, 3], DType::F32, dev).unwrap();
    let opts = ConvOptions {
        padding: Padding::Explicit([1, 1]),
        ..ConvOptions::default()
    };
    drop(x.conv2d(&w, None, &opts).unwrap());
    let (y, m) = memory::measure(dev, || x.conv2d(&w, None, &opts).unwrap()).unwrap();
    assert_eq!(
        m.allocated_delta,
        2 * 64 * 16 * 16 * 4,
        "only the output stays"
    );
    let t = 2 * 8 * 8;
    let winograd = 16 * (32 * t + 64 * 32 + 64 * t) * 4;
    let im2col = (32 * 9 + 64) * 2 * 16 * 16 * 4;
    assert!(winograd > im2col);
    if dev.is_cpu() {
        assert!(m.peak_delta >= winograd, "V, U and M at the peak: {m:?}");
    }
    assert_eq!(
        read(&y)[0],
        32.0 * 4.0,
        "a corner sees 4 taps of 32 channels"
    );
    drop(y);
}

/// The Winograd path runs chunks of samples, each with its own transformed
/// input and products of at most 1 MiB each (ops/conv/winograd.rs
/// `chunks`): for 16 samples of `[32, 16, 16]` and 64 output channels a
/// chunk is 3 samples, so the forward pass's peak is the output, `U`, and
/// one chunk's `V` and `M`, under a fifth of what the whole batch's
/// operands would need; the backward pass's peak is bounded by the same chunking,
/// and its two gradients (which share one transform of `dy` per chunk)
/// equal each computed alone.
fn winograd_runs_in_chunks_of_samples(dev: Device) {
    let x = Tensor::ones(&[16, 32, 16, 16], DType::F32, dev).unwrap();
    let w = Tensor::ones(&[64, 32, 3, 3], DType::F32, dev).unwrap();
    let opts = ConvOptions {
        padding: Padding::Explicit([1, 1]),
        ..ConvOptions::default()
    };
    drop(x.conv2d(&w, None, &opts).unwrap());
    let (y, m) = memory::measure(dev, || x.conv2d(&w, None, &opts).unwrap()).unwrap();
    let out = 16 * 64 * 16 * 16 * 4;
    assert_eq!(m.allocated_delta, out as i64, "only the output stays");
    if dev.is_cpu() {
        // 8 rows of 8 tiles and a dummy each (backend/winograd.rs): 72
        // tiles per sample, 294,912 bytes of M per sample, so 3 samples
        // per chunk of 1 MiB.
        let (tiles, u) = (3 * 8 * 9, 16 * 64 * 32 * 4);
        let chunk = 16 * (32 + 64) * tiles * 4; // V and M of 3 samples
        let whole = 16 * (32 + 64) * 16 * 8 * 9 * 4;
        let want = out + u + chunk;
        assert!(
            m.peak_delta >= want && m.peak_delta < want + chunk / 8,
            "the output, U and one chunk's V and M at the peak ({want} bytes; \
             the whole batch's V and M: {whole}): {m:?}"
        );
    }
    assert_eq!(
        read(&y)[0],
        32.0 * 4.0,
        "a corner sees 4 taps of 32 channels"
    );
    // Backward: dM and V of one chunk and the [16, O, C] product and sum.
    let xg = x.requires_grad_(true).unwrap();
    let wg = w.requires_grad_(true).unwrap();
    let y = xg.conv2d(&wg, None, &opts).unwrap();
    let gy = Tensor::ones(&[16, 64, 16, 16], DType::F32, dev).unwrap();
    let ((), m) = memory::measure(dev, || y.backward_with(&gy, false).unwrap()).unwrap();
    if dev.is_cpu() {
        let whole = 16 * (32 + 64) * 16 * 8 * 9 * 4;
        assert!(
            m.peak_delta < whole / 2,
            "the backward pass held less than half the whole batch's dM and V: {m:?}"
        );
    }
    // Every input element of the all-ones convolution with padding 1
    // sees 64 output channels through as many taps as it has neighbours.
    let dx = read(&xg.grad().unwrap());
    assert_eq!((dx[0], dx[17]), (64.0 * 4.0, 64.0 * 9.0));
    let dw = read(&wg.grad().unwrap());
    // A corner tap meets 15 x 15 outputs of each sample, the centre all.
    assert_eq!((dw[0], dw[4]), (16.0 * 225.0, 16.0 * 256.0));
    // One operand needing a gradient: the same gradient alone.
    let ones = |s: &[usize]| Tensor::ones(s, DType::F32, dev).unwrap();
    let (xo, wo) = (
        ones(&[16, 32, 16, 16]).requires_grad_(true).unwrap(),
        ones(&[64, 32, 3, 3]),
    );
    xo.conv2d(&wo, None, &opts)
        .unwrap()
        .backward_with(&gy, false)
        .unwrap();
    assert_eq!(read(&xo.grad().unwrap()), dx, "the input's gradient alone");
    let (xo, wo) = (
        ones(&[16, 32, 16, 16]),
        ones(&[64, 32, 3, 3]).requires_grad_(true).unwrap(),
    );
    xo.conv2d(&wo, None, &opts)
        .unwrap()
        .backward_with(&gy, false)
        .unwrap();
    assert_eq!(read(&wo.grad().unwrap()), dw, "the weight's gradient alone");
}

common::on_devices!(
    winograd_matches_the_loop,
    the_winograd_workspace_is_freed,
    winograd_runs_in_chunks_of_samples,
);
