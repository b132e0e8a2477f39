// The parameter list kept across a step.
//
// `parameters()` returns references into the model; keeping them while
// `step` updates the model is a shared borrow overlapping a mutable one.
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

fn main() {
    let w = Tensor::ones(&[3], DType::F32, Device::Cpu).unwrap().requires_grad_(true).unwrap();
    let mut model = Model { w };
    let mut opt = Sgd::new(SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    let params = model.parameters();
    opt.step(&mut model).unwrap();
    println!("{}", params.len());
}
