// Two batches of one epoch alive at once.
//
// A batch borrows its epoch until it is dropped, so the loop cannot ask for
// the next batch while it still holds one: the ring's slot count is the
// loader's to manage, not the loop's.
use std::sync::Arc;
use tensorscope::data::{DataLoader, TensorDataset};
use tensorscope::{DType, Device, Tensor};

fn main() {
    let x = Tensor::zeros(&[8, 2], DType::F32, Device::Cpu).unwrap();
    let ds = Arc::new(TensorDataset::new(vec![x]).unwrap());
    let mut loader = DataLoader::builder(ds).batch_size(4).build().unwrap();
    let mut epoch = loader.epoch();
    let first = epoch.next().unwrap().unwrap();
    let second = epoch.next().unwrap().unwrap();
    println!("{} {}", first.len(), second.len());
}
