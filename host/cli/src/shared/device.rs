//! `--device auto|cpu|cuda[:N]`, shared by the subcommands that run a model.

use anyhow::Context;
use ragen_gym_policy::{Device, DeviceSpec};

/// Where the model runs.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DeviceArgs {
    /// `auto` (a GPU when this is a CUDA build and one is usable, else the CPU), `cpu`, `cuda`
    /// or `cuda:N`. Computes in bf16 on CUDA and f32 on the CPU; weights, optimiser state and
    /// checkpoints are f32 either way (docs/gpu.md).
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub device: DeviceSpec,
}

impl DeviceArgs {
    /// Open the device (logs which one was chosen).
    pub fn open(&self) -> anyhow::Result<Device> {
        let device = self
            .device
            .resolve()
            .with_context(|| format!("--device {}", self.device))?;
        tracing::info!(
            device = %ragen_gym_policy::device_label(&device),
            dtype = ?ragen_gym_policy::compute_dtype(&device),
            "model device"
        );
        Ok(device)
    }
}
