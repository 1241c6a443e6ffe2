//! The one memory probe of the benchmarks: the process's peak resident set (Linux `VmHWM`, reset
//! through `clear_refs`) and, on a GPU, device memory in use sampled every few milliseconds on a
//! thread (the driver's view).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ragen_gym_policy::{self as pol, Device};
use serde_json::{Value, json};

/// How often device memory is sampled.
const DEVICE_SAMPLE_PERIOD: Duration = Duration::from_millis(5);

/// Peak resident set size of this process in MiB (`VmHWM`), where the OS reports it.
fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Reset the peak-RSS counter (Linux: writing 5 to `clear_refs`).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Measures peak memory from [`MemoryProbe::start`] to [`MemoryProbe::finish`].
pub struct MemoryProbe {
    device: Device,
    baseline: Option<u64>,
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What a [`MemoryProbe`] saw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryPeak {
    /// The process's peak resident set in MiB, if the OS reports it.
    pub host_peak_rss_mib: Option<f64>,
    /// Device memory in use at the start and at its peak, bytes (GPU only).
    pub device: Option<(u64, u64)>,
}

impl MemoryProbe {
    /// Reset the peak RSS and, when `device` reports its memory, start sampling it.
    pub fn start(device: &Device) -> Self {
        reset_peak_rss();
        let baseline = pol::device_memory_used(device);
        let peak = Arc::new(AtomicU64::new(baseline.unwrap_or(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = baseline.map(|_| {
            let (device, peak, stop) = (device.clone(), peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(used) = pol::device_memory_used(&device) {
                        peak.fetch_max(used, Ordering::Relaxed);
                    }
                    std::thread::sleep(DEVICE_SAMPLE_PERIOD);
                }
            })
        });
        Self {
            device: device.clone(),
            baseline,
            peak,
            stop,
            thread,
        }
    }

    /// Stop sampling and read the peaks.
    pub fn finish(mut self) -> MemoryPeak {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(used) = pol::device_memory_used(&self.device) {
            self.peak.fetch_max(used, Ordering::Relaxed);
        }
        MemoryPeak {
            host_peak_rss_mib: peak_rss_mib(),
            device: self
                .baseline
                .map(|base| (base, self.peak.load(Ordering::Relaxed))),
        }
    }
}

impl MemoryPeak {
    /// The report's `memory` object: `host_peak_rss_mib`, and on a GPU `device_peak_mib`,
    /// `device_baseline_mib` and `device_peak_above_baseline_mib`.
    pub fn json(&self) -> Value {
        match self.device {
            Some((base, peak)) => json!({
                "device_peak_mib": mib(peak),
                "device_baseline_mib": mib(base),
                "device_peak_above_baseline_mib": mib(peak.saturating_sub(base)),
                "host_peak_rss_mib": self.host_peak_rss_mib,
            }),
            None => json!({ "host_peak_rss_mib": self.host_peak_rss_mib }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_rss_counts_memory_touched_after_the_start() {
        let probe = MemoryProbe::start(&Device::Cpu);
        let before = peak_rss_mib();
        // 64 MiB, every page written so it is resident.
        let block = vec![1u8; 64 << 20];
        std::hint::black_box(&block);
        let peak = probe.finish();
        drop(block);
        if let (Some(before), Some(after)) = (before, peak.host_peak_rss_mib) {
            assert!(after >= before + 60.0, "{before} MiB -> {after} MiB");
        }
        assert_eq!(peak.device, None);
        assert!(peak.json().get("device_peak_mib").is_none());
    }
}
