//! Issue 17 item 3: `MultiheadAttention` and its key/value cache. The
//! cached forward (a prompt, then one token at a time, or in chunks) gives
//! what causal self-attention over the whole sequence gives; the cache is
//! allocated once and a decode step leaves nothing allocated; `is_causal`
//! equals the explicit mask; the errors. Agreement with PyTorch's
//! `multi_head_attention_forward` (masks, cross-attention, the weights) is
//! in the differential suite.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::{assert_close, read};
use tensorscope::autograd::no_grad;
use tensorscope::memory;
use tensorscope::nn::{Linear, MhaForward, MhaOptions, Module, MultiheadAttention};
use tensorscope::{manual_seed, DType, Device, Tensor};

fn layer(dev: Device, dt: DType) -> MultiheadAttention {
    manual_seed(3);
    let o = MhaOptions {
        batch_first: true,
        dtype: dt,
        device: dev,
        ..Default::default()
    };
    let mut m = MultiheadAttention::with_options(16, 4, o).unwrap();
    // Non-zero biases, so that a wrong slice of them shows.
    for (_, p) in m.named_parameters_mut() {
        if p.rank() == 1 {
            *p = Tensor::randn(p.shape(), dt, dev).unwrap();
        }
    }
    m
}

/// A prompt of 5 then 3 single tokens, or chunks of 3, 2 and 3: the cached
/// outputs are the rows of causal self-attention over all 8 positions.
fn cached_forward_is_causal_self_attention(dev: Device) {
    let dt = DType::F64;
    let mha = layer(dev, dt);
    manual_seed(5);
    let x = Tensor::randn(&[2, 8, 16], dt, dev).unwrap();
    let causal = MhaForward {
        is_causal: true,
        ..Default::default()
    };
    let want = read(&no_grad(|| mha.attend(&x, &x, &x, &causal)).unwrap().0);
    for chunks in [&[5usize, 1, 1, 1][..], &[3, 2, 3]] {
        let mut cache = mha.new_kv_cache(2, 10).unwrap();
        let mut got = vec![Vec::new(); 2];
        let mut at = 0;
        for &c in chunks {
            let y = no_grad(|| mha.forward_cached(&x.narrow(1, at, c)?, &mut cache)).unwrap();
            assert_eq!(y.shape(), &[2, c, 16]);
            let y = read(&y);
            for (b, g) in got.iter_mut().enumerate() {
                g.extend_from_slice(&y[b * c * 16..(b + 1) * c * 16]);
            }
            at += c;
            assert_eq!(cache.len(), at);
        }
        let got: Vec<f64> = got.concat();
        assert_close(&got, &want, 1e-12, &format!("chunks {chunks:?}"));
    }
}

/// The cache is two buffers allocated once: a decode step after the first
/// leaves exactly what was allocated before it, and the buffers stay where
/// they are.
fn decode_steps_leave_nothing_allocated(dev: Device) {
    let dt = DType::F32;
    let mha = layer(dev, dt);
    let x = Tensor::randn(&[1, 1, 16], dt, dev).unwrap();
    no_grad(|| {
        let before = memory::memory_allocated(dev);
        let mut cache = mha.new_kv_cache(1, 32).unwrap();
        let bytes = memory::round_size(4 * 32 * 4 * 4);
        assert_eq!(memory::memory_allocated(dev) - before, 2 * bytes);
        let ptr = cache.keys().unwrap().storage_ptr();
        mha.forward_cached(&x, &mut cache).unwrap();
        let settled = memory::memory_allocated(dev);
        for step in 1..20 {
            let y = mha.forward_cached(&x, &mut cache).unwrap();
            drop(y);
            assert_eq!(memory::memory_allocated(dev), settled, "step {step}");
        }
        assert_eq!(cache.keys().unwrap().storage_ptr(), ptr);
        assert_eq!(cache.len(), 20);
        let err = mha.forward_cached(&Tensor::randn(&[1, 13, 16], dt, dev).unwrap(), &mut cache);
        assert!(err.unwrap_err().to_string().contains("capacity of 32"));
        cache.clear();
        assert!(cache.is_empty());
    });
}

/// `is_causal` without a mask equals the explicit bool mask (true =
/// masked), and with a key-padding mask it is combined with it; the
/// need_weights path agrees with the SDPA path and its weights sum to 1.
fn causal_flag_and_masks_agree(dev: Device) {
    let dt = DType::F64;
    let mha = layer(dev, dt);
    manual_seed(9);
    let x = Tensor::randn(&[2, 6, 16], dt, dev).unwrap();
    let r = Tensor::arange(0.0, 6.0, 1.0, DType::I64, dev).unwrap();
    let above = r
        .view(&[1, 6])
        .unwrap()
        .gt(&r.view(&[6, 1]).unwrap())
        .unwrap();
    let run = |f: &MhaForward| read(&mha.attend(&x, &x, &x, f).unwrap().0);
    let flag = run(&MhaForward {
        is_causal: true,
        ..Default::default()
    });
    let mask = run(&MhaForward {
        attn_mask: Some(&above),
        ..Default::default()
    });
    assert_close(&flag, &mask, 1e-12, "is_causal vs mask");
    let pad: Vec<bool> = (0..12).map(|i| i % 6 == 4).collect();
    let pad = Tensor::from_slice(&pad, &[2, 6], Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let both = MhaForward {
        key_padding_mask: Some(&pad),
        is_causal: true,
        ..Default::default()
    };
    let (y, w) = mha
        .attend(
            &x,
            &x,
            &x,
            &MhaForward {
                need_weights: true,
                ..both
            },
        )
        .unwrap();
    assert_close(&read(&y), &run(&both), 1e-12, "need_weights vs SDPA");
    // A float padding mask with is_causal (-inf on key 4): the same.
    let fpad = Tensor::zeros(&[2, 6], dt, dev)
        .unwrap()
        .masked_fill(&pad, f64::NEG_INFINITY)
        .unwrap();
    let float_both = MhaForward {
        key_padding_mask: Some(&fpad),
        is_causal: true,
        ..Default::default()
    };
    assert_close(
        &run(&float_both),
        &run(&both),
        1e-12,
        "float padding mask + is_causal",
    );
    let w = read(&w.unwrap()); // [2, 6, 6], averaged over heads
    for (row, ws) in w.chunks(6).enumerate() {
        let i = row % 6;
        assert!(
            (ws.iter().sum::<f64>() - 1.0).abs() < 1e-12,
            "row {row}: {ws:?}"
        );
        assert!(
            ws.iter()
                .enumerate()
                .all(|(j, &v)| (j <= i && j != 4) || v == 0.0),
            "row {row}: {ws:?}"
        );
    }
}

/// Grouped-query heads (4 query heads over 2 key/value heads): the layer
/// equals a standard one whose key and value projections repeat each
/// key/value head's rows for its query heads, in the SDPA path with masks,
/// the need_weights path and the cached forward; the cache holds 2 heads.
fn grouped_query_heads(dev: Device) {
    let dt = DType::F64;
    manual_seed(11);
    let o = MhaOptions {
        batch_first: true,
        dtype: dt,
        device: dev,
        num_kv_heads: Some(2),
        ..Default::default()
    };
    let mut gqa = MultiheadAttention::with_options(16, 4, o).unwrap();
    assert_eq!(gqa.in_proj_weight.shape(), &[16 + 2 * 2 * 4, 16]);
    assert_eq!(gqa.num_kv_heads(), 2);
    let b = Tensor::randn(&[32], dt, dev).unwrap();
    gqa.in_proj_bias = Some(b);
    // The standard layer: kv head h / 2 for query head h, rows of 4.
    let expand = |t: &Tensor| -> Tensor {
        let mut parts = vec![t.narrow(0, 0, 16).unwrap()];
        for base in [16, 24] {
            for h in 0..4 {
                parts.push(t.narrow(0, base + (h / 2) * 4, 4).unwrap());
            }
        }
        Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0).unwrap()
    };
    let plain = MultiheadAttention::from_parts(
        expand(&gqa.in_proj_weight),
        gqa.in_proj_bias.as_ref().map(&expand),
        Linear::from_parts(
            gqa.out_proj.weight.alias(),
            gqa.out_proj.bias.as_ref().map(|b| b.alias()),
        )
        .unwrap(),
        4,
        MhaOptions {
            num_kv_heads: None,
            ..o
        },
    )
    .unwrap();
    let x = Tensor::randn(&[2, 6, 16], dt, dev).unwrap();
    let pad: Vec<bool> = (0..12).map(|i| i % 6 == 4).collect();
    let pad = Tensor::from_slice(&pad, &[2, 6], Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap();
    for f in [
        MhaForward::default(),
        MhaForward {
            is_causal: true,
            key_padding_mask: Some(&pad),
            ..Default::default()
        },
        MhaForward {
            is_causal: true,
            need_weights: true,
            average_attn_weights: false,
            ..Default::default()
        },
    ] {
        let (y, w) = gqa.attend(&x, &x, &x, &f).unwrap();
        let (want, want_w) = plain.attend(&x, &x, &x, &f).unwrap();
        assert_close(&read(&y), &read(&want), 1e-12, "gqa vs repeated heads");
        if let (Some(w), Some(want_w)) = (w, want_w) {
            assert_eq!(w.shape(), &[2, 4, 6, 6]);
            assert_close(&read(&w), &read(&want_w), 1e-12, "weights");
        }
    }
    let causal = MhaForward {
        is_causal: true,
        ..Default::default()
    };
    let want = read(&no_grad(|| plain.attend(&x, &x, &x, &causal)).unwrap().0);
    let mut cache = gqa.new_kv_cache(2, 8).unwrap();
    assert_eq!(cache.dims(), (2, 2, 4));
    let mut got = vec![Vec::new(); 2];
    for (at, c) in [(0, 4), (4, 1), (5, 1)] {
        let y = read(&no_grad(|| gqa.forward_cached(&x.narrow(1, at, c)?, &mut cache)).unwrap());
        for (bi, g) in got.iter_mut().enumerate() {
            g.extend_from_slice(&y[bi * c * 16..(bi + 1) * c * 16]);
        }
    }
    assert_close(&got.concat(), &want, 1e-12, "cached gqa");
    let bad = MhaOptions {
        num_kv_heads: Some(3),
        ..o
    };
    let e = MultiheadAttention::with_options(16, 4, bad)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("num_kv_heads (3)"), "{e}");
}

fn errors_name_the_layer(dev: Device) {
    assert!(MultiheadAttention::new(10, 3).is_err());
    let mha = layer(dev, DType::F32);
    let x = Tensor::zeros(&[2, 5, 12], DType::F32, dev).unwrap();
    let e = mha.forward(&x).unwrap_err().to_string();
    assert!(e.starts_with("MultiheadAttention"), "{e}");
    let x = Tensor::zeros(&[2, 5, 16], DType::F32, dev).unwrap();
    let bad = Tensor::zeros(&[5, 4], DType::Bool, dev).unwrap();
    let f = MhaForward {
        attn_mask: Some(&bad),
        ..Default::default()
    };
    assert!(mha
        .attend(&x, &x, &x, &f)
        .unwrap_err()
        .to_string()
        .starts_with("MultiheadAttention"));
    let mut cache = mha.new_kv_cache(1, 8).unwrap();
    let e = no_grad(|| mha.forward_cached(&x, &mut cache))
        .unwrap_err()
        .to_string();
    assert!(e.contains("another batch"), "{e}");
    // In grad mode with trainable weights the cache refuses.
    let mut cache = mha.new_kv_cache(2, 8).unwrap();
    let e = mha.forward_cached(&x, &mut cache).unwrap_err().to_string();
    assert!(e.contains("no_grad"), "{e}");
}

#[cfg(feature = "cuda")]
on_both!(
    cached_forward_is_causal_self_attention,
    decode_steps_leave_nothing_allocated,
    causal_flag_and_masks_agree,
    grouped_query_heads,
    errors_name_the_layer,
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    cached_forward_is_causal_self_attention,
    decode_steps_leave_nothing_allocated,
    causal_flag_and_masks_agree,
    grouped_query_heads,
    errors_name_the_layer,
);
