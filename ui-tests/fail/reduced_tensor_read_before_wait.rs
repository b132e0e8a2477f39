// A tensor being reduced in the background belongs to its `Work` until
// `wait` gives it back: reading it before then does not compile.
use tensorscope::distributed::{ProcessGroup, ReduceOp};
use tensorscope::{DType, Device, Tensor};

fn main() -> tensorscope::Result<()> {
    let pg = ProcessGroup::single();
    let grad = Tensor::ones(&[4], DType::F32, Device::Cpu)?;
    let work = pg.all_reduce_async(grad, ReduceOp::Sum)?;
    let early = grad.to_vec::<f32>()?;
    let grad = work.wait()?;
    println!("{early:?} {grad:?}");
    Ok(())
}
