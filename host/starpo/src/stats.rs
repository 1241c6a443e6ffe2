//! Small statistics helpers shared by the filter, the advantages and the metrics.

/// Arithmetic mean; 0 for an empty slice.
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Unbiased (n-1) standard deviation, as torch's `std`; 0 for fewer than two values (torch gives
/// NaN there; RAGEN never hits it with group_size > 1).
pub fn std_unbiased(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

#[cfg(test)]
mod tests {
    #[test]
    fn unbiased_std() {
        // values 1, 2, 3, 4: mean 2.5, squared deviations 5, / 3
        assert!((super::std_unbiased(&[1.0, 2.0, 3.0, 4.0]) - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(super::std_unbiased(&[7.0]), 0.0);
    }
}
