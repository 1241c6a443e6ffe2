//! CPU execution settings shared by candle's kernels and ours.

/// The number of threads CPU kernels use: rayon's global pool, which candle's matmul also uses
/// (`RAYON_NUM_THREADS`, else every core).
pub fn num_threads() -> usize {
    candle_core::utils::get_num_threads()
}

/// Fixes the thread count for the rest of the process by setting `RAYON_NUM_THREADS` to
/// [`num_threads`]'s value, unless the user set it; returns the count.
///
/// Why: candle 0.11 derives the count again on every call of `candle_core::utils::get_num_threads`,
/// which its CPU matmul makes once per matmul (`cpu_backend/mod.rs`, `MatMul::f`). Without
/// `RAYON_NUM_THREADS` that call ends in `num_cpus::get_physical`, which opens and parses
/// `/proc/cpuinfo` (`num_cpus` `src/linux.rs`) wherever the kernel has no
/// `/sys/devices/system/cpu/cpu*/cpu_capacity` (most x86 machines): 3.7 % of a FrozenLake
/// validation's CPU time on the 2-core AMD EPYC of `docs/benchmarks.md`. With the variable set
/// the same call only reads the environment. The count itself is unchanged, so results are too.
///
/// # Safety
/// Sets an environment variable: call it before the process starts a second thread (the first
/// line of `main`), as [`std::env::set_var`] requires.
pub unsafe fn pin_num_threads() -> usize {
    let n = num_threads();
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        // SAFETY: the caller guarantees that no other thread is running.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", n.to_string()) };
    }
    n
}
