//! The profiler (issue 16, item 4): op calls with their nesting, self and
//! total time, input shapes and memory; `key_averages` and `table` as
//! PyTorch's; a Chrome trace that is valid JSON with the ops as complete
//! events and the allocated bytes as counters; bad use is an `Err`; with
//! `device_time`, each op's span on the GPU's stream (CUDA events).

#[cfg(feature = "cuda")]
use crate::common::devices::on_both;
use tensorscope::nn::{cross_entropy, Linear, Module, ReLU, Sequential};
use tensorscope::profiler::{self, ProfileOptions, SortBy};
use tensorscope::{DType, Device, Tensor};

const CPU: Device = Device::Cpu;
const ALL: ProfileOptions = ProfileOptions {
    record_shapes: true,
    profile_memory: true,
    device_time: None,
};

/// The CPU allocator is process-wide: every test here holds this.
fn lock() -> crate::common::Guard {
    crate::common::serial()
}

#[test]
fn ops_are_counted_timed_and_charged_their_memory() {
    let _l = lock();
    let x = Tensor::ones(&[32, 64], DType::F32, CPU).unwrap();
    let (kept, prof) = profiler::profile(ALL, || {
        let mut last = None;
        for _ in 0..3 {
            last = Some(x.exp().unwrap()); // 8 KiB each, the previous one freed
        }
        let m = x.matmul(&x.t().unwrap()).unwrap(); // [32, 32]: 4 KiB
        (last, m)
    })
    .unwrap();
    let avg = prof.key_averages();
    let exp = avg.iter().find(|r| r.name == "exp").unwrap();
    assert_eq!(exp.calls, 3);
    // Each exp allocates its 8 KiB result (the previous one is freed by
    // the loop, outside the op).
    assert_eq!(exp.self_memory, 3 * 8192);
    let mm = avg.iter().find(|r| r.name == "matmul").unwrap();
    assert_eq!((mm.calls, mm.self_memory), (1, 4096));
    // Shapes of the matmul call.
    let e = prof.events.iter().find(|e| e.name == "matmul").unwrap();
    assert_eq!(e.shapes, vec![vec![32, 64], vec![64, 32]]);
    assert!(e.self_duration_us <= e.duration_us);
    // The events are in start order, and each lies in the profile's span.
    assert!(prof
        .events
        .windows(2)
        .all(|w| w[0].start_us <= w[1].start_us));
    // The memory track ends at the bytes still allocated.
    let last = prof.memory.last().unwrap();
    assert_eq!(last.device, CPU);
    assert_eq!(
        last.allocated as usize,
        tensorscope::memory::memory_allocated(CPU)
    );
    drop(kept);
}

#[test]
fn nested_ops_are_children_with_self_and_total_apart() {
    let _l = lock();
    let mut net = Sequential::new();
    net.add(Linear::new(16, 32).unwrap())
        .add(ReLU)
        .add(Linear::new(32, 4).unwrap());
    let x = Tensor::randn(&[8, 16], DType::F32, CPU).unwrap();
    let y = Tensor::from_slice(&[0i64, 1, 2, 3, 0, 1, 2, 3], &[8], CPU).unwrap();
    let ((), prof) = profiler::profile(ALL, || {
        let loss = cross_entropy(&net.forward(&x).unwrap(), &y).unwrap();
        loss.backward().unwrap();
    })
    .unwrap();
    let names: Vec<&str> = prof
        .events
        .iter()
        .filter(|e| e.depth == 0)
        .map(|e| e.name)
        .collect();
    assert!(
        names.contains(&"linear") && names.contains(&"backward"),
        "{names:?}"
    );
    let linear = prof.events.iter().find(|e| e.name == "linear").unwrap();
    assert_eq!(linear.shapes, vec![vec![8, 16]]);
    // Events are numbered in start order; an op's total memory and time
    // are its own plus its children's (found by their parent ids).
    let mut with_children = 0;
    for (k, e) in prof.events.iter().enumerate() {
        assert_eq!(e.id, k as u64);
        let children: Vec<_> = prof
            .events
            .iter()
            .filter(|c| c.parent == Some(e.id))
            .collect();
        assert!(children.iter().all(|c| c.depth == e.depth + 1));
        let child_memory: i64 = children.iter().map(|c| c.total_memory).sum();
        let child_time: u64 = children.iter().map(|c| c.duration_us).sum();
        assert_eq!(e.total_memory, e.self_memory + child_memory, "{}", e.name);
        assert_eq!(e.self_duration_us, e.duration_us - child_time, "{}", e.name);
        with_children += usize::from(!children.is_empty());
    }
    assert!(
        with_children > 0,
        "backward calls ops: some event has children"
    );
    let table = prof.table(SortBy::TotalTime, 5);
    assert!(
        table.contains("Name") && table.contains("Self CPU Mem") && table.contains("# of Calls")
    );
    assert_eq!(
        table.lines().filter(|l| !l.starts_with('-')).count(),
        1 + 5 + 1,
        "{table}"
    );
}

#[test]
fn the_chrome_trace_is_valid_json_with_ops_and_memory_counters() {
    let _l = lock();
    let ((), prof) = profiler::profile(ALL, || {
        let a = Tensor::ones(&[128], DType::F32, CPU).unwrap();
        let _b = a.add(&a).unwrap();
    })
    .unwrap();
    let path = std::env::temp_dir().join(format!("tensorscope_trace_{}.json", std::process::id()));
    prof.export_chrome_trace(&path).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let ops: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    let counters: Vec<_> = events.iter().filter(|e| e["ph"] == "C").collect();
    assert_eq!(ops.len(), prof.events.len());
    assert!(ops.iter().any(|e| e["name"] == "ones") && ops.iter().any(|e| e["name"] == "add"));
    for e in &ops {
        assert!(e["ts"].is_u64() && e["dur"].is_u64() && e["pid"].is_u64() && e["tid"].is_u64());
    }
    assert_eq!(counters.len(), prof.memory.len());
    assert!(counters
        .iter()
        .all(|c| c["args"]["bytes"].is_i64() || c["args"]["bytes"].is_u64()));
    let e = prof
        .export_chrome_trace("/nonexistent-dir/t.json")
        .unwrap_err();
    assert!(e.to_string().contains("export_chrome_trace"), "{e}");
}

#[test]
fn profiles_do_not_nest_and_options_are_honoured() {
    let _l = lock();
    let (inner, _) = profiler::profile(ProfileOptions::default(), || {
        profiler::profile(ProfileOptions::default(), || ()).map(|_| ())
    })
    .unwrap();
    let e = inner.unwrap_err();
    assert!(e.to_string().contains("profiler::profile"), "{e}");
    // Without shapes or memory: times only.
    let ((), prof) = profiler::profile(ProfileOptions::default(), || {
        let a = Tensor::ones(&[16], DType::F32, CPU).unwrap();
        drop(a.exp().unwrap());
    })
    .unwrap();
    assert!(prof.memory.is_empty());
    assert!(prof
        .events
        .iter()
        .all(|e| e.shapes.is_empty() && e.self_memory == 0));
    assert!(prof.events.iter().any(|e| e.name == "exp"));
    // Another thread's ops are not in this thread's profile.
    let ((), prof) = profiler::profile(ALL, || {
        std::thread::spawn(|| drop(Tensor::ones(&[16], DType::F32, CPU).unwrap()))
            .join()
            .unwrap();
    })
    .unwrap();
    assert!(prof.events.is_empty());
}

#[cfg(feature = "cuda")]
on_both!(device_time_is_each_ops_span_on_the_gpu);

#[cfg(not(feature = "cuda"))]
#[test]
fn device_time_is_refused_without_the_cuda_backend() {
    device_time_is_each_ops_span_on_the_gpu(CPU)
}

/// With `device_time`, each op carries its span on the GPU's stream: a big
/// kernel's span is at least its bytes over any GPU's bandwidth, an op's
/// self device time is its span less its children's, and the table and the
/// trace show them. On the CPU (or with no usable GPU) asking for it is an
/// `Err` naming the call.
fn device_time_is_each_ops_span_on_the_gpu(dev: Device) {
    let _l = lock();
    let timed = ProfileOptions {
        device_time: Some(dev),
        ..ALL
    };
    if !dev.is_cuda() {
        let e = profiler::profile(timed, || ()).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("profiler::profile") && msg.contains("cpu"),
            "{msg}"
        );
        if !tensorscope::backend::cuda::is_available() {
            let e = profiler::profile(
                ProfileOptions {
                    device_time: Some(Device::Cuda(0)),
                    ..ALL
                },
                || (),
            )
            .unwrap_err();
            assert!(e.to_string().contains("profiler::profile"), "{e}");
        }
        return;
    }
    // 2^24 f32: exp reads and writes 128 MiB, which no GPU moves in under
    // 12 us (10 TB/s; an H200 moves 4.8).
    let x = Tensor::ones(&[1 << 24], DType::F32, dev).unwrap();
    drop(x.exp().unwrap()); // kernels compiled, the cache warm
    let mut net = Sequential::new();
    net.add(Linear::new(16, 32).unwrap())
        .add(ReLU)
        .add(Linear::new(32, 4).unwrap());
    net.to_device(dev).unwrap();
    let input = Tensor::randn(&[8, 16], DType::F32, dev).unwrap();
    let target = Tensor::from_slice(&[0i64, 1, 2, 3, 0, 1, 2, 3], &[8], dev).unwrap();
    let ((), prof) = profiler::profile(timed, || {
        for _ in 0..3 {
            drop(x.exp().unwrap());
        }
        let loss = cross_entropy(&net.forward(&input).unwrap(), &target).unwrap();
        loss.backward().unwrap();
    })
    .unwrap();
    let exps: Vec<_> = prof.events.iter().filter(|e| e.name == "exp").collect();
    assert_eq!(exps.len(), 3);
    for e in &exps {
        let d = e.device_us.expect("exp has a device time");
        assert!(d >= 12.0, "exp of 128 MiB in {d} us on the device");
    }
    let mut with_children = 0;
    for e in &prof.events {
        let d = e
            .device_us
            .unwrap_or_else(|| panic!("{} has no device time", e.name));
        let children: f64 = prof
            .events
            .iter()
            .filter(|c| c.parent == Some(e.id))
            .map(|c| c.device_us.unwrap())
            .sum();
        with_children += usize::from(children > 0.0);
        let own = e.self_device_us.unwrap();
        // Events resolve to about half a microsecond.
        assert!(children <= d + 1.0, "{}: children {children} > {d}", e.name);
        assert!((own - (d - children).max(0.0)).abs() < 1e-6, "{}", e.name);
        assert!(e.device_start_us.unwrap() >= 0.0);
    }
    assert!(with_children > 0, "backward's ops are nested in it");
    let exp_row = prof
        .key_averages()
        .into_iter()
        .find(|r| r.name == "exp")
        .unwrap();
    let exp_sum: f64 = exps.iter().map(|e| e.device_us.unwrap()).sum();
    assert!((exp_row.total_device_us - exp_sum).abs() < 1e-6);
    let table = prof.table(SortBy::DeviceTime, 100);
    assert!(
        table.contains("Self CUDA") && table.contains("Self CUDA time total"),
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("exp ")), "{table}");
    let path =
        std::env::temp_dir().join(format!("tensorscope_gpu_trace_{}.json", std::process::id()));
    prof.export_chrome_trace(&path).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    let device_ops = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "device_op")
        .count();
    assert_eq!(device_ops, prof.events.len());
}
