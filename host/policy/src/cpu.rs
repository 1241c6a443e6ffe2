//! CPU execution settings shared by candle's kernels and ours.

/// The number of threads CPU kernels use: rayon's global pool, which candle's matmul also uses
/// (`RAYON_NUM_THREADS`, else every core).
pub fn num_threads() -> usize {
    candle_core::utils::get_num_threads()
}
