//! Issue 49 item 3: `GradScaler` against PyTorch 2.15's on one sequence
//! with injected infs and NaNs (tests/fixtures/grad_scaler.py: the same
//! steps skipped, the same scales, the same weights), its fused pass
//! allocating nothing after the first step, its state through a
//! checkpoint, clipping after `unscale_`, and its errors.

use super::*;
use tensorscope::optim::{clip_grad_value_, GradScaler, GradScalerConfig};

/// One parameter `w` of `dev`, [1, 2, 3, 4].
fn model(dev: Device) -> Params {
    let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4], dev).unwrap();
    Params(vec![("w".into(), w.requires_grad_(true).unwrap())])
}

/// `sum(w * c)`.
fn loss(m: &Params, c: &[f32]) -> Tensor {
    let c = Tensor::from_slice(c, &[4], m.0[0].1.device()).unwrap();
    m.0[0].1.mul(&c).unwrap().sum_all().unwrap()
}

fn sgd() -> Sgd {
    Sgd::new(SgdConfig {
        lr: 0.125,
        ..Default::default()
    })
    .unwrap()
}

/// Parses `repr(float)` (`inf`, `-inf`, `nan` included).
fn num(s: &str) -> f32 {
    s.parse::<f32>().unwrap()
}

fn the_torch_sequence(dev: Device) {
    let text = include_str!("../../fixtures/grad_scaler.txt");
    let mut m = model(dev);
    let mut opt = sgd();
    let mut scaler = GradScaler::with_config(GradScalerConfig {
        growth_interval: 3,
        ..Default::default()
    })
    .unwrap();
    let mut rows = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (head, c) = line.split_once('|').unwrap();
        let f: Vec<&str> = head.split_whitespace().collect();
        let c: Vec<f32> = c.split_whitespace().map(num).collect();
        opt.zero_grad(&m);
        scaler.scale(&loss(&m, &c)).unwrap().backward().unwrap();
        let stepped = scaler.step(&mut opt, &mut m).unwrap();
        scaler.update().unwrap();
        assert_eq!(stepped, f[1] == "1", "step {}: stepped", f[0]);
        assert_eq!(
            scaler.scale_factor(),
            num(f[2]) as f64,
            "step {}: scale",
            f[0]
        );
        let w: Vec<f32> = f[3..7].iter().map(|s| num(s)).collect();
        assert_eq!(m.0[0].1.to_vec::<f32>().unwrap(), w, "step {}: w", f[0]);
        rows += 1;
    }
    assert_eq!(rows, 13);
}

/// After the first step (which makes the found-inf flag), unscaling,
/// stepping and updating allocate nothing.
fn steps_after_the_first_allocate_nothing(dev: Device) {
    let mut m = model(dev);
    let mut opt = sgd();
    let mut scaler = GradScaler::new();
    scaler
        .scale(&loss(&m, &[1.0; 4]))
        .unwrap()
        .backward()
        .unwrap();
    scaler.step(&mut opt, &mut m).unwrap();
    scaler.update().unwrap();
    for _ in 0..3 {
        // The scaled loss and its backward are the caller's allocations.
        let l = scaler.scale(&loss(&m, &[1.0; 4])).unwrap();
        drop(l);
        let s = memory::memory_stats(dev).allocation.all.allocated;
        scaler.unscale_(&opt, &m).unwrap();
        assert!(scaler.step(&mut opt, &mut m).unwrap());
        scaler.update().unwrap();
        assert_eq!(
            memory::memory_stats(dev).allocation.all.allocated,
            s,
            "allocations in a scaler step"
        );
    }
}

/// `unscale_` gives the true gradients, so clipping sees them; `step`
/// then does not unscale again.
fn clip_after_unscale(dev: Device) {
    let mut m = model(dev);
    let mut opt = sgd();
    let mut scaler = GradScaler::new();
    scaler
        .scale(&loss(&m, &[1.0, -2.0, 3.0, -4.0]))
        .unwrap()
        .backward()
        .unwrap();
    scaler.unscale_(&opt, &m).unwrap();
    assert_eq!(
        m.0[0].1.grad().unwrap().to_vec::<f32>().unwrap(),
        [1.0, -2.0, 3.0, -4.0]
    );
    clip_grad_value_(&m, 2.5).unwrap();
    assert!(scaler.step(&mut opt, &mut m).unwrap());
    let want = [1.0 - 0.125, 2.0 + 0.25, 3.0 - 0.3125, 4.0 + 0.3125];
    assert_eq!(m.0[0].1.to_vec::<f32>().unwrap(), want);
}

/// Every misuse is an `Err` naming the call, and changes nothing.
fn misuse_is_an_error(dev: Device) {
    let mut m = model(dev);
    let mut opt = sgd();
    let mut scaler = GradScaler::new();
    let msg = |r: Result<()>| r.unwrap_err().to_string();
    // No scaled backward.
    loss(&m, &[1.0; 4]).backward().unwrap();
    let e = scaler.step(&mut opt, &mut m).unwrap_err().to_string();
    assert!(
        e.contains("GradScaler::step") && e.contains("scaled backward"),
        "{e}"
    );
    assert_eq!(
        m.0[0].1.grad().unwrap().to_vec::<f32>().unwrap(),
        [1.0; 4],
        "nothing unscaled"
    );
    assert!(msg(scaler.update()).contains("no inf checks"));
    // unscale_ twice, then step twice.
    opt.zero_grad(&m);
    scaler
        .scale(&loss(&m, &[1.0; 4]))
        .unwrap()
        .backward()
        .unwrap();
    scaler.unscale_(&opt, &m).unwrap();
    let e = msg(scaler.unscale_(&opt, &m));
    assert!(
        e.contains("GradScaler::unscale_") && e.contains("already been called"),
        "{e}"
    );
    assert_eq!(
        m.0[0].1.grad().unwrap().to_vec::<f32>().unwrap(),
        [1.0; 4],
        "unscaled once"
    );
    scaler.step(&mut opt, &mut m).unwrap();
    assert!(scaler
        .step(&mut opt, &mut m)
        .unwrap_err()
        .to_string()
        .contains("already been called"));
    assert!(msg(scaler.unscale_(&opt, &m)).contains("after step()"));
    scaler.update().unwrap();
    // No gradient at all; a non-float loss.
    opt.zero_grad(&m);
    scaler.scale(&loss(&m, &[1.0; 4])).unwrap();
    assert!(msg(scaler.unscale_(&opt, &m)).contains("no parameter"));
    let ints = Tensor::ones(&[1], DType::I64, dev).unwrap();
    assert!(scaler.scale(&ints).is_err());
    // Bad options.
    for cfg in [
        GradScalerConfig {
            init_scale: 0.0,
            ..Default::default()
        },
        GradScalerConfig {
            growth_factor: 1.0,
            ..Default::default()
        },
        GradScalerConfig {
            backoff_factor: 1.0,
            ..Default::default()
        },
        GradScalerConfig {
            growth_interval: 0,
            ..Default::default()
        },
    ] {
        assert!(GradScaler::with_config(cfg).is_err(), "{cfg:?}");
    }
}

/// The state goes through a checkpoint file under PyTorch's keys and comes
/// back; a disabled scaler steps every time and scales nothing.
fn state_through_a_checkpoint_and_disabled(dev: Device) {
    let mut m = model(dev);
    let mut opt = sgd();
    let mut scaler = GradScaler::with_config(GradScalerConfig {
        growth_interval: 5,
        ..Default::default()
    })
    .unwrap();
    for c in [
        [1.0f32; 4],
        [f32::INFINITY, 0.0, 0.0, 0.0],
        [1.0; 4],
        [1.0; 4],
    ] {
        opt.zero_grad(&m);
        scaler.scale(&loss(&m, &c)).unwrap().backward().unwrap();
        scaler.step(&mut opt, &mut m).unwrap();
        scaler.update().unwrap();
    }
    assert_eq!(
        (scaler.scale_factor(), scaler.growth_tracker()),
        (32768.0, 2)
    );
    let state = scaler.state_dict().unwrap();
    let names: Vec<&str> = state.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "scale",
            "growth_factor",
            "backoff_factor",
            "growth_interval",
            "_growth_tracker"
        ]
    );
    let dir = std::env::temp_dir().join(format!(
        "ts-grad-scaler-{}-{}.safetensors",
        std::process::id(),
        dev.device_type()
    ));
    let refs: Vec<(&str, &Tensor)> = state.iter().map(|(n, t)| (n.as_str(), t)).collect();
    tensorscope::nn::save_tensors(&refs, &dir).unwrap();
    let ck = tensorscope::nn::Checkpoint::open(&dir).unwrap();
    let back: Vec<(String, Tensor)> = names
        .iter()
        .map(|&n| (n.to_string(), ck.get(n).unwrap().deep_clone().unwrap()))
        .collect();
    drop(ck);
    std::fs::remove_file(&dir).ok();
    let mut fresh = GradScaler::new();
    fresh.load_state_dict(&back).unwrap();
    assert_eq!((fresh.scale_factor(), fresh.growth_tracker()), (32768.0, 2));
    assert!(fresh.load_state_dict(&back[..2]).is_err(), "a missing key");
    assert_eq!(
        fresh.scale_factor(),
        32768.0,
        "a refused state changes nothing"
    );
    let mut off = GradScaler::with_config(GradScalerConfig {
        enabled: false,
        ..Default::default()
    })
    .unwrap();
    opt.zero_grad(&m);
    let l = loss(&m, &[1.0; 4]);
    let s = off.scale(&l).unwrap();
    assert_eq!(s.item::<f32>().unwrap(), l.item::<f32>().unwrap());
    s.backward().unwrap();
    assert!(off.step(&mut opt, &mut m).unwrap());
    off.update().unwrap();
    assert_eq!(off.scale_factor(), 1.0);
}

common::on_devices!(
    the_torch_sequence,
    steps_after_the_first_allocate_nothing,
    clip_after_unscale,
    misuse_is_an_error,
    state_through_a_checkpoint_and_disabled,
);
