//! Memory history and snapshots (issue 16): every allocator event is
//! recorded with the op, module path and scope that caused it, in a
//! bounded ring; recording changes nothing the allocator does; a snapshot's
//! segments account for exactly the allocator's statistics; the pickle has
//! the layout of `torch.cuda.memory._snapshot()` (the committed fixture in
//! `tests/fixtures/memory/` was read by PyTorch's `_memory_viz`); and
//! `measure` reports a closure's peak, deltas and allocation count.

#[cfg(feature = "cuda")]
use crate::common::devices::on_both;
use serde_pickle::value::{HashableValue, Value};
use tensorscope::memory::{self, Action, BlockState};
use tensorscope::nn::{Linear, Module, ReLU, Sequential};
use tensorscope::{DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;

/// The CPU allocator is process-wide: every test here holds this.
fn lock() -> crate::common::Guard {
    crate::common::serial()
}

/// Recording off however the test ends.
struct Off;
impl Drop for Off {
    fn drop(&mut self) {
        memory::record_history(CPU, false, 0).unwrap();
    }
}

/// Recording off on `.0` however the test ends.
struct OffOn(Device);
impl Drop for OffOn {
    fn drop(&mut self) {
        memory::record_history(self.0, false, 0).unwrap();
    }
}

fn events_carry_their_op_module_path_and_scope(dev: Device) {
    let _l = lock();
    let _off = OffOn(dev);
    memory::record_history(dev, true, 100_000).unwrap();
    let x = Tensor::zeros(&[64, 32], DType::F32, dev).unwrap();
    let addr_x = {
        let s = memory::snapshot(dev).unwrap();
        let e = s.trace.last().unwrap();
        assert_eq!(
            (e.action, e.op, e.size),
            (Action::Alloc, Some("zeros"), 8192)
        );
        e.addr
    };
    let mut net = Sequential::new();
    net.add(Linear::new(32, 16).unwrap())
        .add(ReLU)
        .add(Linear::new(16, 4).unwrap());
    net.to_device(dev).unwrap();
    let y = {
        let _s = memory::scope("eval");
        net.forward(&x).unwrap()
    };
    // x is saved by the first layer's autograd node: freed with y's graph.
    drop(y);
    drop(x);
    let s = memory::snapshot(dev).unwrap();
    // The layers' outputs, with their module paths and the scope.
    let allocs: Vec<_> = s
        .trace
        .iter()
        .filter(|e| e.action == Action::Alloc && e.scope.as_deref() == Some("eval"))
        .collect();
    assert!(
        allocs.iter().any(|e| e.op == Some("linear")
            && e.module.as_deref() == Some("0")
            && e.size == 64 * 16 * 4),
        "{allocs:#?}"
    );
    assert!(
        allocs.iter().any(|e| e.op == Some("linear")
            && e.module.as_deref() == Some("2")
            && e.size == 64 * 4 * 4),
        "{allocs:#?}"
    );
    // x's free: requested and completed, at its address.
    let frees: Vec<_> = s
        .trace
        .iter()
        .filter(|e| e.addr == addr_x)
        .map(|e| e.action)
        .collect();
    assert_eq!(
        &frees[frees.len() - 2..],
        &[Action::FreeRequested, Action::FreeCompleted]
    );
    // Time only moves forward.
    assert!(s.trace.windows(2).all(|w| w[0].time_us <= w[1].time_us));
}

#[test]
fn the_history_is_a_bounded_ring_and_stops_when_asked() {
    let _l = lock();
    let _off = Off;
    memory::record_history(CPU, true, 10).unwrap();
    for _ in 0..20 {
        drop(Tensor::ones(&[16], DType::F32, CPU).unwrap());
    }
    let s = memory::snapshot(CPU).unwrap();
    assert_eq!(s.trace.len(), 10, "the last 10 events");
    assert_eq!(s.trace.last().unwrap().action, Action::FreeCompleted);
    memory::record_history(CPU, false, 0).unwrap();
    drop(Tensor::ones(&[16], DType::F32, CPU).unwrap());
    assert!(memory::snapshot(CPU).unwrap().trace.is_empty());
    // Bad arguments.
    let e = memory::record_history(CPU, true, 0).unwrap_err();
    assert!(e.to_string().contains("memory::record_history"), "{e}");
}

/// The same work with and without recording leaves the allocator in the
/// same state (segments, blocks, statistics), and a snapshot's blocks add
/// up to the statistics.
fn recording_changes_nothing_and_snapshots_add_up(dev: Device) {
    let _l = lock();
    let _off = OffOn(dev);
    let work = || {
        let a = Tensor::randn(&[300, 200], DType::F32, dev).unwrap();
        let b = a.matmul(&a.t().unwrap()).unwrap();
        let c = b.softmax(1).unwrap();
        (a, c)
    };
    let run = |record: bool| {
        memory::empty_cache(dev);
        memory::record_history(dev, record, 100_000).unwrap();
        let s0 = memory::memory_stats(dev);
        let kept = work();
        let s1 = memory::memory_stats(dev);
        let snap = memory::snapshot(dev).unwrap();
        drop(kept);
        memory::record_history(dev, false, 0).unwrap();
        (s0, s1, snap)
    };
    // Once first: what the device keeps from a first use (cuBLAS's
    // workspace, the generator's state) is made before the two runs.
    drop(work());
    let (a0, a1, snap1) = run(false);
    let (b0, b1, snap2) = run(true);
    let d = |a: &memory::MemoryStats, b: &memory::MemoryStats| {
        (
            b.allocated_bytes.all.current - a.allocated_bytes.all.current,
            b.reserved_bytes.all.current - a.reserved_bytes.all.current,
            b.allocation.all.allocated - a.allocation.all.allocated,
            b.num_sys_alloc - a.num_sys_alloc,
        )
    };
    assert_eq!(
        d(&a0, &a1),
        d(&b0, &b1),
        "the same effect with recording on"
    );
    let shape = |s: &memory::Snapshot| {
        s.segments
            .iter()
            .map(|g| {
                (
                    g.total_size,
                    g.blocks
                        .iter()
                        .map(|b| (b.size, b.state))
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>()
    };
    // Compared as multisets: the system may hand segments out in another
    // address order.
    let (mut sh1, mut sh2) = (shape(&snap1), shape(&snap2));
    sh1.sort_by_key(|s| format!("{s:?}"));
    sh2.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(sh1, sh2, "the same segments and blocks");
    assert!(snap1.trace.is_empty());
    for (snap, st) in [(&snap1, &a1), (&snap2, &b1)] {
        assert_eq!(
            snap.allocated_bytes() as i64,
            st.allocated_bytes.all.current
        );
        assert_eq!(snap.reserved_bytes() as i64, st.reserved_bytes.all.current);
        for g in &snap.segments {
            let sum: usize = g.blocks.iter().map(|b| b.size).sum();
            assert_eq!(sum, g.total_size);
            assert!(g
                .blocks
                .windows(2)
                .all(|w| w[0].address + w[0].size == w[1].address));
        }
    }
    // The recording saw every segment taken and every allocation made.
    let count = |a| snap2.trace.iter().filter(|e| e.action == a).count() as u64;
    assert_eq!(
        count(Action::SegmentAlloc),
        b1.num_sys_alloc - b0.num_sys_alloc
    );
    assert_eq!(
        count(Action::Alloc),
        b1.allocation.all.allocated - b0.allocation.all.allocated
    );
    assert!(snap2.trace.iter().any(|e| e.op == Some("matmul")));
    assert!(snap2.trace.iter().any(|e| e.op == Some("softmax")));
}

#[test]
fn an_out_of_memory_error_is_recorded() {
    let _l = lock();
    let _off = Off;
    memory::record_history(CPU, true, 1000).unwrap();
    // More than any machine has: an OutOfMemory error (deviation 10), after
    // the allocator released its cache and retried.
    let e = Tensor::zeros(&[usize::MAX / 16], DType::F32, CPU).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    let s = memory::snapshot(CPU).unwrap();
    let last = s.trace.last().unwrap();
    assert_eq!((last.action, last.op), (Action::Oom, Some("zeros")));
    assert_eq!(last.size, usize::MAX / 16 * 4);
}

fn key(d: &Value, k: &str) -> Value {
    match d {
        Value::Dict(m) => m
            .get(&HashableValue::String(k.into()))
            .unwrap_or_else(|| panic!("no key {k:?}"))
            .clone(),
        other => panic!("not a dict: {other:?}"),
    }
}

fn list(v: Value) -> Vec<Value> {
    match v {
        Value::List(l) => l,
        other => panic!("not a list: {other:?}"),
    }
}

fn keys(d: &Value) -> Vec<String> {
    match d {
        Value::Dict(m) => m
            .keys()
            .map(|k| match k {
                HashableValue::String(s) => s.clone(),
                other => panic!("key {other:?}"),
            })
            .collect(),
        other => panic!("not a dict: {other:?}"),
    }
}

#[test]
fn the_pickle_has_pytorchs_snapshot_layout() {
    let _l = lock();
    let _off = Off;
    memory::record_history(CPU, true, 1000).unwrap();
    let x = Tensor::ones(&[1000], DType::F32, CPU).unwrap();
    let path = std::env::temp_dir().join(format!("tensorscope_snap_{}.pickle", std::process::id()));
    let snap = memory::snapshot(CPU).unwrap();
    snap.save_pickle(&path).unwrap();
    let v =
        serde_pickle::value_from_slice(&std::fs::read(&path).unwrap(), Default::default()).unwrap();
    std::fs::remove_file(&path).unwrap();
    let segments = list(key(&v, "segments"));
    assert_eq!(segments.len(), snap.segments.len());
    let traces = list(key(&v, "device_traces"));
    let trace = list(traces[0].clone());
    assert_eq!(trace.len(), snap.trace.len());
    // The layout the committed fixture has, which PyTorch's _memory_viz read.
    let fixture = serde_pickle::value_from_slice(
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/memory/snapshot.pickle"
        ))
        .unwrap(),
        Default::default(),
    )
    .unwrap();
    assert_eq!(keys(&v), keys(&fixture));
    let fseg = list(key(&fixture, "segments"));
    assert_eq!(keys(&segments[0]), keys(&fseg[0]));
    assert_eq!(
        keys(&list(key(&segments[0], "blocks"))[0]),
        keys(&list(key(&fseg[0], "blocks"))[0])
    );
    let ftrace = list(list(key(&fixture, "device_traces"))[0].clone());
    let alloc = trace
        .iter()
        .find(|e| key(e, "action") == Value::String("alloc".into()))
        .unwrap();
    let falloc = ftrace
        .iter()
        .find(|e| key(e, "action") == Value::String("alloc".into()))
        .unwrap();
    assert_eq!(keys(alloc), keys(falloc));
    // x's block is in a segment, allocated, with its requested size.
    let addr = x.data_ptr();
    let block = segments
        .iter()
        .flat_map(|s| list(key(s, "blocks")))
        .find(|b| key(b, "address") == Value::I64(addr as i64))
        .expect("x's block");
    assert_eq!(
        key(&block, "state"),
        Value::String(BlockState::ActiveAllocated.name().into())
    );
    assert_eq!(key(&block, "requested_size"), Value::I64(4000));
    // An unwritable path.
    let e = snap.save_pickle("/nonexistent-dir/x.pickle").unwrap_err();
    assert!(e.to_string().contains("save_pickle") && e.to_string().contains("nonexistent-dir"));
}

#[test]
fn an_absent_device_is_an_error() {
    let _l = lock();
    if tensorscope::backend::cuda::device_count() > 7 {
        return;
    }
    let dev = Device::Cuda(7);
    let e = memory::record_history(dev, true, 10).unwrap_err();
    assert!(e.to_string().contains("memory::record_history"), "{e}");
    let e = memory::snapshot(dev).unwrap_err();
    assert!(e.to_string().contains("memory::snapshot"), "{e}");
    let e = memory::measure(dev, || ()).unwrap_err();
    assert!(e.to_string().contains("memory::measure"), "{e}");
}

#[test]
fn measure_reports_peak_deltas_and_count_and_nests() {
    let _l = lock();
    let (kept, outer) = memory::measure(CPU, || {
        let a = Tensor::zeros(&[4096], DType::F32, CPU).unwrap(); // 16 KiB
        let (b, inner) = memory::measure(CPU, || {
            let t = Tensor::zeros(&[8192], DType::F32, CPU).unwrap(); // 32 KiB, freed
            drop(t);
            Tensor::zeros(&[1024], DType::F32, CPU).unwrap() // 4 KiB, kept
        })
        .unwrap();
        assert_eq!(inner.peak_delta, 32768);
        assert_eq!(inner.allocated_delta, 4096);
        assert_eq!(inner.allocations, 2);
        drop(a);
        b
    })
    .unwrap();
    assert_eq!(outer.peak_delta, 16384 + 32768);
    assert_eq!(outer.allocated_delta, 4096);
    assert_eq!(outer.allocations, 3);
    drop(kept);
    // The absolute peak is the start plus the delta.
    let start = memory::memory_allocated(CPU);
    let (_, m) = memory::measure(CPU, || Tensor::zeros(&[256], DType::F32, CPU).unwrap()).unwrap();
    assert_eq!((m.peak, m.peak_delta), (start + 1024, 1024));
    // A panic inside closes the window: the next measure is right.
    let r = std::panic::catch_unwind(|| memory::measure(CPU, || panic!("inside")));
    assert!(r.is_err());
    let (_, m) = memory::measure(CPU, || Tensor::zeros(&[256], DType::F32, CPU).unwrap()).unwrap();
    assert_eq!((m.peak_delta, m.allocations), (1024, 1));
}

/// Two threads measuring at once, the first closing its window while the
/// second's is open: each window keeps its own figures.
#[test]
fn measures_of_two_threads_close_in_any_order() {
    let _l = lock();
    use std::sync::{Arc, Barrier};
    let (opened, closed) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let (o2, c2) = (opened.clone(), closed.clone());
    let b = std::thread::spawn(move || {
        memory::measure(CPU, || {
            o2.wait(); // both windows open
            c2.wait(); // the other one has closed
            Tensor::zeros(&[2048], DType::F32, CPU).unwrap() // 8 KiB
        })
        .unwrap()
    });
    let (_, a) = memory::measure(CPU, || {
        let t = Tensor::zeros(&[1024], DType::F32, CPU).unwrap(); // 4 KiB
        opened.wait();
        t
    })
    .unwrap();
    closed.wait();
    let (_, bm) = b.join().unwrap();
    assert_eq!((a.peak_delta, a.allocations), (4096, 1));
    // B's window outlived A's: it still has its own figures (its 8 KiB at
    // least; A's 4 KiB may have been allocated inside it or before it, and
    // freed inside it).
    assert!(bm.allocations >= 1 && bm.peak >= 8192, "{bm:?}");
    assert!(
        bm.peak_delta >= 4096 && bm.allocated_delta >= 4096,
        "{bm:?}"
    );
}

/// The HTML picture: one self-contained file whose plotted peak is
/// `max_memory_allocated` over the recorded work; rendered by headless
/// Chromium (its script, run last, marks the body) when one is installed.
#[test]
fn the_html_picture_plots_the_peak_and_renders() {
    let _l = lock();
    let _off = Off;
    memory::reset_peak_memory_stats(CPU);
    memory::record_history(CPU, true, 100_000).unwrap();
    let mut net = Sequential::new();
    net.add(Linear::new(64, 256).unwrap())
        .add(ReLU)
        .add(Linear::new(256, 10).unwrap());
    let x = Tensor::randn(&[128, 64], DType::F32, CPU).unwrap();
    {
        let _s = memory::scope("step");
        let y = net.forward(&x).unwrap();
        y.sum_all().unwrap().backward().unwrap();
    }
    let peak = memory::max_memory_allocated(CPU);
    let snap = memory::snapshot(CPU).unwrap();
    let path = std::env::temp_dir().join(format!("tensorscope_mem_{}.html", std::process::id()));
    snap.save_html(&path).unwrap();
    let html = std::fs::read_to_string(&path).unwrap();
    assert!(
        html.contains(&format!("data-peak-bytes=\"{peak}\"")),
        "peak {peak}"
    );
    assert!(
        !html.contains("http://") || !html.contains("src=\"http"),
        "nothing fetched"
    );
    assert!(!html.contains("<script src"), "no external script");
    assert!(html.contains("linear") && html.contains("backward"));
    let e = snap.save_html("/nonexistent-dir/m.html").unwrap_err();
    assert!(e.to_string().contains("save_html"), "{e}");
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            std::process::Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    match browser {
        None => println!("skipped the browser check: no chromium installed"),
        Some(b) => {
            let out = std::process::Command::new(b)
                .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
                .arg(format!("file://{}", path.display()))
                .output()
                .unwrap();
            let dom = String::from_utf8_lossy(&out.stdout);
            assert!(
                dom.contains("data-rendered=\"") && !dom.contains("data-rendered=\"no\""),
                "the page's script did not run to its end:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(dom.contains(&format!("data-peak-bytes=\"{peak}\"")));
        }
    }
    std::fs::remove_file(&path).unwrap();
}

#[cfg(feature = "cuda")]
on_both!(
    events_carry_their_op_module_path_and_scope,
    recording_changes_nothing_and_snapshots_add_up,
);

#[cfg(not(feature = "cuda"))]
mod cpu {
    use tensorscope::Device;
    #[test]
    fn events_carry_their_op_module_path_and_scope() {
        let _shared = crate::common::shared();
        super::events_carry_their_op_module_path_and_scope(Device::Cpu)
    }
    #[test]
    fn recording_changes_nothing_and_snapshots_add_up() {
        let _shared = crate::common::shared();
        super::recording_changes_nothing_and_snapshots_add_up(Device::Cpu)
    }
}

/// Named layers (`add_named`) and `nn::module_scope` give the module path
/// PyTorch would print (`encoder.fc1`); unnamed layers keep their index;
/// bad names are an `Err` naming `Sequential::add_named`.
#[test]
fn named_layers_and_module_scopes_make_the_module_path() {
    let _l = lock();
    let _off = Off;
    let mut encoder = Sequential::new();
    encoder
        .add_named("fc1", Linear::new(8, 16).unwrap())
        .unwrap()
        .add(ReLU)
        .add(Linear::new(16, 4).unwrap());
    let names: Vec<String> = encoder
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["fc1.weight", "fc1.bias", "2.weight", "2.bias"]);
    assert_eq!(encoder.names(), ["fc1", "1", "2"]);
    let x = Tensor::ones(&[4, 8], DType::F32, CPU).unwrap();
    memory::record_history(CPU, true, 10_000).unwrap();
    let y = {
        let _m = tensorscope::nn::module_scope("encoder");
        encoder.forward(&x).unwrap()
    };
    let outside = Tensor::zeros(&[3], DType::F32, CPU).unwrap();
    let snap = memory::snapshot(CPU).unwrap();
    let module_of = |size: usize| {
        snap.trace
            .iter()
            .find(|e| e.action == Action::Alloc && e.size == size)
            .map(|e| e.module.clone())
    };
    assert_eq!(module_of(4 * 16 * 4), Some(Some("encoder.fc1".into())));
    assert_eq!(module_of(4 * 4 * 4), Some(Some("encoder.2".into())));
    assert_eq!(module_of(3 * 4), Some(None), "the scope ended");
    drop((y, outside));
    for (bad, why) in [
        ("", "empty"),
        ("a.b", "'.'"),
        ("fc1", "already"),
        ("1", "number"),
    ] {
        let Err(e) = encoder.add_named(bad, Linear::new(4, 4).unwrap()) else {
            panic!("{bad:?} was accepted");
        };
        let e = e.to_string();
        assert!(
            e.contains("Sequential::add_named") && e.contains(why),
            "{e}"
        );
    }
    assert_eq!(encoder.len(), 3, "a refused layer is not added");
}
