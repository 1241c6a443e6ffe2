//! Summary statistics the benchmarks report.

/// The median of `v` (the mean of the middle two for an even count; NaN for none).
pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_even_and_no_counts() {
        assert_eq!(median(vec![0.9, 0.5, 0.7]), 0.7);
        assert_eq!(median(vec![0.4, 0.8, 0.5, 0.6]), 0.55);
        assert_eq!(median(vec![1.25]), 1.25);
        assert!(median(vec![]).is_nan());
    }
}
