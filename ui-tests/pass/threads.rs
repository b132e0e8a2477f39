// Threads: an owned `Tensor` is `Send`; a scoped tensor's `&Tensor` can be
// read from scoped threads (`Tensor: Sync`); a moved-out tensor can be sent.
use tensorscope::{scope, DType, Device, Result, Tensor};

pub fn main() -> Result<()> {
    let t = Tensor::ones(&[8], DType::F32, Device::Cpu)?;
    let n = std::thread::spawn(move || t.numel()).join().unwrap();
    assert_eq!(n, 8);
    scope(|s| -> Result<()> {
        let x = s.ones(&[8], DType::F32, Device::Cpu)?;
        let r: &Tensor = &x;
        std::thread::scope(|ts| {
            ts.spawn(move || assert_eq!(r.numel(), 8));
        });
        let owned = s.move_out(x);
        let m = std::thread::spawn(move || owned.numel()).join().unwrap();
        assert_eq!(m, 8);
        Ok(())
    })
}
