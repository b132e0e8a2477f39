//! The direct f64 loop of a 2-d convolution, shared by `tests/nn/conv.rs`
//! and `tests/nn/conv_winograd.rs`.

use tensorscope::{ConvOptions, Padding};

/// One 2-d case: input `[n, c, h, w]`, weight `[o, c / g, kh, kw]`.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub x: [usize; 4],
    pub w: [usize; 4],
    pub opts: ConvOptions<2>,
    pub bias: bool,
}

/// The zeros before each spatial dimension and the output's size.
pub fn plan(c: &Case) -> ([usize; 2], [usize; 2]) {
    let k = [c.w[2], c.w[3]];
    let d = c.opts.dilation;
    let (lo, hi) = match c.opts.padding {
        Padding::Explicit(p) => (p, p),
        Padding::Valid => ([0; 2], [0; 2]),
        Padding::Same => {
            let t = [d[0] * (k[0] - 1), d[1] * (k[1] - 1)];
            ([t[0] / 2, t[1] / 2], [t[0] - t[0] / 2, t[1] - t[1] / 2])
        }
    };
    let out =
        |i: usize| (c.x[2 + i] + lo[i] + hi[i] - d[i] * (k[i] - 1) - 1) / c.opts.stride[i] + 1;
    (lo, [out(0), out(1)])
}

/// The direct loop: `y[n, o, i, j] = b[o] + sum x[n, g c', i s + p d - lo, ..] w[o, c', p, q]`.
pub fn reference(c: &Case, x: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
    let [n, ci, h, wd] = c.x;
    let [o, cg, kh, kw] = c.w;
    let (lo, [oh, ow]) = plan(c);
    let og = o / c.opts.groups;
    let (s, d) = (c.opts.stride, c.opts.dilation);
    let mut y = vec![0.0; n * o * oh * ow];
    for bn in 0..n {
        for oc in 0..o {
            let grp = oc / og;
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = if c.bias { b[oc] } else { 0.0 };
                    for cc in 0..cg {
                        let ch = grp * cg + cc;
                        for p in 0..kh {
                            for q in 0..kw {
                                let r = (i * s[0] + p * d[0]) as isize - lo[0] as isize;
                                let t = (j * s[1] + q * d[1]) as isize - lo[1] as isize;
                                if r < 0 || t < 0 || r >= h as isize || t >= wd as isize {
                                    continue;
                                }
                                let xi = ((bn * ci + ch) * h + r as usize) * wd + t as usize;
                                let wi = ((oc * cg + cc) * kh + p) * kw + q;
                                acc += x[xi] * w[wi];
                            }
                        }
                    }
                    y[((bn * o + oc) * oh + i) * ow + j] = acc;
                }
            }
        }
    }
    y
}
