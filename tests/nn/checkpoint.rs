//! `Checkpoint`: memory-mapped safetensors files as name -> tensor, sharded
//! checkpoints, and loads by prefix, strict or not, with hooks, that
//! allocate nothing for tensors of the parameter's dtype.

use crate::common;
use common::Params;
use std::path::{Path, PathBuf};
use tensorscope::memory::{
    mapped_memory, max_memory_allocated, memory_allocated, reset_peak_memory_stats,
};
use tensorscope::nn::{
    load_state_dict_with, save_tensors, Checkpoint, LoadOptions, LoadReport, Module,
};
use tensorscope::{DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorscope_ckpt_{name}_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ramp(shape: &[usize], start: f64, dt: DType) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::arange(start, start + n as f64, 1.0, DType::F64, CPU)
        .unwrap()
        .view(&shape.iter().map(|&d| d as isize).collect::<Vec<_>>())
        .unwrap()
        .to_dtype(dt)
        .unwrap()
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

/// A two-parameter model: `w [4, 3]`, `b [4]`, zeros.
fn model(dt: DType) -> Params {
    Params(vec![
        ("w".into(), Tensor::zeros(&[4, 3], dt, CPU).unwrap()),
        ("b".into(), Tensor::zeros(&[4], dt, CPU).unwrap()),
    ])
}

#[test]
fn a_file_opens_as_names_shapes_and_zero_copy_tensors() {
    let _serial = common::serial();
    let d = dir("open");
    let path = d.join("m.safetensors");
    let w = ramp(&[4, 3], 0.0, DType::F32);
    let ids = Tensor::from_vec(vec![3i64, 1, 4], &[3], CPU).unwrap();
    save_tensors(&[("enc.w", &w), ("ids", &ids)], &path).unwrap();

    let ckpt = Checkpoint::open(&path).unwrap();
    assert_eq!(ckpt.len(), 2);
    assert_eq!(ckpt.names().collect::<Vec<_>>(), ["enc.w", "ids"]);
    let info = ckpt.info("enc.w").unwrap();
    assert_eq!(
        (info.shape, info.dtype),
        (&[4usize, 3][..], Some(DType::F32))
    );
    assert_eq!(ckpt.nbytes(), 12 * 4 + 3 * 8);

    let (before, mapped) = (memory_allocated(CPU), mapped_memory());
    let mut t = ckpt.get("enc.w").unwrap();
    let i = ckpt.get("ids").unwrap();
    assert_eq!(
        memory_allocated(CPU),
        before,
        "tensors over the mapping take no allocator bytes"
    );
    assert_eq!(mapped_memory() - mapped, 12 * 4 + 3 * 8);
    assert_eq!(f32s(&t), f32s(&w));
    assert_eq!(i.to_vec::<i64>().unwrap(), [3, 1, 4]);

    // An in-place write changes this tensor's own pages: neither the file
    // nor another tensor read from the same name.
    tensorscope::autograd::no_grad(|| t.add_scalar_(100.0).map(|_| ())).unwrap();
    assert_eq!(f32s(&t)[0], 100.0);
    assert_eq!(f32s(&ckpt.get("enc.w").unwrap()), f32s(&w));
    let again = Checkpoint::open(&path).unwrap();
    assert_eq!(f32s(&again.get("enc.w").unwrap()), f32s(&w));

    let h = ckpt.get_as("enc.w", DType::BF16, CPU).unwrap();
    assert_eq!(h.dtype(), DType::BF16);
    assert_eq!(f32s(&h), f32s(&w.to_dtype(DType::BF16).unwrap()));

    let e = ckpt.get("enc.v").unwrap_err().to_string();
    assert!(
        e.contains("Checkpoint::get") && e.contains("\"enc.v\"") && e.contains("\"enc.w\""),
        "{e}"
    );
    drop((t, i, h));
    assert_eq!(mapped_memory(), mapped, "each mapping goes with its tensor");
    drop((ckpt, again));
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn saving_over_a_mapped_file_keeps_the_tensors_alive_over_it() {
    let _shared = common::shared();
    let d = dir("resave");
    let path = d.join("m.safetensors");
    let w = ramp(&[256, 64], 0.0, DType::F32);
    save_tensors(&[("w", &w)], &path).unwrap();
    let ckpt = Checkpoint::open(&path).unwrap();
    let t = ckpt.get("w").unwrap();
    drop(ckpt);
    // A smaller file at the same path: written elsewhere and renamed, so the
    // mapping behind `t` still reads the old file (no SIGBUS, same values).
    save_tensors(
        &[("w", &Tensor::zeros(&[2], DType::F32, CPU).unwrap())],
        &path,
    )
    .unwrap();
    assert_eq!(f32s(&t), f32s(&w));
    assert_eq!(
        Checkpoint::open(&path).unwrap().info("w").unwrap().shape,
        &[2]
    );
    let leftovers: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary file left behind");
    std::fs::remove_dir_all(&d).ok();
}

/// A safetensors file written by hand: `tensors` as (name, dtype, shape,
/// bytes), at the offsets given by their order.
fn write_raw(path: &Path, tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) {
    let mut header = String::from("{");
    let mut off = 0;
    for (k, (name, dt, shape, b)) in tensors.iter().enumerate() {
        if k > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            "\"{name}\":{{\"dtype\":\"{dt}\",\"shape\":{shape:?},\"data_offsets\":[{off},{}]}}",
            off + b.len()
        ));
        off += b.len();
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    for (_, _, _, b) in tensors {
        out.extend_from_slice(b);
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn misaligned_and_bool_tensors_are_copied_right() {
    let _shared = common::shared();
    let d = dir("raw");
    let path = d.join("raw.safetensors");
    let vals = [1.5f32, -2.0, 3.25];
    write_raw(
        &path,
        &[
            ("flags", "BOOL", vec![3], vec![0, 1, 2]),
            // Starts 3 bytes into the data: not 4-byte aligned.
            (
                "x",
                "F32",
                vec![3],
                vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            ("q", "I8", vec![1], vec![7]),
        ],
    );
    let ckpt = Checkpoint::open(&path).unwrap();
    assert_eq!(ckpt.get("x").unwrap().to_vec::<f32>().unwrap(), vals);
    assert_eq!(
        ckpt.get("flags").unwrap().to_vec::<bool>().unwrap(),
        [false, true, true]
    );
    let info = ckpt.info("q").unwrap();
    assert_eq!((info.dtype, info.file_dtype.as_str()), (None, "I8"));
    let e = ckpt.get("q").unwrap_err().to_string();
    assert!(e.contains("\"q\" has dtype I8"), "{e}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn bad_files_are_errors_naming_the_file() {
    let _shared = common::shared();
    let d = dir("bad");
    let good = d.join("good.safetensors");
    save_tensors(&[("w", &ramp(&[8], 0.0, DType::F32))], &good).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let cut = d.join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() - 4]).unwrap();
    let junk = d.join("junk.safetensors");
    std::fs::write(&junk, b"\x05\x00\x00\x00\x00\x00\x00\x00{oops").unwrap();
    for (p, needle) in [
        (cut.clone(), "(truncated)"),
        (junk.clone(), "malformed"),
        (d.join("none.safetensors"), "none.safetensors"),
        (
            d.clone(),
            "a folder without model.safetensors.index.json or model.safetensors",
        ),
    ] {
        let e = Checkpoint::open(&p).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Backend {
                    op: "Checkpoint::open",
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains(needle),
            "{e}\n  should contain {needle}"
        );
    }
    // The same tensor name in two files.
    let e = Checkpoint::open_files(&[&good, &good])
        .unwrap_err()
        .to_string();
    assert!(e.contains("tensor \"w\" is also in"), "{e}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_sharded_folder_opens_through_its_index() {
    let _shared = common::shared();
    let d = dir("shards");
    let (w, b) = (ramp(&[4, 3], 1.0, DType::F32), ramp(&[4], 50.0, DType::F32));
    save_tensors(&[("w", &w)], d.join("model-00001-of-00002.safetensors")).unwrap();
    save_tensors(&[("b", &b)], d.join("model-00002-of-00002.safetensors")).unwrap();
    let index = r#"{"metadata": {"total_size": 64},
        "weight_map": {"w": "model-00001-of-00002.safetensors",
                       "b": "model-00002-of-00002.safetensors"}}"#;
    std::fs::write(d.join("model.safetensors.index.json"), index).unwrap();

    for p in [d.clone(), d.join("model.safetensors.index.json")] {
        let ckpt = Checkpoint::open(&p).unwrap();
        assert_eq!(ckpt.files().len(), 2);
        let mut m = model(DType::F32);
        let report = ckpt.load_into(&mut m, &LoadOptions::new()).unwrap();
        assert_eq!(
            report,
            LoadReport {
                loaded: 2,
                ..LoadReport::default()
            }
        );
        assert_eq!(f32s(&m.0[0].1), f32s(&w));
        assert_eq!(f32s(&m.0[1].1), f32s(&b));
    }

    // An index that names a tensor its shard lacks.
    let wrong = index.replace(r#""b": "model-00002"#, r#""c": "model-00002"#);
    std::fs::write(d.join("model.safetensors.index.json"), wrong).unwrap();
    let e = Checkpoint::open(&d).unwrap_err().to_string();
    assert!(
        e.contains("the index names tensors its shards lack: \"c\""),
        "{e}"
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_load_allocates_nothing_and_converts_dtypes() {
    let _serial = common::serial();
    let d = dir("peak");
    let path = d.join("m.safetensors");
    let (w, b) = (ramp(&[4, 3], 1.0, DType::F32), ramp(&[4], -2.0, DType::F32));
    save_tensors(&[("w", &w), ("b", &b)], &path).unwrap();
    let ckpt = Checkpoint::open(&path).unwrap();

    for dt in [DType::F32, DType::BF16, DType::F64] {
        let mut m = model(dt);
        let base = memory_allocated(CPU);
        reset_peak_memory_stats(CPU);
        ckpt.load_into(&mut m, &LoadOptions::new()).unwrap();
        assert_eq!(
            max_memory_allocated(CPU),
            base,
            "{dt}: copied from the mapping straight into the parameters"
        );
        assert_eq!(m.0[0].1.dtype(), dt);
        assert_eq!(f32s(&m.0[0].1), f32s(&w.to_dtype(dt).unwrap()));
        assert_eq!(f32s(&m.0[1].1), f32s(&b.to_dtype(dt).unwrap()));
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn prefix_strictness_and_hooks_follow_load_state_dict() {
    let _shared = common::shared();
    let d = dir("opts");
    let path = d.join("m.safetensors");
    // `w` stored transposed, as GPT-2's Conv1D stores `[in, out]`.
    let wt = ramp(&[3, 4], 0.0, DType::F32);
    let b = ramp(&[4], 9.0, DType::F32);
    let extra = ramp(&[2], 0.0, DType::F32);
    save_tensors(
        &[
            ("transformer.lin.w", &wt),
            ("transformer.lin.bias", &b),
            ("transformer.extra", &extra),
            ("lm_head.w", &extra),
        ],
        &path,
    )
    .unwrap();
    let ckpt = Checkpoint::open(&path).unwrap();

    // Strict: the missing and the unexpected keys (under the prefix) and
    // the shape, all in one error; nothing written.
    let mut m = model(DType::F32);
    let opts = LoadOptions::new()
        .prefix("transformer.")
        .rename(|n| format!("lin.{n}"));
    let e = ckpt.load_into(&mut m, &opts).unwrap_err().to_string();
    for needle in [
        "Checkpoint::load_into",
        "missing keys [\"transformer.lin.b\"]",
        "unexpected keys [\"transformer.extra\", \"transformer.lin.bias\"]",
        "\"transformer.lin.w\" (parameter \"w\"): shape [3, 4] in the checkpoint, [4, 3] in the model",
    ] {
        assert!(e.contains(needle), "{e}\n  should contain {needle}");
    }
    assert!(
        !e.contains("lm_head"),
        "keys outside the prefix are not unexpected: {e}"
    );
    assert_eq!(f32s(&m.0[0].1), vec![0.0; 12], "nothing written");

    // Not strict, with the transpose and the bias renamed: reported, loaded.
    let opts = LoadOptions::new()
        .prefix("transformer.")
        .strict(false)
        .rename(|n| {
            if n == "b" {
                "lin.bias".into()
            } else {
                format!("lin.{n}")
            }
        })
        .transform(|name, t| if name == "w" { t.t() } else { Ok(t) });
    let report = ckpt.load_into(&mut m, &opts).unwrap();
    assert_eq!(
        report,
        LoadReport {
            missing_keys: vec![],
            unexpected_keys: vec!["transformer.extra".into()],
            loaded: 2
        }
    );
    assert_eq!(f32s(&m.0[0].1), f32s(&wt.t().unwrap()));
    assert_eq!(f32s(&m.0[1].1), f32s(&b));

    // A missing parameter keeps its value when not strict.
    let mut m2 = Params(vec![
        (
            "lin.w".into(),
            Tensor::zeros(&[3, 4], DType::F32, CPU).unwrap(),
        ),
        (
            "lin.gamma".into(),
            Tensor::ones(&[4], DType::F32, CPU).unwrap(),
        ),
    ]);
    let report = ckpt
        .load_into(
            &mut m2,
            &LoadOptions::new().prefix("transformer.").strict(false),
        )
        .unwrap();
    assert_eq!(report.missing_keys, ["transformer.lin.gamma"]);
    assert_eq!(report.loaded, 1);
    assert_eq!(f32s(&m2.0[1].1), vec![1.0; 4]);

    // The same options over an in-memory state dict.
    let sd: Vec<(String, Tensor)> = ckpt
        .names()
        .map(|n| (n.to_string(), ckpt.get(n).unwrap()))
        .collect();
    let mut m3 = model(DType::F32);
    let r3 = load_state_dict_with(&mut m3, &sd, &opts).unwrap();
    assert_eq!(r3.unexpected_keys, ["transformer.extra"]);
    assert_eq!(r3.loaded, 2);
    assert_eq!(f32s(&m3.0[0].1), f32s(&wt.t().unwrap()));

    // A failing transform is listed with the rest.
    let bad = LoadOptions::new()
        .prefix("transformer.")
        .strict(false)
        .rename(|n| format!("lin.{n}"))
        .transform(|_, t| t.view(&[5]));
    let e = ckpt
        .load_into(&mut model(DType::F32), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("the transform failed"), "{e}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_module_parameter_list_loads_like_pytorch_names_it() {
    // `Module` names (`0.weight`) are the keys, as PyTorch's `state_dict`.
    let _shared = common::shared();
    let d = dir("seq");
    let path = d.join("m.safetensors");
    let mut net = tensorscope::nn::Sequential::new();
    net.add(tensorscope::nn::Linear::new(3, 2).unwrap());
    let w = ramp(&[2, 3], 0.0, DType::F32);
    let b = ramp(&[2], 7.0, DType::F32);
    save_tensors(&[("0.weight", &w), ("0.bias", &b)], &path).unwrap();
    Checkpoint::open(&path)
        .unwrap()
        .load_into(&mut net, &LoadOptions::new())
        .unwrap();
    let p = net.named_parameters();
    assert_eq!(f32s(p[0].1), f32s(&w));
    assert_eq!(f32s(p[1].1), f32s(&b));
    std::fs::remove_dir_all(&d).ok();
}

/// A load into a model on `dev`, converting f32 to bf16 on the way: the
/// values PyTorch's `param.copy_(value)` gives, and a device peak of at most
/// one parameter's bytes above the model's (a staged copy).
fn a_checkpoint_loads_into_a_model_on_its_device(dev: Device) {
    let d = dir(&format!("dev_{}", dev.is_cuda()));
    let path = d.join("m.safetensors");
    let (w, b) = (
        ramp(&[64, 48], 1.0, DType::F32),
        ramp(&[64], -2.0, DType::F32),
    );
    save_tensors(&[("w", &w), ("b", &b)], &path).unwrap();
    let ckpt = Checkpoint::open(&path).unwrap();
    for dt in [DType::F32, DType::BF16] {
        let mut m = Params(vec![
            ("w".into(), Tensor::zeros(&[64, 48], dt, dev).unwrap()),
            ("b".into(), Tensor::zeros(&[64], dt, dev).unwrap()),
        ]);
        let base = memory_allocated(dev);
        reset_peak_memory_stats(dev);
        ckpt.load_into(&mut m, &LoadOptions::new()).unwrap();
        let largest = tensorscope::memory::round_size(64 * 48 * 4);
        assert!(
            max_memory_allocated(dev) - base <= largest,
            "{dev} {dt}: peak {} above the model's {base}",
            max_memory_allocated(dev) - base
        );
        assert_eq!(m.0[0].1.device(), dev);
        assert_eq!(
            f32s(&m.0[0].1.to_device(CPU).unwrap()),
            f32s(&w.to_dtype(dt).unwrap())
        );
        assert_eq!(
            f32s(&m.0[1].1.to_device(CPU).unwrap()),
            f32s(&b.to_dtype(dt).unwrap())
        );
        let g = ckpt.get_as("w", dt, dev).unwrap();
        assert_eq!((g.device(), g.dtype()), (dev, dt));
        assert_eq!(
            f32s(&g.to_device(CPU).unwrap()),
            f32s(&w.to_dtype(dt).unwrap())
        );
    }
    drop(ckpt);
    std::fs::remove_dir_all(&d).ok();
}

/// A model's tensors fetched onto `dev` with `get_as`: the device peaks at
/// their bytes exactly (at most 1.1x is the issue's bound) when the dtype
/// is the file's, and at their bytes plus the largest file-dtype upload
/// when converting; on CUDA the pinned staging blocks are all returned
/// once the copies have run; on the CPU a same-dtype fetch allocates
/// nothing (the mapping).
fn get_as_peaks_at_the_parameters(dev: Device) {
    let d = dir(&format!("staged_{}", dev.is_cuda()));
    let path = d.join("m.safetensors");
    let shapes: [&[usize]; 3] = [&[256, 128], &[128], &[64, 256]];
    let ts: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| ramp(s, i as f64, DType::F32))
        .collect();
    let named: Vec<(String, &Tensor)> = ts
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("t{i}"), t))
        .collect();
    let refs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    save_tensors(&refs, &path).unwrap();
    let ckpt = Checkpoint::open(&path).unwrap();
    let round = tensorscope::memory::round_size;
    for dt in [DType::F32, DType::BF16] {
        let pinned_before = pinned(dev);
        let base = memory_allocated(dev);
        reset_peak_memory_stats(dev);
        let got: Vec<Tensor> = (0..3)
            .map(|i| ckpt.get_as(&format!("t{i}"), dt, dev).unwrap())
            .collect();
        let want: usize = if dev.is_cpu() && dt == DType::F32 {
            0
        } else {
            shapes
                .iter()
                .map(|s| round(s.iter().product::<usize>() * dt.size_in_bytes()))
                .sum()
        };
        assert_eq!(memory_allocated(dev) - base, want, "{dev} {dt}: what stays");
        let staging = if dt == DType::F32 || dev.is_cpu() {
            0
        } else {
            round(256 * 128 * 4)
        };
        assert!(
            max_memory_allocated(dev) - base <= want + staging,
            "{dev} {dt}: peak"
        );
        assert!((want as f64) * 1.1 >= (max_memory_allocated(dev) - base - staging) as f64);
        for (g, t) in got.iter().zip(&ts) {
            assert_eq!(
                f32s(&g.to_device(CPU).unwrap()),
                f32s(&t.to_dtype(dt).unwrap())
            );
        }
        assert_eq!(
            pinned(dev),
            pinned_before,
            "{dev} {dt}: staging blocks returned"
        );
    }
    drop(ckpt);
    std::fs::remove_dir_all(&d).ok();
}

/// The pinned allocator's bytes handed out (0 without CUDA).
#[cfg(feature = "cuda")]
fn pinned(dev: Device) -> usize {
    if dev.is_cuda() {
        tensorscope::backend::cuda::pinned_memory_stats().allocated_bytes
    } else {
        0
    }
}

#[cfg(not(feature = "cuda"))]
fn pinned(_: Device) -> usize {
    0
}

#[cfg(feature = "cuda")]
common::devices::on_both!(
    a_checkpoint_loads_into_a_model_on_its_device,
    get_as_peaks_at_the_parameters
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    a_checkpoint_loads_into_a_model_on_its_device,
    get_as_peaks_at_the_parameters
);

#[test]
fn a_duplicate_key_is_listed_with_the_other_problems() {
    let _shared = common::shared();
    let sd = vec![
        ("w".to_string(), ramp(&[4, 3], 0.0, DType::F32)),
        ("w".to_string(), ramp(&[4, 3], 1.0, DType::F32)),
        ("b".to_string(), ramp(&[5], 0.0, DType::F32)),
    ];
    let mut m = model(DType::F32);
    let e = load_state_dict_with(&mut m, &sd, &LoadOptions::new())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("duplicate key \"w\"") && e.contains("\"b\": shape [5] in the checkpoint"),
        "{e}"
    );
    assert_eq!(f32s(&m.0[0].1), vec![0.0; 12], "nothing written");
}
