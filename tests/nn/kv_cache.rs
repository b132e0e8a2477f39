//! Issue 48 item 2: the standalone key/value cache. Decoding through it
//! (grouped-query heads, RoPE at the cache's offset, a prompt then single
//! tokens) gives causal attention over the whole sequence; appending a
//! token allocates nothing, and a cached attention step allocates its
//! output only (CPU); every error leaves the cache as it was.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::{assert_close, read};
use tensorscope::autograd::no_grad;
use tensorscope::memory::{self, round_size};
use tensorscope::nn::{
    scaled_dot_product_attention_with as sdpa, KvCache, RotaryEmbedding, SdpaOptions,
};
use tensorscope::{manual_seed, DType, Device, Tensor};

/// 8 query heads over 2 key/value heads, 12 positions: a 5-token prompt
/// then 7 single tokens through the cache, RoPE at `cache.len()`, equal the
/// rows of causal GQA attention over all 12.
fn decoding_equals_full_causal_attention(dev: Device) {
    let dt = DType::F64;
    manual_seed(21);
    let (hq, hkv, n, d) = (8, 2, 12, 16);
    let q = Tensor::randn(&[1, hq, n, d], dt, dev).unwrap();
    let k = Tensor::randn(&[1, hkv, n, d], dt, dev).unwrap();
    let v = Tensor::randn(&[1, hkv, n, d], dt, dev).unwrap();
    let rope = RotaryEmbedding::new(d, 10_000.0, None, dev).unwrap();
    let o = SdpaOptions {
        is_causal: true,
        enable_gqa: true,
        ..Default::default()
    };
    let full = sdpa(
        &rope.apply(&q, 0).unwrap(),
        &rope.apply(&k, 0).unwrap(),
        &v,
        &o,
    )
    .unwrap();
    let mut cache = KvCache::new(1, hkv, 16, d, dt, dev).unwrap();
    let mut steps = Vec::new();
    let mut at = 0;
    for t in [5, 1, 1, 1, 1, 1, 1, 1] {
        let part = |x: &Tensor| x.narrow(2, at, t).unwrap();
        let y = no_grad(|| {
            let off = cache.len();
            cache.attend(
                &rope.apply(&part(&q), off)?,
                &rope.apply(&part(&k), off)?,
                &part(&v),
            )
        })
        .unwrap();
        steps.push(y);
        at += t;
        assert_eq!(cache.len(), at);
    }
    let got = Tensor::cat(&steps.iter().collect::<Vec<_>>(), 2).unwrap();
    assert_close(&read(&got), &read(&full), 1e-12, "cached vs full");
    assert_close(
        &read(&cache.values().unwrap()),
        &read(&v),
        0.0,
        "the cache holds the values",
    );
}

/// Appending a token writes into the buffers: not one allocation, not one
/// byte; the buffers stay where they are. On the CPU a cached attention
/// step (fused kernel) allocates its output and nothing else.
fn a_token_allocates_nothing_for_the_cache(dev: Device) {
    let _serial = common::serial();
    let dt = DType::F32;
    let (hq, hkv, d) = (8, 2, 64);
    let before = memory::memory_allocated(dev);
    let mut cache = KvCache::new(2, hkv, 256, d, dt, dev).unwrap();
    let buffer = round_size(2 * hkv * 256 * d * 4);
    assert_eq!(memory::memory_allocated(dev) - before, 2 * buffer);
    let ptr = cache.keys().unwrap().storage_ptr();
    let k = Tensor::randn(&[2, hkv, 1, d], dt, dev).unwrap();
    let v = Tensor::randn(&[2, hkv, 1, d], dt, dev).unwrap();
    let q = Tensor::randn(&[2, hq, 1, d], dt, dev).unwrap();
    no_grad(|| {
        for step in 0..100 {
            let (count, bytes) = (
                memory::memory_stats(dev).allocation.all.allocated,
                memory::memory_allocated(dev),
            );
            let (keys, values) = cache.append(&k, &v).unwrap();
            assert_eq!(keys.shape(), &[2, hkv, step + 1, d]);
            drop((keys, values));
            assert_eq!(
                memory::memory_stats(dev).allocation.all.allocated,
                count,
                "step {step}"
            );
            assert_eq!(memory::memory_allocated(dev), bytes, "step {step}");
        }
        if dev.is_cpu() {
            memory::reset_peak_memory_stats(dev);
            let (count, bytes) = (
                memory::memory_stats(dev).allocation.all.allocated,
                memory::memory_allocated(dev),
            );
            let y = cache.attend(&q, &k, &v).unwrap();
            assert_eq!(
                memory::memory_stats(dev).allocation.all.allocated,
                count + 1
            );
            assert_eq!(
                memory::max_memory_allocated(dev) - bytes,
                round_size(2 * hq * d * 4)
            );
            drop(y);
        }
    });
    assert_eq!(cache.keys().unwrap().storage_ptr(), ptr);
    assert_eq!(cache.len(), 101);
    cache.truncate(40).unwrap();
    assert_eq!(cache.keys().unwrap().shape(), &[2, hkv, 40, d]);
    cache.clear();
    assert!(cache.is_empty());
}

/// Overflow, shapes, dtypes, queries whose heads the cache's do not
/// divide, tensors that require grad: an `Err` naming the call, and the
/// cache unchanged.
fn errors_leave_the_cache_as_it_was(dev: Device) {
    let dt = DType::F32;
    let mut cache = KvCache::new(1, 2, 4, 8, dt, dev).unwrap();
    let t = |shape: &[usize], dt| Tensor::zeros(shape, dt, dev).unwrap();
    let (k3, v3) = (t(&[1, 2, 3, 8], dt), t(&[1, 2, 3, 8], dt));
    no_grad(|| cache.append(&k3, &v3)).unwrap();
    let err = |r: tensorscope::Result<Tensor>| r.unwrap_err().to_string();
    let e = err(no_grad(|| cache.append(&k3, &v3).map(|r| r.0)));
    assert!(
        e.starts_with("KvCache::append") && e.contains("cache overflow"),
        "{e}"
    );
    let e = err(no_grad(|| cache.attend(&t(&[1, 4, 3, 8], dt), &k3, &v3)));
    assert!(
        e.starts_with("KvCache::attend") && e.contains("overflow"),
        "{e}"
    );
    let k1 = t(&[1, 2, 1, 8], dt);
    for (what, r) in [
        (
            "heads",
            no_grad(|| cache.append(&t(&[1, 3, 1, 8], dt), &k1).map(|r| r.0)),
        ),
        (
            "head_dim",
            no_grad(|| cache.append(&k1, &t(&[1, 2, 1, 4], dt)).map(|r| r.0)),
        ),
        (
            "dtype",
            no_grad(|| {
                cache
                    .append(&t(&[1, 2, 1, 8], DType::F64), &k1)
                    .map(|r| r.0)
            }),
        ),
        (
            "q heads",
            no_grad(|| cache.attend(&t(&[1, 3, 1, 8], dt), &k1, &k1)),
        ),
        (
            "q length",
            no_grad(|| cache.attend(&t(&[1, 4, 2, 8], dt), &k1, &k1)),
        ),
    ] {
        let e = err(r);
        assert!(e.starts_with("KvCache"), "{what}: {e}");
    }
    let g = t(&[1, 2, 1, 8], dt).requires_grad_(true).unwrap();
    assert!(err(cache.append(&g, &k1).map(|r| r.0)).contains("no_grad"));
    assert!(cache.truncate(9).is_err());
    assert!(KvCache::new(1, 2, 4, 8, DType::I64, dev).is_err());
    assert_eq!(cache.len(), 3, "nothing was counted");
}

#[cfg(feature = "cuda")]
on_both!(
    decoding_equals_full_causal_attention,
    a_token_allocates_nothing_for_the_cache,
    errors_leave_the_cache_as_it_was,
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    decoding_equals_full_causal_attention,
    a_token_allocates_nothing_for_the_cache,
    errors_leave_the_cache_as_it_was,
);
