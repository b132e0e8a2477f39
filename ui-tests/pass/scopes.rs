// What scopes allow: `?` inside, results moved out as owned tensors, moves to
// an enclosing scope, outer handles used as operands in an inner scope, and
// in-place ops on a scoped tensor.
use tensorscope::{scope, DType, Device, Result, Tensor};

fn step(x: &Tensor) -> Result<Tensor> {
    scope(|s| {
        let h = s.keep(x.mul_scalar(2.0)?);
        let mut a = s.keep(h.relu()?);
        a.add_scalar_(1.0)?;
        Ok(s.move_out(a))
    })
}

pub fn main() -> Result<()> {
    let x = Tensor::ones(&[4], DType::F32, Device::Cpu)?;
    let y = step(&x)?;
    let total = scope(|outer| -> Result<Tensor> {
        let w = outer.full(&[4], 0.5, DType::F32, Device::Cpu)?;
        let mut kept = Vec::new();
        for _ in 0..3 {
            scope(|inner| -> Result<()> {
                let t = inner.keep(y.mul(&w)?); // `w` is the outer scope's
                kept.push(inner.move_to(t, outer));
                Ok(())
            })?;
        }
        let mut acc = outer.zeros(&[4], DType::F32, Device::Cpu)?;
        for k in &kept {
            acc.add_(k)?;
        }
        Ok(outer.move_out(acc))
    })?;
    assert_eq!(total.to_vec::<f32>()?, [4.5; 4]);
    Ok(())
}
