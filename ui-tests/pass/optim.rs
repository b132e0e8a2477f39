// The correct order: edit by hand (under no_grad) before or after a step,
// never during one; read parameters again after the step.
use tensorscope::nn::Module;
use tensorscope::optim::{Optimizer, Sgd, SgdConfig};
use tensorscope::{DType, Device, Result, Tensor};

struct Model {
    w: Tensor,
}

impl Module for Model {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.mul(&self.w)
    }
    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        vec![("w".into(), &self.w)]
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![("w".into(), &mut self.w)]
    }
}

pub fn main() {
    let w = Tensor::ones(&[3], DType::F32, Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let mut model = Model { w };
    let mut opt = Sgd::new(SgdConfig {
        lr: 0.1,
        ..Default::default()
    })
    .unwrap();
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], Device::Cpu).unwrap();
    model
        .forward(&x)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    opt.step(&mut model).unwrap();
    let p = &mut model.w;
    tensorscope::autograd::no_grad(|| p.add_scalar_(1.0).map(|_| ())).unwrap();
    opt.zero_grad(&model);
    assert_eq!(model.w.to_vec::<f32>().unwrap(), vec![1.9, 1.8, 1.7]);
}
