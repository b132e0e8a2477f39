//! Issue 17 item 4, first part: the modules and the errors of the
//! activations and losses added as compositions (their values and
//! gradients against PyTorch are in the differential suite).

use tensorscope::nn::{
    binary_cross_entropy, huber_loss, kl_div, l1_loss, nll_loss, smooth_l1_loss, GeluApproximate,
    Hardswish, LeakyReLU, Mish, Module, Sequential, SiLU, Softplus, ELU, GELU,
};

#[cfg(feature = "cuda")]
use crate::common::devices::on_both;
use tensorscope::{DType, Device, Tensor};

const CPU: Device = Device::Cpu;

#[test]
fn modules_apply_their_function_with_pytorchs_defaults() {
    let _shared = crate::common::shared();
    let x = Tensor::from_slice(&[-2.0f32, -0.5, 0.0, 1.5], &[4], CPU).unwrap();
    let same = |m: &dyn Module, want: Tensor| {
        assert_eq!(
            m.forward(&x).unwrap().to_vec::<f32>().unwrap(),
            want.to_vec::<f32>().unwrap()
        )
    };
    same(&LeakyReLU::default(), x.leaky_relu(0.01).unwrap());
    same(&ELU::default(), x.elu(1.0).unwrap());
    same(&Mish::default(), x.mish().unwrap());
    same(&Hardswish::default(), x.hardswish().unwrap());
    same(&SiLU, x.silu().unwrap());
    same(&Softplus, x.softplus().unwrap());
    assert_eq!(LeakyReLU::default().negative_slope, 0.01);
    // In a Sequential, with a parameterised one.
    let mut net = Sequential::new();
    net.add(LeakyReLU {
        negative_slope: 0.5,
    })
    .add(SiLU);
    let y = net.forward(&x).unwrap().to_vec::<f32>().unwrap();
    let want = x
        .leaky_relu(0.5)
        .unwrap()
        .silu()
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(y, want);
}

#[test]
fn bad_inputs_are_errors_naming_the_op() {
    let _shared = crate::common::shared();
    let i = Tensor::from_slice(&[1i64, 2], &[2], CPU).unwrap();
    for (name, e) in [
        ("leaky_relu", i.leaky_relu(0.1).unwrap_err()),
        ("elu", i.elu(1.0).unwrap_err()),
        ("mish", i.mish().unwrap_err()),
        ("hardswish", i.hardswish().unwrap_err()),
    ] {
        assert!(e.to_string().contains(name), "{e}");
    }
    let a = Tensor::zeros(&[2, 3], DType::F32, CPU).unwrap();
    let b = Tensor::zeros(&[3, 2], DType::F32, CPU).unwrap();
    for (name, e) in [
        ("l1_loss", l1_loss(&a, &b).unwrap_err()),
        ("smooth_l1_loss", smooth_l1_loss(&a, &b, 1.0).unwrap_err()),
        ("huber_loss", huber_loss(&a, &b, 1.0).unwrap_err()),
        ("kl_div", kl_div(&a, &b).unwrap_err()),
        (
            "binary_cross_entropy",
            binary_cross_entropy(&a, &b).unwrap_err(),
        ),
        ("smooth_l1_loss", smooth_l1_loss(&a, &a, -1.0).unwrap_err()),
        ("huber_loss", huber_loss(&a, &a, f64::NAN).unwrap_err()),
    ] {
        let m = e.to_string();
        assert!(m.contains(name), "{m}");
    }
    assert!(l1_loss(&a, &b).unwrap_err().to_string().contains("[3, 2]"));
    // nll_loss: shapes, a float target, a class out of range.
    let lp = Tensor::zeros(&[2, 3], DType::F32, CPU).unwrap();
    let t = Tensor::from_slice(&[0i64, 5], &[2], CPU).unwrap();
    assert!(nll_loss(&lp, &t)
        .unwrap_err()
        .to_string()
        .contains("nll_loss"));
    let tf = Tensor::zeros(&[2], DType::F32, CPU).unwrap();
    assert!(nll_loss(&lp, &tf)
        .unwrap_err()
        .to_string()
        .contains("class indices"));
    let t3 = Tensor::from_slice(&[0i64, 1, 2], &[3], CPU).unwrap();
    assert!(nll_loss(&lp, &t3)
        .unwrap_err()
        .to_string()
        .contains("[2, 3]"));
    // BCE on values outside [0, 1].
    let p = Tensor::from_slice(&[0.5f32, 1.5], &[2], CPU).unwrap();
    let y = Tensor::from_slice(&[0.0f32, 1.0], &[2], CPU).unwrap();
    let e = binary_cross_entropy(&p, &y).unwrap_err().to_string();
    assert!(
        e.contains("binary_cross_entropy") && e.contains("1.5"),
        "{e}"
    );
}

fn edge_values_follow_pytorch(dev: Device) {
    // smooth L1 with beta 0 is L1; BCE at p = 0 and 1 clamps its logs at -100.
    let a = Tensor::from_slice(&[0.0f32, 1.0, -3.0], &[3], dev).unwrap();
    let b = Tensor::zeros(&[3], DType::F32, dev).unwrap();
    assert_eq!(
        smooth_l1_loss(&a, &b, 0.0).unwrap().item::<f32>().unwrap(),
        l1_loss(&a, &b).unwrap().item::<f32>().unwrap()
    );
    let p = Tensor::from_slice(&[0.0f32, 1.0], &[2], dev).unwrap();
    let y = Tensor::from_slice(&[1.0f32, 0.0], &[2], dev).unwrap();
    assert_eq!(
        binary_cross_entropy(&p, &y).unwrap().item::<f32>().unwrap(),
        100.0
    );
    // KL where the target is 0 contributes 0, not NaN.
    let input = Tensor::from_slice(&[-1.0f32, -2.0], &[2], dev).unwrap();
    let t = Tensor::from_slice(&[0.0f32, 1.0], &[2], dev).unwrap();
    assert_eq!(kl_div(&input, &t).unwrap().item::<f32>().unwrap(), 1.0);
}

fn grad_at(dev: Device, x: f64, f: impl Fn(&Tensor) -> tensorscope::Result<Tensor>) -> f64 {
    let t = Tensor::from_slice(&[x], &[1], dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    f(&t).unwrap().sum_all().unwrap().backward().unwrap();
    t.grad().unwrap().to_vec::<f64>().unwrap()[0]
}

/// Gradients where a composite's pieces meet, as PyTorch 2.15's kernels
/// give them: ELU at 0 is alpha; hardswish at -3 and 3 is -0.5 and 1.5;
/// KL's target gradient where the target is 0 is 0; BCE at p = 0 and 1 is
/// finite (deviation 15 says how it differs).
fn gradients_at_the_joins_are_pytorchs(dev: Device) {
    assert_eq!(grad_at(dev, 0.0, |x| x.elu(0.7)), 0.7);
    assert_eq!(grad_at(dev, 3.0, |x| x.hardswish()), 1.5);
    assert_eq!(grad_at(dev, -3.0, |x| x.hardswish()), -0.5);
    assert_eq!(grad_at(dev, -3.5, |x| x.hardswish()), 0.0);
    let input = Tensor::from_slice(&[-1.0f32, -2.0], &[2], dev).unwrap();
    let t = Tensor::from_slice(&[0.0f32, 1.0], &[2], dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    kl_div(&input, &t).unwrap().backward().unwrap();
    let g = t.grad().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(g[0], 0.0);
    assert!(g[1].is_finite());
    for p in [0.0, 1.0] {
        let g = grad_at(dev, p, |x| {
            let y = Tensor::from_slice(&[0.5f64], &[1], dev)?;
            binary_cross_entropy(x, &y)
        });
        assert!(g.is_finite(), "p = {p}: {g}");
    }
    // huber's delta must be positive.
    let a = Tensor::zeros(&[2], DType::F32, dev).unwrap();
    assert!(huber_loss(&a, &a, 0.0)
        .unwrap_err()
        .to_string()
        .contains("huber_loss"));
}

/// `GELU` computes the form it is given (PyTorch's `approximate`), bit for
/// bit the tensor op's, and overwrites an owned input in place: no bytes
/// allocated. An unknown form is an error naming the module and the string.
fn gelu_module_forms(dev: Device) {
    let _serial = crate::common::serial();
    let vals = [-3.0f32, -1.0, -0.25, 0.0, 0.5, 2.0, 4.0, 7.5];
    let x = Tensor::from_slice(&vals, &[2, 4], Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let tanh = GELU::new("tanh").unwrap();
    assert_eq!(tanh.approximate, GeluApproximate::Tanh);
    assert_eq!(GELU::new("none").unwrap(), GELU);
    assert_eq!(GELU::default(), GELU);
    let v = |t: &Tensor| t.to_vec::<f32>().unwrap();
    let (exact, approx) = (v(&x.gelu().unwrap()), v(&x.gelu_tanh().unwrap()));
    assert_ne!(exact, approx, "the two forms differ at these points");
    assert_eq!(v(&GELU.forward(&x).unwrap()), exact);
    assert_eq!(v(&tanh.forward(&x).unwrap()), approx);
    for (m, want) in [(GELU, &exact), (tanh, &approx)] {
        let owned = x.deep_clone().unwrap();
        let before = tensorscope::memory::memory_allocated(dev);
        let y = m.forward_owned(owned).unwrap();
        assert_eq!(tensorscope::memory::memory_allocated(dev), before);
        assert_eq!(&v(&y), want);
    }
    let e = GELU::new("sigmoid").unwrap_err().to_string();
    assert!(e.contains("GELU") && e.contains("sigmoid"), "{e}");
}

#[cfg(feature = "cuda")]
on_both!(
    edge_values_follow_pytorch,
    gradients_at_the_joins_are_pytorchs,
    gelu_module_forms,
);

#[cfg(not(feature = "cuda"))]
mod cpu {
    use tensorscope::Device;
    #[test]
    fn edge_values_follow_pytorch() {
        let _shared = crate::common::shared();
        super::edge_values_follow_pytorch(Device::Cpu)
    }
    #[test]
    fn gradients_at_the_joins_are_pytorchs() {
        let _shared = crate::common::shared();
        super::gradients_at_the_joins_are_pytorchs(Device::Cpu)
    }
    #[test]
    fn gelu_module_forms() {
        super::gelu_module_forms(Device::Cpu)
    }
}
