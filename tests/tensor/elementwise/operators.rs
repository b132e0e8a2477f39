//! operators

use super::*;

#[test]
fn operators_match_the_methods_and_return_results() {
    let _g = lock();
    let va = uniform(12, 77, -3.0, 3.0);
    let vb = uniform(4, 78, 0.5, 3.0);
    let a = make(&va, &[3, 4], DType::F32, Lay::Transposed);
    let b = make(&vb, &[4], DType::F32, Lay::Stepped);
    let pairs: [(Tensor, Tensor); 4] = [
        ((&a + &b).unwrap(), a.add(&b).unwrap()),
        ((&a - &b).unwrap(), a.sub(&b).unwrap()),
        ((&a * &b).unwrap(), a.mul(&b).unwrap()),
        ((&a / &b).unwrap(), a.div(&b).unwrap()),
    ];
    for (x, y) in &pairs {
        assert_eq!(read(x), read(y));
    }
    assert_eq!(read(&(-&a).unwrap()), read(&a.neg().unwrap()));
    assert_eq!(
        read(&(&a * 2.0).unwrap()),
        read(&a.mul_scalar(2.0).unwrap())
    );
    let r = (1.0 - &a).unwrap();
    let want: Vec<f64> = va
        .iter()
        .map(|&x| store(DType::F32, 1.0 - store(DType::F32, x)))
        .collect();
    assert_eq!(read(&r), want);
    let r = (2.0 / &b).unwrap();
    let want: Vec<f64> = vb
        .iter()
        .map(|&x| store(DType::F32, 2.0 / store(DType::F32, x)))
        .collect();
    assert_eq!(read(&r), want);
    // owned operands are consumed; the result is still a Result
    let c = (a.alias() + b.alias()).unwrap();
    assert_eq!(c.shape(), &[3, 4]);
    // bad input: an Err, never a panic
    let e = (&a + &Tensor::ones(&[3], DType::F32, CPU).unwrap()).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e}");
    let bools = Tensor::ones(&[2], DType::Bool, CPU).unwrap();
    assert!(matches!(
        &bools - &bools,
        Err(Error::DTypeMismatch { op: "sub", .. })
    ));
    assert!(matches!(
        1.0 - &bools,
        Err(Error::DTypeMismatch { op: "sub", .. })
    ));
    assert!(matches!(
        -&bools,
        Err(Error::DTypeMismatch { op: "neg", .. })
    ));
}
