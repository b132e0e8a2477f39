//! The kernel sources (`kernels/*.cu`), their names, and their compilation.
//!
//! Every `kernels/<file>.cu` is compiled by NVRTC, with `kernels/prelude.cuh`
//! prepended (so no include path and no toolkit header is needed), the first
//! time a kernel of that file is needed on a device of a given architecture
//! (`compute_XY`, from the device's compute capability). The PTX is kept for
//! the life of the process, and the loaded module for the life of the
//! device.
//!
//! The PTX is also cached on disk, keyed by a hash of the program and the
//! compile options, the architecture and the NVRTC version, in
//! `$TENSORSCOPE_KERNEL_CACHE` if set (`0`, `off` or empty turn the disk
//! cache off), else `$XDG_CACHE_HOME/tensorscope/kernels`, else
//! `~/.cache/tensorscope/kernels`. A cache that cannot be read or written is
//! ignored.
//!
//! Kernel names are built here, from the same [`UnaryOp`], [`BinaryOp`] and
//! [`ReduceOp`] names the CPU backend uses, and [`expected_kernels`] lists
//! every name the Rust side can ask for, so a test can check each one exists
//! in the compiled PTX (`tests/nvrtc.rs`).

use super::device::{drv, Gpu};
use crate::backend::{BinaryOp, ReduceOp, Reduction, UnaryOp};
use crate::error::{Error, Result};
use crate::DType;
use cudarc::driver::{CudaFunction, CudaModule};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

/// The prelude prepended to every kernel file.
pub(crate) const PRELUDE: &str = include_str!("../../../kernels/prelude.cuh");

/// One `kernels/*.cu` file.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Module {
    Elementwise,
    Copy,
    Reduce,
    Softmax,
    Index,
    Random,
    Nn,
}

impl Module {
    pub(crate) const ALL: [Module; 7] = [
        Module::Elementwise,
        Module::Copy,
        Module::Reduce,
        Module::Softmax,
        Module::Index,
        Module::Random,
        Module::Nn,
    ];

    pub(crate) fn file(self) -> &'static str {
        match self {
            Module::Elementwise => "elementwise.cu",
            Module::Copy => "copy.cu",
            Module::Reduce => "reduce.cu",
            Module::Softmax => "softmax.cu",
            Module::Index => "index.cu",
            Module::Random => "random.cu",
            Module::Nn => "nn.cu",
        }
    }

    pub(crate) fn source(self) -> &'static str {
        match self {
            Module::Elementwise => include_str!("../../../kernels/elementwise.cu"),
            Module::Copy => include_str!("../../../kernels/copy.cu"),
            Module::Reduce => include_str!("../../../kernels/reduce.cu"),
            Module::Softmax => include_str!("../../../kernels/softmax.cu"),
            Module::Index => include_str!("../../../kernels/index.cu"),
            Module::Random => include_str!("../../../kernels/random.cu"),
            Module::Nn => include_str!("../../../kernels/nn.cu"),
        }
    }
}

// ------------------------------------------------------------------ names ---

/// The kernel-name suffix of a dtype.
pub(crate) fn suffix(dt: DType) -> &'static str {
    match dt {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::U8 => "u8",
        DType::Bool => "bool",
    }
}

/// Every unary op, for the manifest. (`_every_unary_op` fails to compile
/// when a variant is added: add it here too.)
pub(crate) const UNARY_OPS: [UnaryOp; 19] = {
    use UnaryOp::*;
    [
        Neg,
        Abs,
        Exp,
        Log,
        Sqrt,
        Rsqrt,
        Sin,
        Cos,
        Tanh,
        Sigmoid,
        Relu,
        Gelu,
        Erf,
        Floor,
        Round,
        Sign,
        Recip,
        Square,
        Clamp(f64::NAN, f64::NAN),
    ]
};
#[allow(dead_code)]
fn _every_unary_op(op: UnaryOp) {
    use UnaryOp::*;
    match op {
        Neg | Abs | Exp | Log | Sqrt | Rsqrt | Sin | Cos | Tanh | Sigmoid | Relu | Gelu | Erf
        | Floor | Round | Sign | Recip | Square | Clamp(..) => {}
    }
}

/// Every binary op, for the manifest.
pub(crate) const BINARY_OPS: [BinaryOp; 13] = {
    use BinaryOp::*;
    [
        Add, Sub, Mul, Div, Pow, Maximum, Minimum, Eq, Ne, Lt, Le, Gt, Ge,
    ]
};
#[allow(dead_code)]
fn _every_binary_op(op: BinaryOp) {
    use BinaryOp::*;
    match op {
        Add | Sub | Mul | Div | Pow | Maximum | Minimum | Eq | Ne | Lt | Le | Gt | Ge => {}
    }
}

/// Every reduction, for the manifest.
pub(crate) const REDUCE_OPS: [ReduceOp; 7] = {
    use ReduceOp::*;
    [Sum, Mean, Max, Min, ArgMax, ArgMin, Prod]
};

/// A reduction's name in kernel names.
pub(crate) fn reduce_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Mean => "mean",
        ReduceOp::Max => "max",
        ReduceOp::Min => "min",
        ReduceOp::ArgMax => "argmax",
        ReduceOp::ArgMin => "argmin",
        ReduceOp::Prod => "prod",
    }
}

/// `true` if `unary_<op>_<dt>` exists (bool unary ops are copies).
pub(crate) fn has_unary(op: UnaryOp, dt: DType) -> bool {
    if dt == DType::Bool {
        return false;
    }
    !op.needs_float() || dt.is_float()
}

pub(crate) fn unary_kernel(op: UnaryOp, dt: DType) -> String {
    format!("unary_{}_{}", op.name(), suffix(dt))
}
pub(crate) fn binary_kernel(op: BinaryOp, dt: DType) -> String {
    format!("binary_{}_{}", op.name(), suffix(dt))
}
pub(crate) fn bscalar_kernel(op: BinaryOp, dt: DType) -> String {
    format!("bscalar_{}_{}", op.name(), suffix(dt))
}
pub(crate) fn cast_kernel(src: DType, dst: DType) -> String {
    format!("cast_{}_{}", suffix(src), suffix(dst))
}
/// A kernel that only moves bits: `<family>_b<element bytes>`.
pub(crate) fn bits_kernel(family: &str, dt: DType) -> String {
    format!("{family}_b{}", dt.size_in_bytes())
}
/// `b<element bytes>`: the suffix of kernels that only move bits.
pub(crate) fn bits_suffix(dt: DType) -> String {
    format!("b{}", dt.size_in_bytes())
}
/// `<family>_<index dtype>[_<rest>]`: the index kernels, one per index
/// dtype (i64 or i32).
pub(crate) fn index_kernel(family: &str, index: DType, rest: Option<&str>) -> String {
    match rest {
        Some(r) => format!("{family}_{}_{r}", suffix(index)),
        None => format!("{family}_{}", suffix(index)),
    }
}
/// `<family>_<dtype>`.
pub(crate) fn typed_kernel(family: &str, dt: DType) -> String {
    format!("{family}_{}", suffix(dt))
}
pub(crate) fn reduce_kernel(op: ReduceOp, dt: DType) -> String {
    format!("reduce_{}_{}", reduce_name(op), suffix(dt))
}
/// The kernel of a dispatch-level [`Reduction`]: `reduce_<op>_<dt>`, with
/// var and std sharing `reduce_var_<dt>` (a run-time flag takes the root).
pub(crate) fn reduction_kernel(op: Reduction, dt: DType) -> String {
    let name = match op {
        Reduction::Sum => "sum",
        Reduction::Mean => "mean",
        Reduction::Prod => "prod",
        Reduction::Max => "max",
        Reduction::Min => "min",
        Reduction::Var(_) | Reduction::Std(_) => "var",
        Reduction::LogSumExp => "logsumexp",
    };
    format!("reduce_{name}_{}", suffix(dt))
}

/// The output dtype of reduction `op` over `dt`, or `None` if there is no
/// kernel for it (see kernels/reduce.cu).
pub(crate) fn reduce_out_dtype(op: ReduceOp, dt: DType) -> Option<DType> {
    match (op, dt) {
        (ReduceOp::Sum | ReduceOp::Prod, d) if !d.is_float() => Some(DType::I64),
        (ReduceOp::Sum | ReduceOp::Prod, d) => Some(d),
        (ReduceOp::Mean, d) if d.is_float() => Some(d),
        (ReduceOp::Mean, _) => None,
        (ReduceOp::Max | ReduceOp::Min, d) => Some(d),
        (ReduceOp::ArgMax | ReduceOp::ArgMin, _) => Some(DType::I64),
    }
}

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
const NUMERIC: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U8,
];
const WIDTHS: [DType; 4] = [DType::U8, DType::F16, DType::F32, DType::F64];
const INTEGERS: [DType; 3] = [DType::I64, DType::I32, DType::U8];
/// The dtypes an index tensor may hold.
pub(crate) const INDEX_DTYPES: [DType; 2] = [DType::I64, DType::I32];

/// Every kernel name the Rust side can launch from `file` (a
/// `kernels/*.cu` file name), or `None` for an unknown file.
#[doc(hidden)]
pub fn expected_kernels(file: &str) -> Option<Vec<String>> {
    let m = Module::ALL.into_iter().find(|m| m.file() == file)?;
    let mut v = Vec::new();
    match m {
        Module::Elementwise => {
            for op in UNARY_OPS {
                for dt in DType::ALL {
                    if has_unary(op, dt) {
                        v.push(unary_kernel(op, dt));
                    }
                }
            }
            for op in BINARY_OPS {
                for dt in DType::ALL {
                    v.push(binary_kernel(op, dt));
                    v.push(bscalar_kernel(op, dt));
                }
            }
        }
        Module::Copy => {
            for dt in WIDTHS {
                for f in ["copy", "fill", "where", "masked_fill"] {
                    v.push(bits_kernel(f, dt));
                }
            }
            for s in DType::ALL {
                for d in DType::ALL {
                    if s != d {
                        v.push(cast_kernel(s, d));
                    }
                }
            }
        }
        Module::Reduce => {
            for op in REDUCE_OPS {
                for dt in DType::ALL {
                    if reduce_out_dtype(op, dt).is_some() {
                        v.push(reduce_kernel(op, dt));
                    }
                }
            }
            for dt in FLOATS {
                v.push(reduction_kernel(Reduction::Var(0), dt));
                v.push(reduction_kernel(Reduction::LogSumExp, dt));
            }
            for dt in INTEGERS {
                v.push(typed_kernel("matmul", dt));
            }
        }
        Module::Softmax => {
            for dt in FLOATS {
                for f in ["softmax", "log_softmax", "softmax_bwd", "log_softmax_bwd"] {
                    v.push(typed_kernel(f, dt));
                }
            }
        }
        Module::Index => {
            for idx in INDEX_DTYPES {
                v.push(index_kernel("index_check", idx, None));
                for dt in WIDTHS {
                    for f in ["gather", "scatter"] {
                        v.push(index_kernel(f, idx, Some(&bits_suffix(dt))));
                    }
                }
                for dt in NUMERIC {
                    v.push(index_kernel("scatter_add", idx, Some(suffix(dt))));
                }
            }
            for dt in WIDTHS {
                v.push(bits_kernel("masked_select", dt));
            }
            v.push("masked_count".into());
        }
        Module::Random => {
            for dt in FLOATS {
                v.push(typed_kernel("rand_uniform", dt));
                v.push(typed_kernel("rand_normal", dt));
            }
            for dt in DType::ALL {
                v.push(typed_kernel("rand_bernoulli", dt));
            }
        }
        Module::Nn => {
            for dt in FLOATS {
                for f in [
                    "layer_norm_fwd",
                    "layer_norm_bwd",
                    "layer_norm_bwd_params",
                    "dropout",
                    "dropout_bwd",
                ] {
                    v.push(typed_kernel(f, dt));
                }
            }
        }
    }
    Some(v)
}

/// The `kernels/*.cu` files the crate embeds.
#[doc(hidden)]
pub fn embedded_files() -> Vec<&'static str> {
    Module::ALL.iter().map(|m| m.file()).collect()
}

// ------------------------------------------------------------ compilation ---

/// The program NVRTC compiles for `file`: the prelude, then the file, with
/// `#line` markers so that errors name the right file and line.
#[doc(hidden)]
pub fn program(file: &str, body: &str) -> String {
    format!("#line 1 \"prelude.cuh\"\n{PRELUDE}\n#line 1 \"{file}\"\n{body}")
}

fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "--generate-line-info".into(),
    ]
}

/// `true` if libnvrtc can be loaded (checked without calling into it).
#[doc(hidden)]
pub fn nvrtc_present() -> bool {
    super::probe::probe().nvrtc
}

/// NVRTC's `(major, minor)` version, if it is present.
#[doc(hidden)]
pub fn nvrtc_version() -> Option<(i32, i32)> {
    super::probe::probe().nvrtc_version
}

/// Compiles `file`'s `body` (prelude prepended) to PTX for `arch` (e.g.
/// `"compute_90"`). `Err` holds NVRTC's log, or why NVRTC is unusable.
/// Never panics when NVRTC is missing.
#[doc(hidden)]
pub fn compile(file: &str, body: &str, arch: &str) -> std::result::Result<String, String> {
    if !nvrtc_present() {
        return Err("the NVRTC library (libnvrtc.so) was not found".into());
    }
    if body.contains('\0') {
        return Err(format!("{file} contains a NUL byte"));
    }
    let opts = CompileOptions {
        options: options(arch),
        name: Some(file.to_string()),
        ..Default::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(program(file, body), opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(CompileError::CompileError { nvrtc, log, .. }) => Err(format!(
            "NVRTC {nvrtc:?} compiling {file} for {arch}:\n{}",
            log.to_string_lossy()
        )),
        Err(e) => Err(format!("NVRTC error compiling {file} for {arch}: {e:?}")),
    }
}

/// FNV-1a, 64 bits: a stable hash for cache keys.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0xff)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn disk_cache_dir() -> Option<PathBuf> {
    match std::env::var_os("TENSORSCOPE_KERNEL_CACHE") {
        Some(v) if v.is_empty() || v == "0" || v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
            Some(base.join("tensorscope").join("kernels"))
        }
    }
}

/// The disk cache file for a program, if there is a cache.
fn disk_cache_path(m: Module, arch: &str) -> Option<PathBuf> {
    let (maj, min) = nvrtc_version()?;
    let prog = program(m.file(), m.source());
    let opts = options(arch).join(" ");
    let h = fnv1a(&[&prog, &opts]);
    let stem = m.file().trim_end_matches(".cu");
    Some(disk_cache_dir()?.join(format!("{stem}-{arch}-nvrtc{maj}.{min}-{h:016x}.ptx")))
}

/// PTX per (module, architecture), for the life of the process.
type PtxCache = Vec<((Module, String), Arc<str>)>;
static PTX: Mutex<PtxCache> = Mutex::new(Vec::new());

/// The PTX of `m` for `arch`: from memory, from the disk cache, or compiled.
fn ptx_for(op: &'static str, m: Module, arch: &str) -> Result<Arc<str>> {
    // Held while compiling: concurrent first uses compile once.
    let mut cache = PTX.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = cache.iter().find(|(k, _)| k.0 == m && k.1 == arch) {
        return Ok(p.clone());
    }
    let path = disk_cache_path(m, arch);
    let from_disk = path
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .filter(|s| s.contains(".entry"));
    let ptx: Arc<str> = match from_disk {
        Some(s) => s.into(),
        None => {
            let s = compile(m.file(), m.source(), arch).map_err(|log| Error::Backend {
                op,
                msg: format!("compiling kernels/{}: {log}", m.file()),
            })?;
            if let Some(p) = &path {
                // Best effort: write a temporary file, then rename it.
                if let Some(dir) = p.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let tmp = p.with_extension(format!("tmp{}", std::process::id()));
                if std::fs::write(&tmp, &s).is_ok() {
                    let _ = std::fs::rename(&tmp, p);
                }
            }
            s.into()
        }
    };
    cache.push(((m, arch.to_string()), ptx.clone()));
    Ok(ptx)
}

/// The modules loaded on one device and the functions looked up in them.
#[derive(Default)]
pub(crate) struct ModuleCache {
    modules: Mutex<HashMap<Module, Arc<CudaModule>>>,
    functions: RwLock<HashMap<String, CudaFunction>>,
}

impl Gpu {
    /// `compute_XY` for this device.
    pub(crate) fn arch(&self) -> String {
        format!("compute_{}{}", self.cc.0, self.cc.1)
    }

    /// The kernel `name` of module `m`, compiled and loaded on first use.
    pub(crate) fn function(&self, op: &'static str, m: Module, name: &str) -> Result<CudaFunction> {
        if let Some(f) = self
            .modules
            .functions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return Ok(f.clone());
        }
        let module = {
            let mut mods = self
                .modules
                .modules
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match mods.get(&m) {
                Some(md) => md.clone(),
                None => {
                    let ptx = ptx_for(op, m, &self.arch())?;
                    let md = self
                        .ctx
                        .load_module(Ptx::from_src(ptx.to_string()))
                        .map_err(drv(op))?;
                    mods.insert(m, md.clone());
                    md
                }
            }
        };
        let f = module.load_function(name).map_err(|e| Error::Backend {
            op,
            msg: format!("kernel {name} not found in kernels/{}: {e:?}", m.file()),
        })?;
        self.modules
            .functions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), f.clone());
        Ok(f)
    }
}
