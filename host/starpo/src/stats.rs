//! Small statistics helpers shared by the filter, the advantages and the metrics.

/// Whether every value is the same, decided by `max == min` rather than by a computed spread, so
/// that summation residue (eight scores of 10.7 have a computed std of about 2e-15) never makes a
/// constant group look uncertain (StarPO-S ranks groups by their std, `docs/ragen-semantics.md`
/// §6). True for an empty slice.
pub fn all_equal(xs: &[f64]) -> bool {
    xs.iter().all(|x| *x == xs[0])
}

/// Arithmetic mean; 0 for an empty slice, and exactly the common value for a constant slice.
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else if all_equal(xs) {
        xs[0]
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Unbiased (n-1) standard deviation, as torch's `std`; 0 for fewer than two values (torch gives
/// NaN there; RAGEN never hits it with group_size > 1), and exactly 0 when every value is equal
/// ([`all_equal`]).
pub fn std_unbiased(xs: &[f64]) -> f64 {
    if xs.len() < 2 || all_equal(xs) {
        return 0.0;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// Standard error of the mean: [`std_unbiased`] / sqrt(n); 0 for fewer than two values.
pub fn std_error(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    std_unbiased(xs) / (xs.len() as f64).sqrt()
}

/// Unbiased (n-1) variance of `xs`, as torch's `var`; 0 for fewer than two values.
pub fn var_unbiased(xs: &[f64]) -> f64 {
    let s = std_unbiased(xs);
    s * s
}

#[cfg(test)]
mod tests {
    #[test]
    fn unbiased_std() {
        // values 1, 2, 3, 4: mean 2.5, squared deviations 5, / 3
        assert!((super::std_unbiased(&[1.0, 2.0, 3.0, 4.0]) - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(super::std_unbiased(&[7.0]), 0.0);
        // success 3 of 4: std sqrt(0.25) = 0.5, stderr 0.5 / 2
        assert_eq!(super::std_error(&[1.0, 1.0, 0.0, 1.0]), 0.25);
    }

    #[test]
    fn constant_values_have_exact_mean_and_zero_std() {
        // Eight scores of 10.7 sum to 85.60000000000001 in f64, so the textbook formulas
        // give a mean of 10.700000000000001 and a std of about 1.9e-15; max == min must win.
        let xs = [10.7; 8];
        let naive_mean = xs.iter().sum::<f64>() / 8.0;
        let naive_var = xs.iter().map(|x| (x - naive_mean).powi(2)).sum::<f64>() / 7.0;
        assert!(
            naive_mean != 10.7 && naive_var.sqrt() > 1e-15,
            "the residue this guards against"
        );
        assert_eq!(super::mean(&xs), 10.7);
        assert_eq!(super::std_unbiased(&xs), 0.0);
        assert!(super::all_equal(&xs) && !super::all_equal(&[10.7, 10.700000000000001]));
    }
}
