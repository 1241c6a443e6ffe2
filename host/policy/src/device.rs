//! Device and dtype choice: `--device auto|cpu|cuda[:N]`; f32 on CPU, bf16 compute with f32
//! master weights and f32 reductions on CUDA (docs/gpu.md).
//!
//! A `cuda` build loads the CUDA libraries at run time (scripts/setup-cuda.sh), so the same
//! binary starts on a machine without an NVIDIA driver: `auto` then falls back to the CPU and
//! `cuda` fails with an error naming the missing library instead of cudarc's panic.

use std::fmt;
use std::str::FromStr;

use candle_core::{DType, Device};

use crate::{PolicyError, Result};

/// Which device to run on, as written on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// CUDA device 0 when this is a `cuda` build and a GPU with its libraries is present, else
    /// the CPU.
    #[default]
    Auto,
    /// The CPU.
    Cpu,
    /// CUDA device N (`cuda` = `cuda:0`).
    Cuda(usize),
}

impl FromStr for DeviceSpec {
    type Err = PolicyError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            PolicyError::arg(
                "device",
                format!("{s:?} is not a device; expected auto, cpu, cuda or cuda:N"),
            )
        };
        match s.trim() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda(0)),
            other => {
                let n = other
                    .strip_prefix("cuda:")
                    .ok_or_else(bad)?
                    .parse()
                    .map_err(|_| bad())?;
                Ok(Self::Cuda(n))
            }
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceSpec {
    /// Open the device.
    ///
    /// # Errors
    /// [`PolicyError::Device`] for `cuda[:N]` when the binary was built without the `cuda`
    /// feature, a CUDA library cannot be loaded, or the device cannot be opened.
    pub fn resolve(self) -> Result<Device> {
        match self {
            Self::Cpu => Ok(Device::Cpu),
            Self::Cuda(n) => open_cuda(n),
            Self::Auto => match open_cuda(0) {
                Ok(d) => Ok(d),
                Err(e) => {
                    if cfg!(feature = "cuda") {
                        tracing::warn!("no usable GPU, running on the CPU: {e}");
                    }
                    Ok(Device::Cpu)
                }
            },
        }
    }
}

/// The device models are created on when none is given: [`DeviceSpec::Auto`].
///
/// # Errors
/// Never for `Auto` (it falls back to the CPU); kept fallible for callers' uniformity.
pub fn default_device() -> Result<Device> {
    DeviceSpec::Auto.resolve()
}

/// `cpu` or `cuda:N`.
pub fn device_label(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

/// The dtype matrix multiplications run in on `device`: bf16 on CUDA, f32 elsewhere.
///
/// Master weights, optimiser moments, RMSNorm and softmax reductions and all log-probs stay in f32
/// whatever this returns: bf16 on CPU is slower than f32 and flips greedy tokens (measured in
/// docs/gpu.md), and bf16 master weights would round away updates smaller than 2⁻⁸ of a weight.
pub fn compute_dtype(device: &Device) -> DType {
    if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    }
}

/// Bytes of device memory in use on `device` as the driver sees it (all processes, candle's
/// memory pool included), or `None` on the CPU. For peak-memory sampling in benchmarks.
pub fn device_memory_used(device: &Device) -> Option<u64> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = device {
        let (free, total) = d.cuda_stream().context().mem_get_info().ok()?;
        return Some(total.saturating_sub(free) as u64);
    }
    let _ = device;
    None
}

/// The shared libraries candle's CUDA backend opens (through cudarc) when a device is created
/// or used, with the file names cudarc tries for CUDA 13 (`cudarc::get_lib_name_candidates`).
#[cfg(feature = "cuda")]
const CUDA_LIBRARIES: [(&str, &[&str]); 4] = [
    (
        "the NVIDIA driver (libcuda)",
        &["libcuda.so.1", "libcuda.so"],
    ),
    ("cuBLAS", &["libcublas.so.13", "libcublas.so"]),
    ("cuBLASLt", &["libcublasLt.so.13", "libcublasLt.so"]),
    ("cuRAND", &["libcurand.so.10", "libcurand.so"]),
];

#[cfg(feature = "cuda")]
fn open_cuda(ordinal: usize) -> Result<Device> {
    let requested = DeviceSpec::Cuda(ordinal).to_string();
    for (what, names) in CUDA_LIBRARIES {
        // SAFETY: these are NVIDIA's CUDA libraries, whose initialisers have no preconditions;
        // the handle is dropped (dlclose) right away, cudarc opens them again when it needs them.
        let found = names
            .iter()
            .any(|n| unsafe { libloading::Library::new(*n) }.is_ok());
        if !found {
            return Err(PolicyError::Device {
                requested,
                reason: format!(
                    "cannot load {what} (tried {}); install the NVIDIA driver, or put the \
                     directory holding the CUDA 13 libraries on LD_LIBRARY_PATH (docs/gpu.md)",
                    names.join(", ")
                ),
            });
        }
    }
    Device::new_cuda(ordinal).map_err(|e| PolicyError::Device {
        requested,
        reason: e.to_string(),
    })
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(ordinal: usize) -> Result<Device> {
    Err(PolicyError::Device {
        requested: DeviceSpec::Cuda(ordinal).to_string(),
        reason: "this binary was built without the `cuda` feature; build it with \
                 scripts/build-cuda.sh (docs/gpu.md)"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_specs_parse_and_print() {
        for (text, spec, shown) in [
            ("auto", DeviceSpec::Auto, "auto"),
            ("cpu", DeviceSpec::Cpu, "cpu"),
            ("cuda", DeviceSpec::Cuda(0), "cuda:0"),
            ("cuda:3", DeviceSpec::Cuda(3), "cuda:3"),
        ] {
            let parsed: DeviceSpec = text.parse().unwrap();
            assert_eq!(parsed, spec);
            assert_eq!(parsed.to_string(), shown);
        }
        for bad in ["", "cuda:", "cuda:x", "tpu", "cuda:-1"] {
            let err = bad.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(err.contains("expected auto, cpu, cuda or cuda:N"), "{err}");
        }
    }

    #[test]
    fn cpu_and_auto_resolve_without_a_gpu() {
        assert!(DeviceSpec::Cpu.resolve().unwrap().is_cpu());
        assert_eq!(device_label(&Device::Cpu), "cpu");
        assert_eq!(compute_dtype(&Device::Cpu), DType::F32);
        // This machine class has no GPU: auto must fall back to the CPU, never fail or panic.
        if std::path::Path::new("/dev/nvidiactl").exists() {
            return;
        }
        assert!(DeviceSpec::Auto.resolve().unwrap().is_cpu());
        let err = DeviceSpec::Cuda(0).resolve().unwrap_err().to_string();
        assert!(err.starts_with("open device cuda:0: "), "{err}");
    }
}
