// A loader batch's field view used after the batch is dropped.
//
// `Batch::field` borrows the batch, whose ring slot goes back to the loader
// (to be overwritten by a worker) when the batch is dropped: the view
// cannot outlive it. `Batch::to_owned` gives copies that may.
use std::sync::Arc;
use tensorscope::data::{DataLoader, TensorDataset};
use tensorscope::{DType, Device, Tensor};

fn main() {
    let x = Tensor::zeros(&[8, 2], DType::F32, Device::Cpu).unwrap();
    let ds = Arc::new(TensorDataset::new(vec![x]).unwrap());
    let mut loader = DataLoader::builder(ds).batch_size(4).build().unwrap();
    let mut epoch = loader.epoch();
    let batch = epoch.next().unwrap().unwrap();
    let view = batch.field(0).unwrap();
    drop(batch);
    println!("{:?}", view.shape());
}
