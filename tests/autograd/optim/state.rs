//! `Optimizer::state_dict` / `load_state_dict`: a fresh optimizer loaded
//! from a state continues exactly as the one that saved it; a bad state is
//! an `Err` that changes nothing; optimizers without the feature say so.

use super::{fixed_grads, lock, set_grads, vals, Mlp};
use tensorscope::nn::Module;
use tensorscope::optim::{
    Adam, AdamConfig, AdamW, Optimizer, RMSprop, RMSpropConfig, Sgd, SgdConfig,
};
use tensorscope::{DType, Tensor};

fn steps(model: &mut Mlp, opt: &mut dyn Optimizer, from: usize, to: usize) {
    for s in from..to {
        set_grads(model, &fixed_grads(model, s));
        opt.step(model).unwrap();
    }
}

fn weights(m: &Mlp) -> Vec<Vec<f64>> {
    m.parameters().iter().map(|p| vals(p)).collect()
}

/// 3 steps, save, a fresh optimizer loads, 3 more: as 6 in a row.
fn resumes(make: &dyn Fn() -> Box<dyn Optimizer>, keys: usize) {
    let mut a = Mlp::new(5, 7, 3, DType::F32, 1);
    let mut oa = make();
    steps(&mut a, oa.as_mut(), 0, 6);
    let mut b = Mlp::new(5, 7, 3, DType::F32, 1);
    let mut ob = make();
    steps(&mut b, ob.as_mut(), 0, 3);
    let state = ob.state_dict().unwrap();
    assert_eq!(
        state.len(),
        keys,
        "{:?}",
        state.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    // The state is a copy: later steps do not change it.
    let before: Vec<Vec<f64>> = state.iter().map(|(_, t)| vals(t)).collect();
    steps(&mut b, ob.as_mut(), 3, 4);
    let after: Vec<Vec<f64>> = state.iter().map(|(_, t)| vals(t)).collect();
    assert_eq!(before, after);
    let mut b = Mlp::new(5, 7, 3, DType::F32, 1);
    steps(&mut b, make().as_mut(), 0, 3);
    let mut oc = make();
    oc.load_state_dict(&state).unwrap();
    steps(&mut b, oc.as_mut(), 3, 6);
    assert_eq!(weights(&b), weights(&a));
}

#[test]
fn a_loaded_state_continues_as_the_saved_one() {
    let _l = lock();
    let adam = |amsgrad| AdamConfig {
        lr: 1e-2,
        amsgrad,
        ..Default::default()
    };
    resumes(&|| Box::new(Adam::new(adam(false)).unwrap()), 4 * 3);
    resumes(&|| Box::new(Adam::new(adam(true)).unwrap()), 4 * 4);
    resumes(&|| Box::new(AdamW::new(adam(false)).unwrap()), 4 * 3);
    let sgd = SgdConfig {
        lr: 1e-2,
        momentum: 0.9,
        ..Default::default()
    };
    resumes(&|| Box::new(Sgd::new(sgd).unwrap()), 4);
    resumes(
        &|| {
            Box::new(
                Sgd::new(SgdConfig {
                    momentum: 0.0,
                    ..sgd
                })
                .unwrap(),
            )
        },
        0,
    );
}

#[test]
fn a_bad_state_is_an_err_that_changes_nothing() {
    let _l = lock();
    let mut m = Mlp::new(5, 7, 3, DType::F32, 1);
    let mut opt = Adam::new(AdamConfig::default()).unwrap();
    steps(&mut m, &mut opt, 0, 2);
    let good = opt.state_dict().unwrap();
    let drop_key = |k: &str| -> Vec<(String, Tensor)> {
        good.iter()
            .filter(|(n, _)| n != k)
            .map(|(n, t)| (n.clone(), t.alias()))
            .collect()
    };
    let with = |k: &str, t: Tensor| -> Vec<(String, Tensor)> {
        let mut v = drop_key(k);
        v.push((k.to_string(), t));
        v
    };
    let cpu = tensorscope::Device::Cpu;
    let cases: Vec<(Vec<(String, Tensor)>, &str)> = vec![
        (drop_key("w1.exp_avg_sq"), "lacks one of step"),
        (
            with("w1.step", Tensor::from_slice(&[-1i64], &[], cpu).unwrap()),
            "step count",
        ),
        (
            with(
                "w1.exp_avg_sq",
                Tensor::zeros(&[2], DType::F32, cpu).unwrap(),
            ),
            "differ",
        ),
        (
            with(
                "w1.max_exp_avg_sq",
                Tensor::zeros(&[5, 7], DType::F32, cpu).unwrap(),
            ),
            "no buffer",
        ),
        (
            with("nodot", Tensor::zeros(&[1], DType::F32, cpu).unwrap()),
            "is not",
        ),
    ];
    for (state, needle) in cases {
        let e = opt.load_state_dict(&state).unwrap_err().to_string();
        assert!(
            e.starts_with("Adam::load_state_dict") && e.contains(needle),
            "{needle}: {e}"
        );
        let now: Vec<Vec<f64>> = opt
            .state_dict()
            .unwrap()
            .iter()
            .map(|(_, t)| vals(t))
            .collect();
        let was: Vec<Vec<f64>> = good.iter().map(|(_, t)| vals(t)).collect();
        assert_eq!(now, was, "{needle}: nothing changed");
    }
    let mut sgd = Sgd::new(SgdConfig::default()).unwrap();
    let e = sgd.load_state_dict(&good).unwrap_err().to_string();
    assert!(
        e.starts_with("Sgd::load_state_dict") && e.contains("without momentum"),
        "{e}"
    );
    let mut rms = RMSprop::new(RMSpropConfig::default()).unwrap();
    let e = rms.state_dict().unwrap_err().to_string();
    assert!(e.contains("cannot save its state yet"), "{e}");
    assert!(rms.load_state_dict(&good).is_err());
}
