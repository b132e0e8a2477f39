//! The lazy safetensors dataset: samples read from a memory-mapped file
//! equal the tensors written, through the loader too; bad files are
//! errors naming the file at `open`; a file truncated or rewritten after
//! `open` is an error naming the sample and the file, not a `SIGBUS`; a
//! file replaced by renaming keeps being read from the old pages.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tensorscope::data::{DataLoader, Dataset, SafetensorsDataset};
use tensorscope::nn::save_tensors;
use tensorscope::{DType, Device, Error, Tensor};

/// A fresh path in the temp directory for test `name`.
fn temp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "tensorscope_test_{}_{name}.safetensors",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// `n` samples: x f32 [3, 2] (x[i][j] = 6 i + j), y i64 (y[i] = -i),
/// h bf16 [2] (i / 4, exact in bf16 for small i).
fn write(path: &PathBuf, n: usize) -> (Tensor, Tensor, Tensor) {
    let x = Tensor::arange(0.0, (n * 6) as f64, 1.0, DType::F32, Device::Cpu)
        .unwrap()
        .view(&[n as isize, 3, 2])
        .unwrap();
    let y = Tensor::arange(0.0, -(n as f64), -1.0, DType::I64, Device::Cpu).unwrap();
    let h = Tensor::arange(0.0, n as f64, 0.5, DType::F32, Device::Cpu)
        .unwrap()
        .mul_scalar(0.5)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap()
        .view(&[n as isize, 2])
        .unwrap();
    save_tensors(&[("x", &x), ("y", &y), ("h", &h)], path).unwrap();
    (x, y, h)
}

#[test]
fn samples_read_from_the_mapping_equal_what_was_written() {
    let _shared = crate::common::shared();
    let path = temp("roundtrip");
    let n = 37;
    let (x, y, h) = write(&path, n);
    let ds = Arc::new(SafetensorsDataset::open(&path, &["y", "x", "h"]).unwrap());
    assert_eq!(ds.len(), n);
    assert_eq!(ds.path(), path.as_path());
    let f = ds.fields();
    assert_eq!(
        (f[0].name.as_str(), f[0].shape.as_slice(), f[0].dtype),
        ("y", &[][..], DType::I64)
    );
    assert_eq!(
        (f[1].shape.as_slice(), f[1].dtype),
        (&[3, 2][..], DType::F32)
    );
    assert_eq!((f[2].shape.as_slice(), f[2].dtype), (&[2][..], DType::BF16));
    // Shuffled, through workers, on a ring: every sample once, each row
    // equal to the written tensors' row.
    let mut l = DataLoader::builder(ds.clone())
        .batch_size(8)
        .shuffle(3)
        .num_workers(2)
        .build()
        .unwrap();
    let mut seen = vec![false; n];
    let mut e = l.epoch();
    while let Some(b) = e.next() {
        let b = b.unwrap();
        for (r, &i) in b.indices().iter().enumerate() {
            assert!(!seen[i]);
            seen[i] = true;
            let row = |t: &Tensor| t.narrow(0, i, 1).unwrap().squeeze();
            let got = |k: usize| b.field(k).unwrap().narrow(0, r, 1).unwrap().squeeze();
            assert_eq!(
                got(0).to_vec::<i64>().unwrap(),
                row(&y).to_vec::<i64>().unwrap()
            );
            assert_eq!(
                got(1).to_vec::<f32>().unwrap(),
                row(&x).to_vec::<f32>().unwrap()
            );
            assert_eq!(
                got(2)
                    .to_dtype(DType::F32)
                    .unwrap()
                    .to_vec::<f32>()
                    .unwrap(),
                row(&h)
                    .to_dtype(DType::F32)
                    .unwrap()
                    .to_vec::<f32>()
                    .unwrap()
            );
        }
    }
    drop(e);
    assert!(seen.iter().all(|&s| s));
    // An index past the end, and a slot for other fields.
    let mut b = [0u8; 8];
    let mut bufs = [&mut b[..]];
    let fields = [tensorscope::data::Field::new("y", &[], DType::I64)];
    let mut slot = tensorscope::data::Slot::new(&fields, &mut bufs).unwrap();
    let err = ds.get(0, &mut slot).unwrap_err();
    assert!(err.to_string().contains("SafetensorsDataset::get"), "{err}");
    let ds_y = SafetensorsDataset::open(&path, &["y"]).unwrap();
    let err = ds_y.get(n, &mut slot).unwrap_err();
    assert!(matches!(err, Error::IndexOutOfRange { .. }), "{err}");
    ds_y.get(5, &mut slot).unwrap();
    assert_eq!(i64::from_ne_bytes(b), -5);
    std::fs::remove_file(&path).unwrap();
}

/// The message of `open`'s error for a file holding `bytes`.
fn open_error(name: &str, bytes: &[u8], fields: &[&str]) -> String {
    let path = temp(name);
    std::fs::write(&path, bytes).unwrap();
    let e = SafetensorsDataset::open(&path, fields).err().unwrap();
    std::fs::remove_file(&path).unwrap();
    let msg = e.to_string();
    assert!(
        msg.contains("SafetensorsDataset::open") && msg.contains(&name.to_string()),
        "{msg}"
    );
    msg
}

/// A safetensors file by hand: the JSON header, then `data`.
fn by_hand(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

#[test]
fn bad_files_are_errors_naming_the_file_at_open() {
    let _shared = crate::common::shared();
    let e = SafetensorsDataset::open(temp("absent"), &["x"])
        .err()
        .unwrap();
    assert!(e.to_string().contains("absent"), "{e}");
    assert!(open_error("empty", b"", &["x"]).contains("header"));
    assert!(open_error("garbage", &[0xff; 64], &["x"]).contains("header"));
    let good = by_hand(
        r#"{"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"y":{"dtype":"I64","shape":[3],"data_offsets":[16,40]}}"#,
        &[0u8; 40],
    );
    // Truncated: checked against the header before mapping.
    let msg = open_error("truncated", &good[..good.len() - 4], &["x"]);
    assert!(msg.contains("truncated"), "{msg}");
    let msg = open_error("missing", &good, &["x", "z"]);
    assert!(msg.contains("\"z\"") && msg.contains("\"y\""), "{msg}");
    let msg = open_error("lengths", &good, &["x", "y"]);
    assert!(msg.contains("3 samples") && msg.contains("has 2"), "{msg}");
    let msg = open_error("nofields", &good, &[]);
    assert!(msg.contains("no fields"), "{msg}");
    let scalar = by_hand(
        r#"{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}"#,
        &[0u8; 4],
    );
    assert!(open_error("scalar", &scalar, &["s"]).contains("scalar"));
    let u16s = by_hand(
        r#"{"u":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}}"#,
        &[0u8; 4],
    );
    assert!(open_error("dtype", &u16s, &["u"]).contains("U16"));
    // save_tensors: one name twice, and a path that cannot be written.
    let x = Tensor::zeros(&[2], DType::F32, Device::Cpu).unwrap();
    let e = save_tensors(&[("a", &x), ("a", &x)], temp("dup")).unwrap_err();
    assert!(e.to_string().contains("save_tensors") && e.to_string().contains("\"a\""));
    let e = save_tensors(&[("a", &x)], "/nonexistent-dir/x.safetensors").unwrap_err();
    assert!(e.to_string().contains("save_tensors") && e.to_string().contains("nonexistent-dir"));
}

/// The first error of an epoch over `ds`, and the samples read before it.
fn first_error(ds: Arc<SafetensorsDataset>) -> (usize, Error) {
    let mut l = DataLoader::builder(ds)
        .batch_size(4)
        .num_workers(1)
        .build()
        .unwrap();
    let mut e = l.epoch();
    let mut ok = 0;
    loop {
        match e.next() {
            Some(Ok(b)) => ok += b.len(),
            Some(Err(err)) => return (ok, err),
            None => panic!("no error"),
        }
    }
}

#[test]
fn a_file_changed_after_open_is_an_error_naming_the_sample_and_the_file() {
    let _shared = crate::common::shared();
    // Truncated under the mapping: reading the lost pages would be a SIGBUS.
    let path = temp("shrunk");
    write(&path, 64);
    let ds = Arc::new(SafetensorsDataset::open(&path, &["x", "y"]).unwrap());
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(200).unwrap();
    let (ok, err) = first_error(ds);
    assert_eq!(ok, 0);
    let msg = err.to_string();
    assert!(matches!(err, Error::Data { index: 0, .. }), "{msg}");
    assert!(
        msg.contains("sample 0") && msg.contains("shrunk") && msg.contains("changed"),
        "{msg}"
    );
    // Rewritten in place (same length, new time).
    let path2 = temp("rewritten");
    write(&path2, 64);
    let ds = Arc::new(SafetensorsDataset::open(&path2, &["x"]).unwrap());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path2)
        .unwrap();
    f.write_all(&[0u8; 8]).unwrap();
    f.set_modified(SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    drop(f);
    let (_, err) = first_error(ds);
    assert!(err.to_string().contains("modified"), "{err}");
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&path2).unwrap();
}

#[test]
fn a_file_replaced_by_renaming_is_still_read_from_the_old_pages() {
    let _shared = crate::common::shared();
    let path = temp("renamed");
    write(&path, 16);
    let ds = SafetensorsDataset::open(&path, &["y"]).unwrap();
    // The new version, written aside and renamed over the old one.
    let aside = temp("renamed_new");
    let z = Tensor::zeros(&[4], DType::I64, Device::Cpu).unwrap();
    save_tensors(&[("y", &z)], &aside).unwrap();
    std::fs::rename(&aside, &path).unwrap();
    let mut b = [0u8; 8];
    let mut bufs = [&mut b[..]];
    let mut slot = ds.slot(&mut bufs).unwrap();
    ds.get(9, &mut slot).unwrap();
    assert_eq!(i64::from_ne_bytes(b), -9, "the old file's sample");
    assert_eq!(SafetensorsDataset::open(&path, &["y"]).unwrap().len(), 4);
    std::fs::remove_file(&path).unwrap();
}
