//! The optimizers against numbers torch.optim printed (float64).

use super::*;

/// The optimizers against torch.optim in float64. The numbers were printed by
/// PyTorch 2.15.0 (CPU) with this script:
///
/// ```text
/// import torch
/// torch.set_default_dtype(torch.float64)
/// p0 = [0.5, -1.0, 2.0, 0.0, 1.5, -0.25]
/// grads = [[0.3, -0.2, 1.0, 0.05, -0.7, 0.4],
///          [-0.1, 0.25, 0.5, -0.3, 0.2, 0.0],
///          [0.02, -0.6, -0.1, 0.4, 0.05, 0.9]]
/// cases = {
///   "adam": (torch.optim.Adam, dict(lr=0.1)),
///   "adam_all": (torch.optim.Adam, dict(lr=0.1, betas=(0.3, 0.9), eps=1e-3, weight_decay=0.1, amsgrad=True, maximize=True)),
///   "adamw_ams": (torch.optim.AdamW, dict(lr=0.1, weight_decay=0.5, amsgrad=True)),
///   "sgd_mom": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.2, weight_decay=0.05, maximize=True)),
///   "sgd_nesterov": (torch.optim.SGD, dict(lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.05)),
/// }
/// for name, (cls, kw) in cases.items():
///     p = torch.nn.Parameter(torch.tensor(p0).reshape(2, 3))
///     opt = cls([p], **kw)
///     out = []
///     for g in grads:
///         p.grad = torch.tensor(g).reshape(2, 3)
///         opt.step()
///         out.append(p.detach().flatten().tolist())
///     print(name, [[repr(x) for x in r] for r in out])
/// ```
#[test]
fn matches_torch_optim_fixture() {
    let _l = lock();
    const P0: [f64; 6] = [0.5, -1.0, 2.0, 0.0, 1.5, -0.25];
    const G: [[f64; 6]; 3] = [
        [0.3, -0.2, 1.0, 0.05, -0.7, 0.4],
        [-0.1, 0.25, 0.5, -0.3, 0.2, 0.0],
        [0.02, -0.6, -0.1, 0.4, 0.05, 0.9],
    ];
    type Want = [[f64; 6]; 3];
    let adam: Want = [
        [
            0.4000000033333332,
            -0.9000000049999998,
            1.900000001,
            -0.09999998000000399,
            1.5999999985714286,
            -0.34999999750000005,
        ],
        [
            0.35997814792808075,
            -0.9162732304481741,
            1.806782038298161,
            -0.03760811625382157,
            1.6439728025770168,
            -0.41700582054404756,
        ],
        [
            0.32506696968844956,
            -0.8658234296791494,
            1.740707399161892,
            -0.059287630263029766,
            1.6735025940551407,
            -0.49640962447179504,
        ],
    ];
    let adam_all: Want = [
        [
            0.599601593625498,
            -1.099009900990099,
            2.099875156054931,
            0.09803921568627451,
            1.400117508813161,
            -0.15023474178403756,
        ],
        [
            0.568262554656889,
            -1.005374142281058,
            2.168927132920462,
            -0.00125916430556533,
            1.3758306359383927,
            -0.11479221731191958,
        ],
        [
            0.5426123948524444,
            -1.082709911438832,
            2.1465335803610706,
            0.07254567090435281,
            1.3555154418144992,
            -0.0006652211061898838,
        ],
    ];
    let adamw_ams: Want = [
        [
            0.37500000333333317,
            -0.8500000049999997,
            1.800000001,
            -0.09999998000000399,
            1.5249999985714284,
            -0.33749999750000004,
        ],
        [
            0.31622814776141406,
            -0.8237732301981741,
            1.6167820382481608,
            -0.03260811725382137,
            1.4927228026484451,
            -0.38759730937879167,
        ],
        [
            0.2655055621337121,
            -0.7321347679192405,
            1.4698682971994836,
            -0.0526572254003385,
            1.4476164539941467,
            -0.44762124783759955,
        ],
    ];
    let sgd_mom: Want = [
        [0.5275, -1.015, 2.09, 0.005000000000000001, 1.4225, -0.20875],
        [
            0.54214,
            -1.00444,
            2.2026399999999997,
            -0.014519999999999998,
            1.3630600000000002,
            -0.17079,
        ],
        [
            0.55474744,
            -1.03891824,
            2.2872054399999997,
            -2.991999999999498e-05,
            1.30811176,
            -0.06394283999999999,
        ],
    ];
    let sgd_nesterov: Want = [
        [
            0.4415,
            -0.955,
            1.802,
            -0.009000000000000001,
            1.6125,
            -0.31975,
        ],
        [
            0.4347265,
            -0.975405,
            1.625382,
            0.041881,
            1.6019875000000001,
            -0.34167225,
        ],
        [
            0.4155611615,
            -0.858770355,
            1.534667162,
            -0.013827129000000007,
            1.5926096125000002,
            -0.51941399975,
        ],
    ];
    type Make = fn() -> Box<dyn Optimizer>;
    let cases: [(&str, Make, Want); 5] = [
        (
            "adam",
            || {
                Box::new(
                    Adam::new(AdamConfig {
                        lr: 0.1,
                        ..Default::default()
                    })
                    .unwrap(),
                )
            },
            adam,
        ),
        (
            "adam_all",
            || {
                Box::new(
                    Adam::new(AdamConfig {
                        lr: 0.1,
                        betas: (0.3, 0.9),
                        eps: 1e-3,
                        weight_decay: 0.1,
                        amsgrad: true,
                        maximize: true,
                    })
                    .unwrap(),
                )
            },
            adam_all,
        ),
        (
            "adamw_ams",
            || {
                Box::new(
                    AdamW::new(AdamConfig {
                        lr: 0.1,
                        weight_decay: 0.5,
                        amsgrad: true,
                        ..Default::default()
                    })
                    .unwrap(),
                )
            },
            adamw_ams,
        ),
        (
            "sgd_mom",
            || {
                Box::new(
                    Sgd::new(SgdConfig {
                        lr: 0.1,
                        momentum: 0.9,
                        dampening: 0.2,
                        weight_decay: 0.05,
                        maximize: true,
                        ..Default::default()
                    })
                    .unwrap(),
                )
            },
            sgd_mom,
        ),
        (
            "sgd_nesterov",
            || {
                Box::new(
                    Sgd::new(SgdConfig {
                        lr: 0.1,
                        momentum: 0.8,
                        nesterov: true,
                        weight_decay: 0.05,
                        ..Default::default()
                    })
                    .unwrap(),
                )
            },
            sgd_nesterov,
        ),
    ];
    for (name, make_opt, want) in cases {
        for (dt, tol) in [(DType::F64, 1e-14), (DType::F32, 1e-6)] {
            let mut opt = make_opt();
            let p = Tensor::from_slice(&P0, &[2, 3], CPU)
                .unwrap()
                .to_dtype(dt)
                .unwrap()
                .requires_grad_(true)
                .unwrap();
            let mut model = Params(vec![("p".into(), p)]);
            for (t, g) in G.iter().enumerate() {
                let g = Tensor::from_slice(g, &[2, 3], CPU)
                    .unwrap()
                    .to_dtype(dt)
                    .unwrap();
                model.0[0].1.set_grad(Some(g)).unwrap();
                opt.step(&mut model).unwrap();
                assert_close(
                    &format!("{name} {dt} step {}", t + 1),
                    &logical(&model.0[0].1),
                    &want[t],
                    tol,
                );
            }
        }
    }
}
