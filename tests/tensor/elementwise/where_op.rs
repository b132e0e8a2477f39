//! where

use super::*;

#[test]
fn where_cond_broadcasts_promotes_and_walks_any_layout() {
    let _g = lock();
    let mut seed = 3000;
    for da in ALL {
        for db in [DType::F32, DType::I64, da] {
            for (lc, la) in LAY_PAIRS {
                seed += 3;
                let (sc, sa, sb) = (&[4usize, 1][..], &[4usize, 5][..], &[5usize][..]);
                let vc = ints(4, seed, 0, 1);
                let st = |d: DType, v: Vec<f64>| v.iter().map(|&x| store(d, x)).collect::<Vec<_>>();
                let va = st(da, data_for(da, 20, seed + 1, -9.0, 9.0));
                let vb = st(db, data_for(db, 5, seed + 2, -9.0, 9.0));
                let c = make(&vc, sc, DType::Bool, lc);
                let a = make(&va, sa, da, la);
                let b = make(&vb, sb, db, Lay::Stepped);
                let ctx = format!("where {da}/{la:?} {db} cond {lc:?}");
                let r = Tensor::where_cond(&c, &a, &b).expect(&ctx);
                let rdt = promote(da, db);
                assert_eq!(r.dtype(), rdt, "{ctx}");
                assert_eq!(r.shape(), &[4, 5], "{ctx}");
                let want: Vec<f64> = (0..20)
                    .map(|k| {
                        let (i, j) = (k / 5, k % 5);
                        store(rdt, if vc[i] != 0.0 { va[k] } else { vb[j] })
                    })
                    .collect();
                assert_exact(&read(&r), &want, &ctx);
            }
        }
    }
    let c = Tensor::ones(&[2], DType::F32, CPU).unwrap();
    let e = Tensor::where_cond(&c, &c, &c).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "where", .. }), "{e}");
}
