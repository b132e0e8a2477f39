use std::time::Instant;
use tensorscope::{DType, Device, Tensor};

fn main() {
    let n = 1 << 22;
    let mut rows = Vec::new();
    for dt in [DType::F32, DType::F16] {
        let x = Tensor::randn(&[n], DType::F32, Device::Cpu).unwrap().to_dtype(dt).unwrap();
        let ops: [(&str, fn(&Tensor) -> tensorscope::Result<Tensor>); 7] = [
            ("relu", Tensor::relu),
            ("neg", Tensor::neg),
            ("abs", Tensor::abs),
            ("square", Tensor::square),
            ("exp", Tensor::exp),
            ("sigmoid", Tensor::sigmoid),
            ("tanh", Tensor::tanh),
        ];
        for (name, f) in ops {
            for _ in 0..3 {
                f(&x).unwrap();
            }
            let mut t = Vec::new();
            for _ in 0..21 {
                let s = Instant::now();
                std::hint::black_box(f(&x).unwrap());
                t.push(s.elapsed().as_secs_f64());
            }
            t.sort_by(|a, b| a.partial_cmp(b).unwrap());
            rows.push(format!("{name} {dt}: {:.3} ms", t[10] * 1e3));
        }
    }
    for r in rows {
        println!("{r}");
    }
}
