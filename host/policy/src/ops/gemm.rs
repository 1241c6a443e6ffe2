//! A row-major view of the `gemm` crate (the kernel candle's CPU matmul also calls).

use gemm::Parallelism;

/// A strided f32 matrix operand: element (i, j) is at `ptr[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

impl<'a> Mat<'a> {
    /// A row-major matrix with row stride `rs` starting at `data[0]`.
    pub(crate) fn rows(data: &'a [f32], rows: usize, cols: usize, rs: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs,
            cs: 1,
        }
    }

    /// The transpose (no copy).
    pub(crate) fn t(self) -> Self {
        Self {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }

    fn check(&self) {
        if self.rows > 0 && self.cols > 0 {
            let last = (self.rows - 1) * self.rs + (self.cols - 1) * self.cs;
            assert!(last < self.data.len(), "gemm operand out of bounds");
        }
    }
}

/// `dst[i * dst_rs + j] = (accumulate ? dst : 0) + alpha · (a · b)[i, j]` for `a` [m, k], `b` [k, n].
pub(crate) fn gemm(
    dst: &mut [f32],
    dst_rs: usize,
    a: Mat<'_>,
    b: Mat<'_>,
    alpha: f32,
    accumulate: bool,
    threads: usize,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "gemm inner dimensions");
    a.check();
    b.check();
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        (m - 1) * dst_rs + n <= dst.len(),
        "gemm destination out of bounds"
    );
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                dst[i * dst_rs..i * dst_rs + n].fill(0.0);
            }
        }
        return;
    }
    let par = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    // SAFETY: every index touched is inside the slices (checked above); dst does not alias a or
    // b because it is borrowed mutably.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            alpha,
            false,
            false,
            false,
            par,
        );
    }
}
